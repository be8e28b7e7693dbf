package main

// Browser test of the message search: the real `parley serve --demo`, the
// embedded app in Chromium, as in browser_chat_test.go.

import (
	"context"
	"fmt"
	"testing"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"github.com/parleychat/parley"
)

// ctrl is the Ctrl bit of a key event's modifiers (DevTools: Alt=1,
// Ctrl=2, Meta=4, Shift=8).
const ctrl = 2

// pressKey sends one key press (down, up) with modifiers to the focused
// element, as a keyboard does.
func (d *chatDev) pressKey(key, code string, vk int64, mods int64) {
	d.t.Helper()
	for _, typ := range []input.DispatchKeyEventType{input.DispatchKeyEventTypeKeyDown, input.DispatchKeyEventTypeKeyUp} {
		p := input.DispatchKeyEventParams{Type: typ, Key: key, Code: code, WindowsVirtualKeyCode: vk, NativeVirtualKeyCode: vk, Modifiers: mods}
		if typ == input.DispatchKeyEventTypeKeyDown && mods == 0 && len(key) == 1 {
			p.Text = key
		}
		if _, err := chromedp.Call(d.ctx, input.DispatchKeyEvent, p); err != nil {
			d.t.Fatal(err)
		}
	}
}

// TestBrowserSearch: c-team holds 300 messages, one of them about a
// zeppelin after an emoji (a code point that is two UTF-16 units), and the
// group "Boat club" one more. "/" on the list opens the search, Escape
// closes it, Ctrl+K opens it again; the query finds both hits, newest
// first, each with its conversation's name, the sender, the time and
// exactly the matched word marked. A click on the c-team hit opens the
// timeline at that message — scrolled into view and marked — with only
// the page around it loaded (neither the first message nor the newest);
// "Load newer" reads onward, "Jump to the newest" goes back to the live
// end. A query of many hits pages with "More"; a query the server refuses
// says why.
func TestBrowserSearch(t *testing.T) {
	const total = 300
	b := sqliteBackend(t)
	p := chatServe(t, b)
	s := b.store(t)
	ctx := context.Background()
	ben := parley.Principal{User: "ben", DeviceID: "seed", InstallID: "seed"}
	if _, err := s.CreateConversation(ctx, parley.Principal{User: "ana"}, parley.NewConversation{ID: "c-boats", Kind: parley.KindGroup, Title: "Boat club", Members: []string{"ana", "ben"}}); err != nil {
		t.Fatal(err)
	}
	var hitSeq int64
	for i := range total {
		body := fmt.Sprintf("filler message %d", i+1)
		if i == 120 {
			body = "🚀 our zeppelin leaves at dawn"
		}
		sent, err := s.Send(ctx, ben, parley.SendRequest{Conv: "c-team", CMID: fmt.Sprint("seed-", i), Body: body})
		if err != nil {
			t.Fatal(err)
		}
		if i == 120 {
			hitSeq = sent.Seq
		}
	}
	if _, err := s.Send(ctx, ben, parley.SendRequest{Conv: "c-boats", CMID: "boat", Body: "a Zeppelin-shaped boat"}); err != nil {
		t.Fatal(err)
	}

	browser := newBrowser(t)
	ana := newDev(t, browser, "ana")
	ana.signIn(p.http, "ana")
	ana.waitJS("the conversation list", `!!document.querySelector("[data-test=conv][data-conv='c-boats']")`)

	// "/" outside a text field opens the search (loaded now); Escape closes it.
	ana.do(chromedp.Evaluate[chromedp.Void](`document.activeElement && document.activeElement.blur()`))
	if devEval[bool](ana, `performance.getEntriesByType("resource").some(e => e.name.includes("/search."))`) {
		t.Fatal("the search module was part of the first load")
	}
	ana.pressKey("/", "Slash", 191, 0)
	ana.waitJS("the search dialog", `document.querySelector("[data-test=search]")?.open === true && document.activeElement?.dataset.test === "search-box"`)
	if v := devEval[string](ana, `document.querySelector("[data-test=search-box]").value`); v != "" {
		t.Fatalf("the / went into the box: %q", v)
	}
	ana.pressKey("Escape", "Escape", 27, 0)
	ana.waitJS("the dialog closed", `document.querySelector("[data-test=search]")?.open === false`)
	ana.pressKey("k", "KeyK", 75, ctrl)
	ana.waitJS("the search dialog again", `document.querySelector("[data-test=search]")?.open === true && document.activeElement?.dataset.test === "search-box"`)

	ana.do(chromedp.SendKeys(`[data-test=search-box]`, "zeppelin\r"))
	hits := `[...document.querySelectorAll("[data-test=search-hit]")]`
	ana.waitJS("two hits", hits+`.length === 2`)
	type hit struct {
		Conv, Seq, Where, Sender, Marks, Body, Time string
	}
	got := devEval[[]hit](ana, hits+`.map(a => ({Conv: a.dataset.conv, Seq: a.dataset.seq,
		Where: a.querySelector("[data-test=search-conv]").textContent, Sender: a.querySelector("[data-test=search-sender]").textContent,
		Marks: [...a.querySelectorAll("[data-test=search-mark]")].map(m => m.textContent).join("|"),
		Body: a.querySelector("[data-test=search-body]").textContent, Time: a.querySelector("time")?.getAttribute("datetime") || ""}))`)
	want := []hit{
		{Conv: "c-boats", Where: "Boat club", Sender: "ben", Marks: "Zeppelin", Body: "a Zeppelin-shaped boat"},
		{Conv: "c-team", Seq: fmt.Sprint(hitSeq), Where: "C team", Sender: "ben", Marks: "zeppelin", Body: "🚀 our zeppelin leaves at dawn"},
	}
	if len(got) != 2 {
		t.Fatalf("hits %+v", got)
	}
	for i, w := range want {
		g := got[i]
		if w.Seq == "" {
			w.Seq = g.Seq
		}
		w.Time = g.Time
		if g != w || g.Time == "" {
			t.Errorf("hit %d: %+v\nwant %+v (and a time)", i, g, w)
		}
	}
	ana.screenshot("hits")

	// The c-team hit opens the timeline at the message, not at its end.
	ana.click("the c-team hit", hits+`.find(a => a.dataset.conv === "c-team")`)
	ana.waitJS("the dialog closed", `document.querySelector("[data-test=search]").open === false`)
	focused := `document.querySelector("[data-test=events] [data-test=msg][data-focus]")`
	ana.waitJS("the marked message", focused+`?.dataset.seq === "`+fmt.Sprint(hitSeq)+`"`)
	if u := devEval[string](ana, `location.pathname + location.search`); u != fmt.Sprintf("/c/c-team?m=%d", hitSeq) {
		t.Errorf("address %s", u)
	}
	ana.waitJS("the message in view", `(() => { const m = `+focused+`.getBoundingClientRect(), s = document.querySelector("[data-test=timeline]").getBoundingClientRect();
		return m.top >= s.top && m.bottom <= s.bottom; })()`)
	if body := devEval[string](ana, focused+`.querySelector("[data-test=body]").textContent`); body != "🚀 our zeppelin leaves at dawn" {
		t.Errorf("marked message %q", body)
	}
	msgs := `document.querySelectorAll("[data-test=events] [data-test=msg]").length`
	bodies := ana.bodies()
	if n := len(bodies); n < 10 || n > 160 {
		t.Errorf("%d messages loaded around the hit, want a page or two, not the history", n)
	}
	for _, b := range bodies {
		if b == "filler message 1" || b == fmt.Sprintf("filler message %d", total) {
			t.Errorf("%q loaded: the timeline read history far from the hit", b)
		}
	}
	ana.screenshot("opened")
	ana.waitJS("Load newer", `!document.querySelector("[data-test=load-newer]").closest(".hidden")`)
	n := devEval[int](ana, msgs)
	ana.click("Load newer", `document.querySelector("[data-test=load-newer]")`)
	ana.waitJS("a newer page", msgs+` > `+fmt.Sprint(n))
	if seq := devEval[string](ana, focused+`?.dataset.seq`); seq != fmt.Sprint(hitSeq) {
		t.Errorf("the mark moved to %q after a newer page", seq)
	}
	// "Jump to the newest" goes back to the live end.
	ana.click("Jump to the newest", `document.querySelector("[data-test=jump-newest]")`)
	ana.waitJS("the newest message", `[...document.querySelectorAll("[data-test=events] [data-test=body]")].at(-1)?.textContent === "filler message `+fmt.Sprint(total)+`"`)
	ana.waitJS("no Load newer", `!!document.querySelector("[data-test=load-newer]").closest(".hidden")`)
	if u := devEval[string](ana, `location.pathname + location.search`); u != "/c/c-team" {
		t.Errorf("address after the jump: %s", u)
	}
	ana.say("live again")
	ana.waitOnce("live again")

	// Many hits page with More; a refused query says why.
	ana.pressKey("k", "KeyK", 75, ctrl)
	ana.waitJS("the search dialog", `document.querySelector("[data-test=search]").open`)
	ana.do(chromedp.Evaluate[chromedp.Void](`document.querySelector("[data-test=search-box]").value = ""`),
		chromedp.SendKeys(`[data-test=search-box]`, "filler\r"))
	ana.waitJS("a first page of 20", hits+`.length === 20 && !document.querySelector("[data-test=search-more]").classList.contains("hidden")`)
	if first := devEval[string](ana, hits+`[0].querySelector("[data-test=search-body]").textContent`); first != fmt.Sprintf("filler message %d", total) {
		t.Errorf("first hit %q, want the newest", first)
	}
	ana.click("More", `document.querySelector("[data-test=search-more]")`)
	ana.waitJS("a second page", hits+`.length === 40`)
	if n := devEval[int](ana, `new Set(`+hits+`.map(a => a.dataset.seq)).size`); n != 40 {
		t.Errorf("%d distinct hits in 40", n)
	}
	ana.do(chromedp.Evaluate[chromedp.Void](`document.querySelector("[data-test=search-box]").value = ""`),
		chromedp.SendKeys(`[data-test=search-box]`, "zeppelin from:\r"))
	ana.waitJS("the refusal", `document.querySelector("[data-test=search-status]").textContent.includes("from: must name a user id") && `+hits+`.length === 0`)
	if n := ana.dialogs.Load(); n != 0 {
		t.Errorf("%d JavaScript dialogs opened", n)
	}
}
