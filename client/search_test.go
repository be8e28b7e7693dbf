package client_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/client"
)

// TestGatewaySearch: Client.Search against the real gateway pages through
// the hits newest first, each with the message as the user reads it and
// its highlights in code points; before, from and conv narrow it; the
// server's refusals come back as *parley.Error with their codes.
func TestGatewaySearch(t *testing.T) {
	s := newStore(t)
	g := newGateway(t, s)
	dir := t.TempDir()
	ana := start(t, client.Options{URLs: []string{g.url}, Token: token(t, s, "ana", "d1", "i1"), Outbox: filepath.Join(dir, "ana.db")})
	ben := start(t, client.Options{URLs: []string{g.url}, Token: token(t, s, "ben", "d1", "i1"), Outbox: filepath.Join(dir, "ben.db")})
	ana.waitConnected(t)
	ben.waitConnected(t)
	for _, body := range []string{"the blue boat", "a red car", "我明天去上海 blue"} { // seqs 3, 4, 5
		if _, err := ana.Send(ctxT(t), "g1", body); err != nil {
			t.Fatal(err)
		}
	}

	page, err := ben.Search(ctxT(t), parley.SearchRequest{Query: "blue", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Hits) != 1 || page.Next == "" {
		t.Fatalf("first page %+v", page)
	}
	if h := page.Hits[0]; h.Ev.Seq != 5 || h.Ev.Sender != "ana" || h.Ev.Body != "我明天去上海 blue" || fmt.Sprint(h.Highlights) != "[{7 11}]" || h.Ev.AsOf == nil {
		t.Errorf("newest hit %+v", h)
	}
	page, err = ben.Search(ctxT(t), parley.SearchRequest{Query: "blue", Limit: 1, Cursor: page.Next})
	if err != nil || len(page.Hits) != 1 || page.Hits[0].Ev.Seq != 3 || page.Next != "" {
		t.Fatalf("second page %+v, %v", page, err)
	}
	page, err = ben.Search(ctxT(t), parley.SearchRequest{Query: "上海", Conv: "g1", From: "ana"})
	if err != nil || len(page.Hits) != 1 || fmt.Sprint(page.Hits[0].Highlights) != "[{4 6}]" {
		t.Errorf("a Chinese word, in g1 from ana: %+v, %v", page, err)
	}
	// before travels as RFC 3339 whatever the time's zone.
	later := time.Now().Add(time.Hour).In(time.FixedZone("east", 5*3600+1800))
	if page, err := ben.Search(ctxT(t), parley.SearchRequest{Query: "blue", Before: later}); err != nil || len(page.Hits) != 2 {
		t.Errorf("before an hour from now: %+v, %v", page, err)
	}
	if page, err := ben.Search(ctxT(t), parley.SearchRequest{Query: "blue", Before: time.Now().Add(-time.Hour)}); err != nil || len(page.Hits) != 0 {
		t.Errorf("before an hour ago: %+v, %v", page, err)
	}

	var pe *parley.Error
	if _, err := ben.Search(ctxT(t), parley.SearchRequest{Query: "blue", Conv: "nope"}); !errors.As(err, &pe) || pe.Code != parley.CodeNotMember {
		t.Errorf("an unknown conversation: %v, want NOT_MEMBER", err)
	}
	if _, err := ben.Search(ctxT(t), parley.SearchRequest{Query: `"blue`}); !errors.As(err, &pe) || pe.Code != parley.CodeInvalidArgument || pe.Msg != "query has an unbalanced quote" {
		t.Errorf("an unbalanced quote: %v, want INVALID_ARGUMENT", err)
	}
	_, err = ben.Search(ctxT(t), parley.SearchRequest{})
	if !errors.As(err, &pe) || pe.Code != parley.CodeInvalidArgument || pe.Msg != "search needs q" || !client.IsTerminal(err) {
		t.Errorf("no query: %v, want INVALID_ARGUMENT (terminal)", err)
	}
}
