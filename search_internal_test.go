package parley

import (
	"slices"
	"strings"
	"testing"
)

// tokenizeRef is the tokenizer scanTokens replaced, kept as its
// reference: over []rune, every token a new string. The two must cut
// every text the same way, or a message indexed by one would not be found
// by a query cut by the other.
func tokenizeRef(text string, query bool) []span {
	rs := []rune(text)
	var out []span
	for i := 0; i < len(rs); {
		switch classOf(rs[i]) {
		case word:
			j := i + 1
			for j < len(rs) && (classOf(rs[j]) == word || classOf(rs[j]) == mark) {
				j++
			}
			w := rs[i:min(j, i+MaxSearchTokenChars)]
			out = append(out, span{token: strings.ToLower(string(w)), start: i, end: j})
			i = j
		case cjk:
			j := i + 1
			for j < len(rs) && classOf(rs[j]) == cjk {
				j++
			}
			for k := i; k+1 < j; k++ {
				out = append(out, span{token: string(rs[k : k+2]), start: k, end: k + 2, cjk: true})
			}
			if j-i == 1 || !query || j < len(rs) && hasTokenAfterRef(rs[j:]) {
				out = append(out, span{token: string(rs[j-1]), start: j - 1, end: j, cjk: true})
			}
			i = j
		case symbol:
			out = append(out, span{token: string(rs[i]), start: i, end: i + 1})
			i++
		default:
			i++
		}
	}
	return out
}

func hasTokenAfterRef(rs []rune) bool {
	for _, r := range rs {
		if classOf(r) != sep && classOf(r) != mark {
			return true
		}
	}
	return false
}

var tokenizeSeeds = []string{
	"Hello, World!", "我明天去上海出差", "上", "meet at 上海Station 3pm", "thumbs 👍🏽 up",
	"Café déjà-vu", "コーヒー", "... --- !!!", "x" + strings.Repeat("y", 100),
	strings.Repeat("é", MaxSearchTokenChars) + "a", strings.Repeat("a", MaxSearchTokenChars),
	strings.Repeat("漢字", 40) + " end", "bad \xff\xfe bytes", "e\u0301 \u0301x", "上海 ", "上海 .", "上海 x",
	"İstanbul ΣΑΣ", "한국어 텍스트", "々ー", "tab\tnew\nline", "",
}

// FuzzScanTokens: scanTokens cuts every text, as a message and as a
// query, exactly as tokenizeRef does: the same tokens at the same code
// points.
func FuzzScanTokens(f *testing.F) {
	for _, s := range tokenizeSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		for _, query := range []bool{false, true} {
			if got, want := tokenize(text, query), tokenizeRef(text, query); !slices.Equal(got, want) {
				t.Fatalf("tokenize(%q, %v) =\n%+v\nwant\n%+v", text, query, got, want)
			}
		}
		var seq []string
		for tok := range SearchTokensSeq(text) {
			seq = append(seq, tok)
		}
		if got := SearchTokens(text); !slices.Equal(seq, got) {
			t.Fatalf("SearchTokensSeq(%q) = %q, SearchTokens %q", text, seq, got)
		}
	})
}

// scanTokens stops at the first yield that returns false, whatever kind
// of token it is: a loop over SearchTokensSeq that breaks scans no
// further.
func TestScanTokensStops(t *testing.T) {
	for _, text := range []string{"one two three four", "上海市民 and more", "☃ ☃ ☃ words", "a 上海 ☃ b"} {
		all := SearchTokens(text)
		for stop := 1; stop <= len(all); stop++ {
			calls := 0
			scanTokens(text, false, func(span) bool {
				calls++
				return calls < stop
			})
			if calls != stop {
				t.Errorf("%q: %d calls after a false at call %d", text, calls, stop)
			}
		}
		var first []string
		for tok := range SearchTokensSeq(text) {
			first = append(first, tok)
			if len(first) == 2 {
				break
			}
		}
		if !slices.Equal(first, all[:2]) {
			t.Errorf("%q: first two %q, want %q", text, first, all[:2])
		}
	}
}

func TestDocTokenNames(t *testing.T) {
	if got := ConvToken("g1"); got != "\ue000c6731" {
		t.Errorf("ConvToken = %q", got)
	}
	if got := SenderToken("ana"); got != "\ue000u616e61" {
		t.Errorf("SenderToken = %q", got)
	}
}
