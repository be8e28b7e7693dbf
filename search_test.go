package parley_test

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/parleychat/parley"
)

func TestSearchTokens(t *testing.T) {
	tests := []struct {
		text string
		want []string
	}{
		{"Hello, World!", []string{"hello", "world"}},
		{"我明天去上海出差", []string{"我明", "明天", "天去", "去上", "上海", "海出", "出差", "差"}},
		{"上", []string{"上"}},
		{"meet at 上海Station 3pm", []string{"meet", "at", "上海", "海", "station", "3pm"}},
		{"thumbs 👍🏽 up", []string{"thumbs", "👍", "up"}},
		{"Café déjà-vu", []string{"café", "déjà", "vu"}},
		{"コーヒー", []string{"コー", "ーヒ", "ヒー", "ー"}},
		{"... --- !!!", nil},
		{"x" + strings.Repeat("y", 100), []string{"x" + strings.Repeat("y", parley.MaxSearchTokenChars-1)}},
	}
	for _, tt := range tests {
		if got := parley.SearchTokens(tt.text); !slices.Equal(got, tt.want) {
			t.Errorf("SearchTokens(%q) = %q, want %q", tt.text, got, tt.want)
		}
	}
}

func TestParseSearch(t *testing.T) {
	tests := []struct {
		query string
		want  []parley.SearchTerm
		from  string
		in    string
	}{
		{"hello world", []parley.SearchTerm{{Tokens: []string{"hello"}}, {Tokens: []string{"world"}}}, "", ""},
		{`"hello world"`, []parley.SearchTerm{{Tokens: []string{"hello", "world"}}}, "", ""},
		{`"hello wo"*`, []parley.SearchTerm{{Tokens: []string{"hello", "wo"}, Prefix: true}}, "", ""},
		{"deplo*", []parley.SearchTerm{{Tokens: []string{"deplo"}, Prefix: true}}, "", ""},
		{"上海", []parley.SearchTerm{{Tokens: []string{"上海"}}}, "", ""},
		{"去上海", []parley.SearchTerm{{Tokens: []string{"去上", "上海"}}}, "", ""},
		{"上海abc", []parley.SearchTerm{{Tokens: []string{"上海", "海", "abc"}}}, "", ""},
		{"海", []parley.SearchTerm{{Tokens: []string{"海"}, Prefix: true}}, "", ""},
		{"from:ann in:g1 lunch", []parley.SearchTerm{{Tokens: []string{"lunch"}}}, "ann", "g1"},
		{"FROM:ann", nil, "ann", ""},
		{"http://example.com", []parley.SearchTerm{{Tokens: []string{"http", "example", "com"}}}, "", ""},
		{"lunch !!!", []parley.SearchTerm{{Tokens: []string{"lunch"}}}, "", ""},
	}
	for _, tt := range tests {
		q, err := parley.ParseSearch(parley.SearchRequest{Query: tt.query})
		if err != nil {
			t.Errorf("ParseSearch(%q): %v", tt.query, err)
			continue
		}
		if !slices.EqualFunc(q.Terms, tt.want, func(a, b parley.SearchTerm) bool {
			return a.Prefix == b.Prefix && slices.Equal(a.Tokens, b.Tokens)
		}) || q.From != tt.from || q.Conv != tt.in {
			t.Errorf("ParseSearch(%q) = %+v from %q in %q, want %+v from %q in %q", tt.query, q.Terms, q.From, q.Conv, tt.want, tt.from, tt.in)
		}
		if q.Limit != parley.DefaultSearchPage {
			t.Errorf("ParseSearch(%q).Limit = %d, want the default", tt.query, q.Limit)
		}
	}
}

func TestParseSearchRefuses(t *testing.T) {
	tests := []struct {
		name string
		r    parley.SearchRequest
	}{
		{"empty", parley.SearchRequest{Query: "   "}},
		{"too long", parley.SearchRequest{Query: strings.Repeat("a", 1000)}},
		{"unbalanced quote", parley.SearchRequest{Query: `"hello world`}},
		{"invalid UTF-8", parley.SearchRequest{Query: "hello \xff"}},
		{"only punctuation", parley.SearchRequest{Query: "!!! ..."}},
		{"one-letter prefix", parley.SearchRequest{Query: "a*"}},
		{"too many terms", parley.SearchRequest{Query: strings.Repeat("word ", parley.MaxSearchTerms+1)}},
		{"bad from", parley.SearchRequest{Query: "from:"}},
		{"bad in", parley.SearchRequest{Query: "in:a/b"}},
		{"two froms", parley.SearchRequest{Query: "from:ann from:bob"}},
		{"from conflicts with the request", parley.SearchRequest{Query: "from:ann", From: "bob"}},
		{"negative limit", parley.SearchRequest{Query: "x", Limit: -1}},
		{"bad cursor", parley.SearchRequest{Query: "x", Cursor: "!!"}},
		{"cursor of another kind", parley.SearchRequest{Query: "x", Cursor: parley.ConvsCursor{Activity: 5, Conv: "g"}.String()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parley.ParseSearch(tt.r)
			if got := parley.ErrorCode(err); got != parley.CodeInvalidArgument {
				t.Errorf("code = %q (%v), want INVALID_ARGUMENT", got, err)
			}
		})
	}
}

func TestSearchCursorRoundTrip(t *testing.T) {
	c := parley.SearchCursor{At: 1700000000123, Conv: "g-1.x", Seq: 42}
	q, err := parley.ParseSearch(parley.SearchRequest{Query: "x", Cursor: c.String(), Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	if q.After == nil || *q.After != c {
		t.Errorf("cursor = %+v, want %+v", q.After, c)
	}
	if q.Limit != parley.MaxSearchPage {
		t.Errorf("limit = %d, want %d", q.Limit, parley.MaxSearchPage)
	}
}

func TestHighlights(t *testing.T) {
	tests := []struct {
		query, body string
		want        []parley.Highlight
	}{
		{"上海", "我明天去上海出差", []parley.Highlight{{Start: 4, End: 6}}},
		{"hello", "Hello hello HELLO", []parley.Highlight{{Start: 0, End: 5}, {Start: 6, End: 11}, {Start: 12, End: 17}}},
		{`"big deal"`, "a big deal, not a big one", []parley.Highlight{{Start: 2, End: 10}}},
		{"dep*", "deploy and depot", []parley.Highlight{{Start: 0, End: 6}, {Start: 11, End: 16}}},
		{"海", "上海海关", []parley.Highlight{{Start: 1, End: 4}}},
		{"nothing", "something else", nil},
		{"from:ann", "any text", nil},
	}
	for _, tt := range tests {
		q, err := parley.ParseSearch(parley.SearchRequest{Query: tt.query})
		if err != nil {
			t.Fatalf("ParseSearch(%q): %v", tt.query, err)
		}
		if got := parley.Highlights(q, tt.body); !slices.Equal(got, tt.want) {
			t.Errorf("Highlights(%q, %q) = %v, want %v", tt.query, tt.body, got, tt.want)
		}
	}
}

// FuzzParseSearch holds the parser's promises on any input: no panic, an
// error that is INVALID_ARGUMENT, and a parsed query whose every token is
// non-empty valid UTF-8 of at most MaxSearchTokenChars code points with no
// U+E000 (which marks the index's conversation and sender tokens).
func FuzzParseSearch(f *testing.F) {
	for _, s := range []string{"hello world", `"a phrase"*`, "上海", "from:ann in:g lunch*", `"`, "\xff", "👍🏽", "a*", "ー々"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, query string) {
		q, err := parley.ParseSearch(parley.SearchRequest{Query: query})
		if err != nil {
			if parley.ErrorCode(err) != parley.CodeInvalidArgument {
				t.Fatalf("code %q for %q", parley.ErrorCode(err), query)
			}
			return
		}
		if len(q.Terms) > parley.MaxSearchTerms {
			t.Fatalf("%d terms", len(q.Terms))
		}
		for _, term := range q.Terms {
			if len(term.Tokens) == 0 {
				t.Fatalf("empty term in %q", query)
			}
			for _, tok := range term.Tokens {
				if tok == "" || !utf8.ValidString(tok) || utf8.RuneCountInString(tok) > parley.MaxSearchTokenChars || strings.ContainsRune(tok, '\ue000') {
					t.Fatalf("bad token %q from %q", tok, query)
				}
			}
		}
		parley.Highlights(q, query)
	})
}
