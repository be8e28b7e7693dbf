package parley

import (
	"cmp"
	"encoding/base64"
	"encoding/hex"
	"iter"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Search finds messages by their text. Its index is derived state under
// the same two rules as edits and reactions (derived.go):
//
//  1. One index row per version of a message's text (the original, then
//     each edit), written in the transaction of the send or edit that
//     made it; recall deletes every row of the message, purge the rows of
//     purged messages, rollback rebuilds the conversation's rows from the
//     events that remain, all in their own transactions.
//  2. A row matches only for a caller whose periods hold both the
//     message's seq and the version's seq, and only when no newer version
//     of the same message lies in those periods: a caller finds the text
//     they would read, never an old version they would not see, never a
//     recalled message, nothing sent after they left. The filter runs
//     inside the query, before LIMIT.
//
// Both stores index the same tokens, produced here (SearchTokens), so the
// same data gives the same hits on SQLite and PostgreSQL.
//
// Tokens: a run of letters and digits (with their combining marks) is one
// word, lower-cased, cut at MaxSearchTokenChars code points. A run of
// Chinese, Japanese or Korean characters (Han, Hiragana, Katakana, Hangul)
// is indexed as its overlapping pairs of characters, then its last
// character alone: 我明天去 gives 我明 明天 天去 去. So any substring of two or
// more characters is a phrase of pairs, and one character is a prefix of
// some token. A symbol (an emoji) is a token of its own; its modifiers,
// joiners and variation selectors are dropped. Everything else separates
// tokens. Case is folded per code point; accents are kept (café is not
// cafe).

// Search bounds.
const (
	MaxSearchQueryChars = 256 // code points of a query, after trimming
	MaxSearchTerms      = 16  // words and phrases of one query
	MaxSearchTokenChars = 64  // a longer word is indexed and matched by its first 64
	MaxSearchPage       = 50
	DefaultSearchPage   = 20
)

// SearchRequest is the input of Store.Search.
type SearchRequest struct {
	Query  string    // the query text (ParseSearch)
	Conv   string    // only this conversation ("": every one the caller has a period in)
	From   string    // only this sender ("": anyone)
	Before time.Time // only messages sent before this time (zero: no bound)
	Limit  int       // hits per page: 0 means DefaultSearchPage, capped at MaxSearchPage
	Cursor string    // a SearchPage.Next: the page after it ("": the first page)
}

// SearchQuery is a parsed, validated SearchRequest.
type SearchQuery struct {
	Terms  []SearchTerm // all must match (AND)
	Conv   string       // from the request's Conv or the query's in:
	From   string       // from the request's From or the query's from:
	Before time.Time
	Limit  int           // 1..MaxSearchPage
	After  *SearchCursor // continue after this hit (nil: the first page)
}

// SearchTerm is one word or phrase of a query: its tokens must appear
// next to each other, in order; with Prefix the last token matches any
// token it is a prefix of.
type SearchTerm struct {
	Tokens []string
	Prefix bool
}

// SearchCursor is the position of a hit in the order of results: newest
// first by the message's time, then conversation id descending, then seq
// descending. It is a total order, so paging by it neither repeats nor
// skips a hit that matched when the walk started.
type SearchCursor struct {
	At   int64 // the message's time, Unix milliseconds
	Conv string
	Seq  int64
}

// SearchHit is one message found: the event as the caller reads it (Sync's
// decoration, so Body is the version the caller sees) and where in Body
// the query matched.
type SearchHit struct {
	Event      Event
	Highlights []Highlight
}

// Highlight is a matched range of a hit's Body in code points (not bytes):
// [Start, End).
type Highlight struct {
	Start, End int
}

// SearchPage is one page of hits, newest first. Next is set when more hits
// may follow: the Cursor of the next request.
type SearchPage struct {
	Hits []SearchHit
	Next string
}

// String encodes the cursor for a client (base64url, no padding).
func (c SearchCursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.At, 10) + "." + strconv.FormatInt(c.Seq, 10) + "." + c.Conv))
}

// CursorOf is the cursor of a hit's event.
func CursorOf(ev Event) SearchCursor {
	return SearchCursor{At: ev.At.UnixMilli(), Conv: ev.Conv, Seq: ev.Seq}
}

// Before reports whether a hit at c comes after (is older than) the
// position o in the order of results.
func (c SearchCursor) Before(o SearchCursor) bool {
	if c.At != o.At {
		return c.At < o.At
	}
	if c.Conv != o.Conv {
		return c.Conv < o.Conv
	}
	return c.Seq < o.Seq
}

func parseSearchCursor(s string) (*SearchCursor, error) {
	bad := Errorf(CodeInvalidArgument, "cursor must be the next of an earlier search reply")
	if len(s) > maxCursorChars {
		return nil, bad
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, bad
	}
	parts := strings.SplitN(string(raw), ".", 3)
	if len(parts) != 3 {
		return nil, bad
	}
	at, err1 := strconv.ParseInt(parts[0], 10, 64)
	seq, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil || at < 0 || seq < 1 || CheckConvID(parts[2]) != nil {
		return nil, bad
	}
	return &SearchCursor{At: at, Conv: parts[2], Seq: seq}, nil
}

// ParseSearch validates a search request and parses its query. The query
// language: words (all must match), "quoted phrases", a trailing * for a
// prefix (word* or "a phrase"*), from:USER and in:CONV. Words that hold
// no token (punctuation alone) are dropped. Errors (INVALID_ARGUMENT): a
// query that is not valid UTF-8, is empty or longer than
// MaxSearchQueryChars, has an unbalanced quote, more than MaxSearchTerms
// terms, a prefix of one letter, a malformed or conflicting from:/in:,
// nothing to search for; a negative limit; a bad cursor.
func ParseSearch(r SearchRequest) (SearchQuery, error) {
	q := SearchQuery{Conv: r.Conv, From: r.From, Before: r.Before, Limit: r.Limit}
	if r.Conv != "" {
		if err := CheckConvID(r.Conv); err != nil {
			return q, err
		}
	}
	if r.From != "" && !ValidUserID(r.From) {
		return q, Errorf(CodeInvalidArgument, "from must be a user id")
	}
	switch {
	case r.Limit < 0:
		return q, Errorf(CodeInvalidArgument, "limit must not be negative")
	case r.Limit == 0:
		q.Limit = DefaultSearchPage
	default:
		q.Limit = min(r.Limit, MaxSearchPage)
	}
	if r.Cursor != "" {
		c, err := parseSearchCursor(r.Cursor)
		if err != nil {
			return q, err
		}
		q.After = c
	}
	if !utf8.ValidString(r.Query) {
		return q, Errorf(CodeInvalidArgument, "query must be valid UTF-8")
	}
	text := strings.TrimSpace(r.Query)
	if n := utf8.RuneCountInString(text); n == 0 || n > MaxSearchQueryChars {
		return q, Errorf(CodeInvalidArgument, "query must be 1–%d characters", MaxSearchQueryChars)
	}
	if err := q.parse(text); err != nil {
		return q, err
	}
	if len(q.Terms) == 0 && q.From == "" && q.Conv == "" {
		return q, Errorf(CodeInvalidArgument, "query has nothing to search for")
	}
	return q, nil
}

// parse reads the query text into q's terms and filters.
func (q *SearchQuery) parse(text string) error {
	for text != "" {
		r, size := utf8.DecodeRuneInString(text)
		if unicode.IsSpace(r) {
			text = text[size:]
			continue
		}
		var word string
		phrase := r == '"'
		if phrase {
			end := strings.IndexByte(text[1:], '"')
			if end < 0 {
				return Errorf(CodeInvalidArgument, "query has an unbalanced quote")
			}
			word, text = text[1:1+end], text[2+end:]
		} else {
			end := strings.IndexFunc(text, func(r rune) bool { return unicode.IsSpace(r) || r == '"' })
			if end < 0 {
				end = len(text)
			}
			word, text = text[:end], text[end:]
		}
		prefix := false
		if phrase && strings.HasPrefix(text, "*") {
			prefix, text = true, strings.TrimLeft(text, "*")
		}
		if !phrase {
			done, err := q.filter(word)
			if err != nil {
				return err
			}
			if done {
				continue
			}
			if trimmed := strings.TrimRight(word, "*"); trimmed != word {
				prefix, word = true, trimmed
			}
		}
		if err := q.addTerm(word, prefix); err != nil {
			return err
		}
	}
	return nil
}

// filter takes a from:USER or in:CONV word into q; done reports it was one.
func (q *SearchQuery) filter(word string) (done bool, err error) {
	name, value, found := strings.Cut(word, ":")
	if !found {
		return false, nil
	}
	var field *string
	switch strings.ToLower(name) {
	case "from":
		if !ValidUserID(value) {
			return true, Errorf(CodeInvalidArgument, "from: must name a user id")
		}
		field = &q.From
	case "in":
		if CheckConvID(value) != nil {
			return true, Errorf(CodeInvalidArgument, "in: must name a conversation id")
		}
		field = &q.Conv
	default:
		return false, nil
	}
	if *field != "" && *field != value {
		return true, Errorf(CodeInvalidArgument, "query has two different %s: filters", strings.ToLower(name))
	}
	*field = value
	return true, nil
}

// addTerm tokenizes one word or phrase of the query into a term.
func (q *SearchQuery) addTerm(word string, prefix bool) error {
	spans := tokenize(word, true)
	if len(spans) == 0 {
		return nil
	}
	t := SearchTerm{Prefix: prefix}
	for _, s := range spans {
		t.Tokens = append(t.Tokens, s.token)
	}
	last := spans[len(spans)-1]
	if last.cjk && last.end-last.start == 1 {
		t.Prefix = true // one character: any token it begins
	}
	if t.Prefix && !last.cjk && utf8.RuneCountInString(last.token) < 2 {
		return Errorf(CodeInvalidArgument, "a prefix needs at least two letters")
	}
	if len(q.Terms) == MaxSearchTerms {
		return Errorf(CodeInvalidArgument, "query has more than %d terms", MaxSearchTerms)
	}
	q.Terms = append(q.Terms, t)
	return nil
}

// SearchTokens returns the tokens of a message's text, in order: what both
// stores index, one position each.
func SearchTokens(body string) []string {
	out := make([]string, 0, len(body)/4+1)
	scanTokens(body, false, func(s span) bool { out = append(out, s.token); return true })
	return out
}

// SearchTokensSeq yields the tokens SearchTokens returns, in order,
// without building the slice: a store that writes them straight into its
// index row spends no allocation on the list.
func SearchTokensSeq(body string) iter.Seq[string] {
	return func(yield func(string) bool) {
		scanTokens(body, false, func(s span) bool { return yield(s.token) })
	}
}

// SearchDocTokens returns everything a store indexes for one version of a
// message: its text's tokens, then a token for the conversation and one
// for the sender (ConvToken, SenderToken), so a store can narrow a match
// to a caller's conversations or to from: inside its text index. Those
// two begin with U+E000, which no text token holds.
func SearchDocTokens(conv, sender, body string) []string {
	return append(SearchTokens(body), ConvToken(conv), SenderToken(sender))
}

// ConvToken is the index token of a conversation (SearchDocTokens).
func ConvToken(conv string) string { return string(AppendConvToken(nil, conv)) }

// SenderToken is the index token of a sender (SearchDocTokens).
func SenderToken(user string) string { return string(AppendSenderToken(nil, user)) }

// AppendConvToken appends ConvToken(conv) to b.
func AppendConvToken(b []byte, conv string) []byte {
	return hex.AppendEncode(append(b, "\ue000c"...), []byte(conv))
}

// AppendSenderToken appends SenderToken(user) to b.
func AppendSenderToken(b []byte, user string) []byte {
	return hex.AppendEncode(append(b, "\ue000u"...), []byte(user))
}

// span is one token of a text and the code points it covers.
type span struct {
	token      string
	start, end int // code points of the text, [start, end)
	cjk        bool
}

// class sorts a code point for tokenizing.
type class int

const (
	sep class = iota
	word
	mark // a combining mark: part of a word when it follows one
	cjk
	symbol
)

func classOf(r rune) class {
	if r < utf8.RuneSelf { // no ASCII character is CJK, a mark or a So symbol
		if 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' {
			return word
		}
		return sep
	}
	switch {
	case unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul) || r == 'ー' || r == '々':
		return cjk
	case unicode.IsLetter(r) || unicode.IsDigit(r):
		return word
	case unicode.Is(unicode.M, r):
		return mark
	case unicode.Is(unicode.So, r):
		return symbol
	}
	return sep
}

// tokenize cuts text into spans (scanTokens).
func tokenize(text string, query bool) []span {
	var out []span
	scanTokens(text, query, func(s span) bool { out = append(out, s); return true })
	return out
}

// decodeRune is utf8.DecodeRuneInString with ASCII inline.
func decodeRune(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// scanTokens calls yield with each token of text, in order: a word (letters,
// digits and the marks that follow them, lowercased, at most
// MaxSearchTokenChars), each pair of neighbouring characters of a CJK run
// and the run's last character, a So symbol alone. A query (query true)
// leaves out the last character token of a CJK run that ends the text:
// "上海" as a query is the pair 上海 alone, which a text's 上海 海出 … holds,
// while the text's lone last 海 would not follow it there. Tokens are
// substrings of text where they can be (no allocation); an invalid UTF-8
// byte is the symbol U+FFFD, as a []rune conversion makes it. It stops
// when yield returns false.
func scanTokens(text string, query bool, yield func(span) bool) {
	var offs [32]int // byte offsets of a CJK run's characters
	pos := 0         // code points before text[i:]
	for i := 0; i < len(text); {
		r, w := decodeRune(text, i)
		switch classOf(r) {
		case word:
			j, n, cut := i+w, 1, -1
			for j < len(text) {
				if n == MaxSearchTokenChars {
					cut = j
				}
				r, w := decodeRune(text, j)
				if c := classOf(r); c != word && c != mark {
					break
				}
				j += w
				n++
			}
			if cut < 0 {
				cut = j
			}
			if !yield(span{token: strings.ToLower(text[i:cut]), start: pos, end: pos + n}) {
				return
			}
			i, pos = j, pos+n
		case cjk:
			at := append(offs[:0], i)
			j := i + w
			for j < len(text) {
				r, w := decodeRune(text, j)
				if classOf(r) != cjk {
					break
				}
				at = append(at, j)
				j += w
			}
			n := len(at)
			at = append(at, j)
			for k := 0; k+1 < n; k++ {
				if !yield(span{token: text[at[k]:at[k+2]], start: pos + k, end: pos + k + 2, cjk: true}) {
					return
				}
			}
			if n == 1 || !query || j < len(text) && hasTokenAfter(text[j:]) {
				if !yield(span{token: text[at[n-1]:j], start: pos + n - 1, end: pos + n, cjk: true}) {
					return
				}
			}
			i, pos = j, pos+n
		case symbol:
			tok := text[i : i+w]
			if r == utf8.RuneError && w == 1 {
				tok = string(utf8.RuneError)
			}
			if !yield(span{token: tok, start: pos, end: pos + 1}) {
				return
			}
			i, pos = i+w, pos+1
		default:
			i, pos = i+w, pos+1
		}
	}
}

// hasTokenAfter reports whether a query's remaining code points make a
// token: then a CJK run before them keeps its last character, as the text
// it must match does.
func hasTokenAfter(s string) bool {
	for _, r := range s {
		if c := classOf(r); c != sep && c != mark {
			return true
		}
	}
	return false
}

// Highlights returns where q's terms match body, in code points, merged
// and in order: the ranges of each run of tokens that matches a term.
func Highlights(q SearchQuery, body string) []Highlight {
	spans := tokenize(body, false)
	var marks []Highlight
	for _, t := range q.Terms {
		for i := range spans {
			if end, ok := matchAt(spans, i, t); ok {
				marks = append(marks, Highlight{Start: spans[i].start, End: spans[end].end})
			}
		}
	}
	return mergeHighlights(marks)
}

// matchAt reports whether term t matches spans from i on, and the index of
// its last span.
func matchAt(spans []span, i int, t SearchTerm) (int, bool) {
	n := len(t.Tokens)
	if i+n > len(spans) {
		return 0, false
	}
	for k, tok := range t.Tokens {
		got := spans[i+k].token
		if k == n-1 && t.Prefix {
			if !strings.HasPrefix(got, tok) {
				return 0, false
			}
		} else if got != tok {
			return 0, false
		}
	}
	return i + n - 1, true
}

func mergeHighlights(marks []Highlight) []Highlight {
	if len(marks) == 0 {
		return nil
	}
	slices.SortFunc(marks, func(a, b Highlight) int {
		return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.End, b.End))
	})
	out := marks[:1]
	for _, m := range marks[1:] {
		last := &out[len(out)-1]
		if m.Start <= last.End {
			last.End = max(last.End, m.End)
			continue
		}
		out = append(out, m)
	}
	return out
}

// ErrSearchBuilding is the answer to a search over a conversation whose
// index is not built yet (after an upgrade, until `parley search rebuild`
// or the server's own rebuild at start has done it): retryable, never an
// empty result that would read as "no such message".
func ErrSearchBuilding() error {
	return Errorf(CodeUnavailable, "the search index is being built; try again later")
}

// SearchRebuild reports the progress of Store.RebuildSearch.
type SearchRebuild struct {
	Convs int   // conversations rebuilt so far
	Total int   // conversations to rebuild
	Rows  int64 // index rows written so far (one per version)
}

// SearchProgress is told of a rebuild's progress after each conversation.
type SearchProgress func(SearchRebuild)

// RebuildEach is the loop of Store.RebuildSearch both stores share: one
// rebuild per conversation of ids, in order, adding up the rows each
// wrote and telling progress (may be nil) after each; the first error
// stops it, with what was done so far.
func RebuildEach(ids []string, progress SearchProgress, one func(conv string) (rows int64, err error)) (SearchRebuild, error) {
	out := SearchRebuild{Total: len(ids)}
	for _, id := range ids {
		n, err := one(id)
		if err != nil {
			return out, err
		}
		out.Convs++
		out.Rows += n
		if progress != nil {
			progress(out)
		}
	}
	return out, nil
}

// NewSearchPage makes a page of the hits evs (at most q.Limit+1 events, in
// the order of results, decorated for the caller): the first q.Limit with
// their highlights, and Next when one more was read.
func NewSearchPage(q SearchQuery, evs []Event) SearchPage {
	var page SearchPage
	if len(evs) > q.Limit {
		evs = evs[:q.Limit]
		page.Next = CursorOf(evs[len(evs)-1]).String()
	}
	page.Hits = make([]SearchHit, len(evs))
	for i, ev := range evs {
		page.Hits[i] = SearchHit{Event: ev, Highlights: Highlights(q, ev.Body)}
	}
	return page
}
