package main

// Browser tests of typing and presence end to end: two users in two
// browser contexts against the real server.

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserTypingPresence: typing appears and clears. Ben writes in
// c-team's composer: ana's page shows "ben is typing…" under the timeline
// (ben's own page shows nobody); his message clears it at once, before its
// until; typing again without sending clears by itself at until. Presence:
// ana's page shows ben online (GET /api/presence, then pushes), away when
// his page is hidden, online again on his input, and offline once his
// page is gone.
func TestBrowserTypingPresence(t *testing.T) {
	p := chatServe(t, sqliteBackend(t))
	if st := callAPI(t, p.http, login(t, p.http, "cy"), "GET", "/api/presence?users=cy", nil, nil); st != 200 {
		t.Fatalf("GET /api/presence: %d, want 200", st)
	}
	browser := newBrowser(t)
	ana, ben := pairInTeam(t, browser, p.http)
	ben.say("hi")
	ana.waitOnce("hi")
	// Writing "hi" sent a typing frame; the next one goes 3 s later (the
	// page's and the server's throttle).
	time.Sleep(3100 * time.Millisecond)

	line := `document.querySelector("[data-test=conv-view] > [data-test=typing]")?.textContent`
	ben.do(chromedp.SendKeys(`[data-test=composer]`, "typing a long"))
	ana.waitJS("ben typing", line+` === "ben is typing…"`)
	ana.screenshot("typing")
	if got := devEval[string](ben, `(`+line+`) || ""`); got != "" {
		t.Errorf("ben's own page shows %q", got)
	}
	// His message clears the line with its arrival (the page handles the
	// arrival before it shows the message), well before its until (5 s).
	ben.say(" message")
	ana.waitOnce("typing a long message")
	if got := devEval[string](ana, line); got != "" {
		t.Errorf("with ben's message shown, the line still says %q", got)
	}
	// Typing without sending: the line clears by itself.
	time.Sleep(3100 * time.Millisecond) // past the 3 s between typing frames
	ben.do(chromedp.SendKeys(`[data-test=composer]`, "never sent"))
	ana.waitJS("ben typing again", line+` === "ben is typing…"`)
	ana.waitJS("the line cleared at until", line+` === ""`)
	if n := devEval[int](ana, countJS("[data-test=body]", "never sent")); n != 0 {
		t.Fatalf("the unsent text reached ana")
	}

	// Presence: ben online, away while his page is hidden, online again,
	// offline when his page is gone.
	dot := `[...document.querySelectorAll("[data-test=events] [data-test=msg] [data-name-of=ben]")].every(e => e.dataset.presence === %q)`
	ana.waitJS("ben online", fmt.Sprintf(dot, "online"))
	ben.do(chromedp.Evaluate[chromedp.Void](`Object.defineProperty(document, "visibilityState", {configurable: true, get: () => "hidden"}); document.dispatchEvent(new Event("visibilitychange"))`))
	ana.waitJS("ben away", fmt.Sprintf(dot, "away"))
	ben.do(chromedp.Evaluate[chromedp.Void](`Object.defineProperty(document, "visibilityState", {configurable: true, get: () => "visible"}); document.dispatchEvent(new Event("visibilitychange"))`))
	ana.waitJS("ben online again", fmt.Sprintf(dot, "online"))
	ben.do(chromedp.Navigate("about:blank"))
	ana.waitJS("ben offline", fmt.Sprintf(dot, "offline"))
}
