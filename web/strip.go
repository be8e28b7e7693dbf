package web

import (
	"bytes"
	"fmt"
)

// stripComments empties the lines of a JavaScript module (or, with css, a
// stylesheet) that hold nothing but comments: the app's sources explain
// themselves at length, and a browser need not download that. Every line
// keeps its newline, so a line number in a stack trace or the DevTools is
// the source's. A line with any code on it is kept whole.
//
// It scans the source as JavaScript's lexical grammar does, as far as
// comments need: strings, template literals with their ${} expressions,
// regular expression literals (told from a division by the token before
// the slash) and both kinds of comment. It refuses a source it cannot
// follow to the end (an unterminated string, template, comment or
// regular expression), and a blanked line that does not read as a comment
// (starting with //, /* or *, or inside a block comment that opens its
// line), so a misreading fails the server's start rather than breaking a
// page.
func stripComments(src []byte, css bool) ([]byte, error) {
	s := scanner{src: src, css: css}
	code, comment, inner, err := s.run()
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	out.Grow(len(src))
	line := 0
	for start := 0; start < len(src); line++ {
		end := bytes.IndexByte(src[start:], '\n')
		next := len(src)
		if end >= 0 {
			end += start
			next = end + 1
		} else {
			end = len(src)
		}
		if comment[line] && !code[line] {
			text := bytes.TrimSpace(src[start:end])
			if !inner[line] && !(bytes.HasPrefix(text, []byte("//")) || bytes.HasPrefix(text, []byte("/*")) || bytes.HasPrefix(text, []byte("*"))) {
				return nil, fmt.Errorf("line %d read as a comment but does not start as one: %q", line+1, text)
			}
		} else {
			out.Write(src[start:end])
		}
		if next > end {
			out.WriteByte('\n')
		}
		start = next
	}
	return out.Bytes(), nil
}

// scanner follows a source's lexical states and records, per line,
// whether it has code (anything outside a comment, strings included) and
// whether it has a comment.
type scanner struct {
	src     []byte
	css     bool
	i       int
	line    int
	code    map[int]bool
	comment map[int]bool
	inner   map[int]bool // lines inside a block comment that opens its line
	last    byte         // the last significant code byte, 0 at the start
	word    []byte       // the last identifier, when last ends one
	braces  []int        // per open template expression, the braces opened inside it
}

func (s *scanner) run() (code, comment, inner map[int]bool, err error) {
	s.code, s.comment, s.inner = map[int]bool{}, map[int]bool{}, map[int]bool{}
	for s.i < len(s.src) {
		c := s.src[s.i]
		switch {
		case c == '\n':
			s.line++
			s.i++
		case c == ' ' || c == '\t' || c == '\r':
			s.i++
		case c == '/' && s.peek(1) == '/' && !s.css:
			s.comment[s.line] = true
			for s.i < len(s.src) && s.src[s.i] != '\n' {
				s.i++
			}
		case c == '/' && s.peek(1) == '*':
			if err := s.block(); err != nil {
				return nil, nil, nil, err
			}
		case c == '"' || c == '\'':
			if err := s.quoted(c); err != nil {
				return nil, nil, nil, err
			}
		case c == '`' && !s.css:
			s.i++
			if err := s.template(); err != nil {
				return nil, nil, nil, err
			}
		case c == '/' && !s.css && s.regexAllowed():
			if err := s.regex(); err != nil {
				return nil, nil, nil, err
			}
		case c == '}' && len(s.braces) > 0 && s.braces[len(s.braces)-1] == 0:
			// The end of a template's ${…}: back inside the template.
			s.braces = s.braces[:len(s.braces)-1]
			s.i++
			if err := s.template(); err != nil {
				return nil, nil, nil, err
			}
		default:
			if len(s.braces) > 0 {
				switch c {
				case '{':
					s.braces[len(s.braces)-1]++
				case '}':
					s.braces[len(s.braces)-1]--
				}
			}
			s.mark(c)
			s.i++
		}
	}
	if len(s.braces) > 0 {
		return nil, nil, nil, fmt.Errorf("line %d: a template literal's ${ is not closed", s.line+1)
	}
	return s.code, s.comment, s.inner, nil
}

func (s *scanner) peek(n int) byte {
	if s.i+n < len(s.src) {
		return s.src[s.i+n]
	}
	return 0
}

// mark records a byte of code.
func (s *scanner) mark(c byte) {
	s.code[s.line] = true
	if isIdent(c) {
		if !isIdent(s.last) {
			s.word = s.word[:0]
		}
		s.word = append(s.word, c)
	}
	s.last = c
}

func isIdent(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// regexAllowed reports whether a slash here starts a regular expression
// literal: at the start, after a punctuator that cannot end an operand,
// or after a keyword that precedes an expression.
func (s *scanner) regexAllowed() bool {
	switch {
	case s.last == 0:
		return true
	case s.last == ')' || s.last == ']' || s.last == '}' || s.last == '"' || s.last == '\'' || s.last == '`':
		return false
	case isIdent(s.last):
		switch string(s.word) {
		case "return", "typeof", "instanceof", "in", "of", "new", "delete", "void", "throw", "case", "do", "else", "yield", "await":
			return true
		}
		return false
	}
	return true
}

// block scans a block comment. Its inner lines are blanked only when it
// opens a line (nothing but space before it); the inner lines of one
// that follows code are kept, so a slash misread as a comment's opening
// could never blank code.
func (s *scanner) block() error {
	start := s.line
	opens := !s.code[start]
	s.i += 2
	for s.i < len(s.src) {
		switch {
		case s.src[s.i] == '\n':
			s.comment[s.line] = true
			s.line++
			if opens {
				s.inner[s.line] = true
			} else {
				s.code[s.line] = true
			}
		case s.src[s.i] == '*' && s.peek(1) == '/':
			s.comment[s.line] = true
			s.i += 2
			return nil
		}
		s.i++
	}
	return fmt.Errorf("line %d: comment not closed", start+1)
}

func (s *scanner) quoted(q byte) error {
	start := s.line
	s.mark(q)
	s.i++
	for s.i < len(s.src) {
		c := s.src[s.i]
		switch {
		case c == '\\':
			if s.peek(1) == '\n' {
				s.line++
				s.code[s.line] = true
			}
			s.i += 2
			continue
		case c == q:
			s.i++
			return nil
		case c == '\n' && !s.css:
			return fmt.Errorf("line %d: string not closed", start+1)
		case c == '\n':
			s.line++
			s.code[s.line] = true
		}
		s.i++
	}
	return fmt.Errorf("line %d: string not closed", start+1)
}

// template scans a template literal's text, from after its opening
// backtick (or the } of an expression) to its closing backtick or to the
// next ${, whose expression the main loop then scans.
func (s *scanner) template() error {
	start := s.line
	s.mark('`')
	for s.i < len(s.src) {
		c := s.src[s.i]
		switch {
		case c == '\\':
			s.i++
			if s.peek(0) == '\n' {
				s.line++
				s.code[s.line] = true
			}
		case c == '`':
			s.i++
			s.last = '`'
			return nil
		case c == '$' && s.peek(1) == '{':
			s.i += 2
			s.braces = append(s.braces, 0)
			s.last = '{'
			return nil
		case c == '\n':
			s.line++
			s.code[s.line] = true
		}
		s.i++
	}
	return fmt.Errorf("line %d: template literal not closed", start+1)
}

func (s *scanner) regex() error {
	start := s.line
	s.mark('/')
	s.i++
	class := false
	for s.i < len(s.src) {
		c := s.src[s.i]
		switch {
		case c == '\\':
			s.i += 2
			continue
		case c == '\n':
			return fmt.Errorf("line %d: regular expression not closed", start+1)
		case c == '[':
			class = true
		case c == ']':
			class = false
		case c == '/' && !class:
			s.i++
			for s.i < len(s.src) && isIdent(s.src[s.i]) {
				s.i++
			}
			s.last = ')' // a regular expression is an operand
			return nil
		}
		s.i++
	}
	return fmt.Errorf("line %d: regular expression not closed", start+1)
}
