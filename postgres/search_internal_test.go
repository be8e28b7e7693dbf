package postgres

import (
	"strconv"
	"testing"

	"github.com/parleychat/parley"
)

// tsvectorLiteral is the tsvector literal of tokens (docLiteral's
// reference): token i (from 0) at
// position i+1 (at most maxPosition). An empty token, which no text
// yields, is left out and keeps its position.
func tsvectorLiteral(tokens []string) string {
	n := 0
	for _, t := range tokens {
		n += len(t) + 8
	}
	b := make([]byte, 0, n)
	for i, tok := range tokens {
		if tok == "" {
			continue
		}
		if len(b) > 0 {
			b = append(b, ' ')
		}
		b = appendLexeme(b, tok)
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(min(i+1, maxPosition)), 10)
	}
	return string(b)
}

// BenchmarkDocLiteral: the Go side of a send's search row, the tsvector
// literal of a short English body, a longer one with a link and code, and
// a Chinese sentence (docs/benchmarks.md, "Sends with the search queue").
func BenchmarkDocLiteral(b *testing.B) {
	for _, c := range []struct{ name, body string }{
		{"short", "message 12 from sender 3"},
		{"long", "Morning! The release notes are at https://parley.example/notes — read *Upgrading* before `parley migrate`."},
		{"chinese", "收到，我明天去上海出差，周五回来。"},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = docLiteral("c-0001", "u-0003", c.body)
			}
		})
	}
}

// FuzzDocLiteral: docLiteral, built in one buffer, is the tsvector
// literal of the tokens a store indexes (parley.SearchDocTokens), token i
// at position i+1.
func FuzzDocLiteral(f *testing.F) {
	for _, s := range []string{"message 12 from sender 3", "收到，我明天去上海出差", "it's a \\ 'quoted' word", "\xff 👍🏽", ""} {
		f.Add("g1", "ana", s)
	}
	f.Fuzz(func(t *testing.T, conv, sender, body string) {
		if got, want := docLiteral(conv, sender, body), tsvectorLiteral(parley.SearchDocTokens(conv, sender, body)); got != want {
			t.Fatalf("docLiteral(%q, %q, %q) =\n%s\nwant\n%s", conv, sender, body, got, want)
		}
	})
}
