package postgres

import "testing"

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
