package postgres

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/parleychat/parley"
)

// lexeme is one operand read back from a literal: its text, and its
// position (tsvector) or prefix mark (tsquery).
type lexeme struct {
	text   string
	pos    int
	prefix bool
}

// readQuoted reads a quoted lexeme at the start of s as PostgreSQL's
// tsvector and tsquery parsers do (gettoken_tsvector): a doubled quote
// stands for one, a backslash for the byte after it. It returns the lexeme
// and the rest of s.
func readQuoted(s string) (string, string, error) {
	if !strings.HasPrefix(s, "'") {
		return "", s, fmt.Errorf("no opening quote at %q", s)
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			if i+1 == len(s) {
				return "", s, errors.New("backslash at the end")
			}
			if s[i+1] != '\\' && s[i+1] != '\'' {
				return "", s, fmt.Errorf("the builder never escapes %q", s[i+1])
			}
			b.WriteByte(s[i+1])
			i++
		case c == '\'' && i+1 < len(s) && s[i+1] == '\'':
			b.WriteByte('\'')
			i++
		case c == '\'':
			if b.Len() == 0 {
				return "", s, errors.New("empty lexeme")
			}
			return b.String(), s[i+1:], nil
		default:
			b.WriteByte(c)
		}
	}
	return "", s, errors.New("unbalanced quote")
}

// readTsvector reads a literal as tsvectorLiteral writes it: lexemes with
// one position each, separated by single spaces.
func readTsvector(s string) ([]lexeme, error) {
	var out []lexeme
	for s != "" {
		if len(out) > 0 {
			if !strings.HasPrefix(s, " ") {
				return nil, fmt.Errorf("no separator at %q", s)
			}
			s = s[1:]
		}
		text, rest, err := readQuoted(s)
		if err != nil {
			return nil, err
		}
		if !strings.HasPrefix(rest, ":") {
			return nil, fmt.Errorf("no position at %q", rest)
		}
		end := 1
		for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
			end++
		}
		pos, err := strconv.Atoi(rest[1:end])
		if err != nil || pos < 1 || pos > maxPosition {
			return nil, fmt.Errorf("bad position %q", rest[:end])
		}
		out = append(out, lexeme{text: text, pos: pos})
		s = rest[end:]
	}
	return out, nil
}

// readTsquery reads a literal as tsqueryLiteral writes it: its operands in
// order with their prefix marks; between them only the operators and
// parentheses it writes, balanced.
func readTsquery(s string) ([]lexeme, error) {
	var out []lexeme
	depth := 0
	for s != "" {
		switch {
		case strings.HasPrefix(s, " "):
			s = s[1:]
		case strings.HasPrefix(s, "("):
			depth, s = depth+1, s[1:]
		case strings.HasPrefix(s, ")"):
			if depth--; depth < 0 {
				return nil, errors.New("unbalanced parenthesis")
			}
			s = s[1:]
		case strings.HasPrefix(s, "<->"):
			s = s[3:]
		case strings.HasPrefix(s, "&"), strings.HasPrefix(s, "|"):
			s = s[1:]
		case strings.HasPrefix(s, "'"):
			text, rest, err := readQuoted(s)
			if err != nil {
				return nil, err
			}
			l := lexeme{text: text}
			if strings.HasPrefix(rest, ":*") {
				l.prefix, rest = true, rest[2:]
			}
			out = append(out, l)
			s = rest
		default:
			return nil, fmt.Errorf("unexpected %q", s)
		}
	}
	if depth != 0 {
		return nil, errors.New("unbalanced parenthesis")
	}
	return out, nil
}

// wantTsvector is what a literal of tokens must read back as.
func wantTsvector(tokens []string) []lexeme {
	var out []lexeme
	for i, t := range tokens {
		if t != "" {
			out = append(out, lexeme{text: t, pos: min(i+1, maxPosition)})
		}
	}
	return out
}

func TestTsvectorLiteral(t *testing.T) {
	for _, tc := range []struct {
		tokens []string
		want   string
	}{
		{nil, ""},
		{[]string{"a"}, `'a':1`},
		{[]string{"it's", `C:\x`, "a b"}, `'it''s':1 'C:\\x':2 'a b':3`},
		{[]string{"x", "", "y"}, `'x':1 'y':3`},
	} {
		if got := tsvectorLiteral(tc.tokens); got != tc.want {
			t.Errorf("tsvectorLiteral(%q) = %s, want %s", tc.tokens, got, tc.want)
		}
	}
	many := make([]string, maxPosition+2)
	for i := range many {
		many[i] = "w"
	}
	got, err := readTsvector(tsvectorLiteral(many))
	if err != nil || got[len(got)-1].pos != maxPosition || got[len(got)-3].pos != maxPosition {
		t.Errorf("past %d positions: %v, %v; want the last ones at %d", maxPosition, got[len(got)-3:], err, maxPosition)
	}
}

func TestTsqueryLiteral(t *testing.T) {
	q := parley.SearchQuery{Terms: []parley.SearchTerm{
		{Tokens: []string{"o'neil"}},
		{Tokens: []string{"上海", "海出"}, Prefix: true},
		{Tokens: []string{`a\b`}, Prefix: true},
	}, From: "ana"}
	sender := `'` + parley.SenderToken("ana") + `'`
	group := `( '` + parley.ConvToken("c1") + `' | '` + parley.ConvToken("c2") + `' )`
	many := make([]string, maxConvTokens+1)
	for i := range many {
		many[i] = "c" + strconv.Itoa(i)
	}
	for _, tc := range []struct {
		name  string
		q     parley.SearchQuery
		convs []string
		want  string
	}{
		{"terms and sender", q, []string{"c1", "c2"}, `'o''neil' & ( '上海' <-> '海出':* ) & 'a\\b':* & ` + sender},
		{"terms alone", parley.SearchQuery{Terms: q.Terms[:1]}, many, `'o''neil'`},
		{"sender alone", parley.SearchQuery{From: "ana"}, []string{"c1", "c2"}, sender},
		{"conversations alone", parley.SearchQuery{Conv: "c1"}, []string{"c1", "c2"}, group},
		{"nothing to match by", parley.SearchQuery{}, many, ""},
	} {
		if got := tsqueryLiteral(tc.q, tc.convs); got != tc.want {
			t.Errorf("%s: tsqueryLiteral = %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

// splitTokens makes a token list of fuzz input: tokens separated by NUL,
// which no token holds (a text column refuses it).
func splitTokens(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\x00")
}

// FuzzTsvectorLiteral: any token list makes a literal that reads back, with
// quotes balanced, as exactly its tokens at their positions.
func FuzzTsvectorLiteral(f *testing.F) {
	for _, s := range []string{"a", "it's\x00\\\x00'\x00''\x00\\'", "a b:1\x00:*\x00&|!<->", "\ue000c6331\x00😀\x00", "\x00\x00x", "\xff\xfe'"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tokens := splitTokens(s)
		lit := tsvectorLiteral(tokens)
		got, err := readTsvector(lit)
		if err != nil {
			t.Fatalf("literal %q of %q: %v", lit, tokens, err)
		}
		if want := wantTsvector(tokens); !slices.Equal(got, want) {
			t.Fatalf("literal %q of %q reads back as %v, want %v", lit, tokens, got, want)
		}
	})
}

// FuzzTsqueryLiteral: a query of any tokens (each term's, the sender's,
// the conversations' when there are no others) makes a literal whose operands read back
// in order, quotes and parentheses balanced, the prefix marks where the
// terms have them.
func FuzzTsqueryLiteral(f *testing.F) {
	f.Add("a\x00b'c", "x\\", true, "ana")
	f.Add("'\x00''", "", false, "")
	f.Add(") & (\x00<->", "|", true, "u")
	f.Fuzz(func(t *testing.T, terms, phrase string, prefix bool, from string) {
		q := parley.SearchQuery{From: from}
		for _, tok := range splitTokens(terms) {
			if tok != "" {
				q.Terms = append(q.Terms, parley.SearchTerm{Tokens: []string{tok}})
			}
		}
		if p := slices.DeleteFunc(splitTokens(phrase), func(s string) bool { return s == "" }); len(p) > 0 {
			q.Terms = append(q.Terms, parley.SearchTerm{Tokens: p, Prefix: prefix})
		}
		convs := []string{"c-1", "c.2"}
		lit := tsqueryLiteral(q, convs)
		got, err := readTsquery(lit)
		if err != nil {
			t.Fatalf("literal %q of %+v: %v", lit, q, err)
		}
		var want []lexeme
		for _, term := range q.Terms {
			for i, tok := range term.Tokens {
				want = append(want, lexeme{text: tok, prefix: term.Prefix && i == len(term.Tokens)-1})
			}
		}
		if from != "" {
			want = append(want, lexeme{text: parley.SenderToken(from)})
		}
		if len(want) == 0 {
			for _, c := range convs {
				want = append(want, lexeme{text: parley.ConvToken(c)})
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("literal %q reads back as %v, want %v", lit, got, want)
		}
	})
}
