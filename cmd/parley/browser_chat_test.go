package main

// Browser tests of the chat screens (issue 13, tests 1–5 and the XSS part
// of 7): the real `parley serve` process, the embedded web app, and Debian's
// Chromium driven over the DevTools protocol. Each simulated device is a
// browser context of its own (cookies, localStorage, IndexedDB). Tests wait
// on DOM state (the data-test attributes of web/app), never on fixed sleeps.

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	browserpb "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/parleychat/parley"
)

// chatDev is one simulated device: a browser context with its own storage.
type chatDev struct {
	t       *testing.T
	name    string
	ctx     context.Context
	dialogs atomic.Int32 // JavaScript dialogs (alert, confirm) the page opened
}

// newDev opens a new browser context (a new device, see newDevice) and
// counts the JavaScript dialogs its page opens (and dismisses them).
func newDev(t *testing.T, browser context.Context, name string) *chatDev {
	t.Helper()
	ctx := newDevice(t, browser)
	d := &chatDev{t: t, name: name, ctx: ctx}
	if err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			d.dialogs.Add(1)
			t.Logf("%s: JavaScript dialog %q", name, e.Message)
			go chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1100, 760)); err != nil {
		t.Fatal(err)
	}
	return d
}

// pairInTeam signs ana and ben in, each on a device of their own in
// browser, on the server at base, and opens c-team on both.
func pairInTeam(t *testing.T, browser context.Context, base string) (ana, ben *chatDev) {
	t.Helper()
	ana, ben = newDev(t, browser, "ana"), newDev(t, browser, "ben")
	ana.signIn(base, "ana")
	ben.signIn(base, "ben")
	ana.open("c-team")
	ben.open("c-team")
	return ana, ben
}

// do runs actions on the device's tab, within browserTimeout. (The first
// action on a chromedp context must run on that context itself, as
// newDevice and newTab do: a context derived with a deadline would bind
// the tab's life to it.)
func (d *chatDev) do(actions ...chromedp.Action[chromedp.Void]) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(d.ctx, browserTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		d.t.Fatalf("%s: %v\npage: %s", d.name, err, d.html())
	}
}

// html is the app's DOM, for failure messages.
func (d *chatDev) html() string {
	ctx, cancel := context.WithTimeout(d.ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.getElementById("app")||document.body||{outerHTML:""}).outerHTML`))
	if err != nil {
		return "(no page: " + err.Error() + ")"
	}
	return s
}

// devEval evaluates a JavaScript expression on the device's page.
func devEval[T any](d *chatDev, expr string) T {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(d.ctx, browserTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		d.t.Fatalf("%s: eval %s: %v", d.name, expr, err)
	}
	return v
}

// waitJS polls a JavaScript condition until it is true (30 s at most).
func (d *chatDev) waitJS(what, expr string) {
	d.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(d.ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("%s: timed out waiting for %s (%s; last error %v)\npage: %s", d.name, what, expr, err, d.html())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// jsq quotes a Go string as a JavaScript string literal.
func jsq(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// signIn signs the device in as user (demo password) and waits for the socket.
func (d *chatDev) signIn(base, user string) {
	d.t.Helper()
	d.do(chromedp.Navigate(base+"/signin"),
		chromedp.WaitVisible(`[data-test=login]`),
		chromedp.SendKeys(`[data-test=login]`, user),
		chromedp.SendKeys(`[data-test=password]`, "parley-demo"),
		chromedp.Click(`[data-test=signin-submit]`))
	d.waitOnline()
}

func (d *chatDev) waitOnline() {
	d.t.Helper()
	d.waitJS("the connection", `document.querySelector("[data-test=conn]")?.dataset.state === "online"`)
}

// open opens a conversation from the list and waits for its timeline.
func (d *chatDev) open(conv string) {
	d.t.Helper()
	sel := `[data-test=conv][data-conv='` + conv + `']`
	d.waitJS("conversation "+conv+" in the list", `!!document.querySelector(`+jsq(sel)+`)`)
	d.do(chromedp.Click(sel))
	d.waitJS("the timeline of "+conv, `document.querySelector("[data-test=conv-view]")?.dataset.conv === `+jsq(conv)+
		` && document.querySelector("[data-test=timeline-status]").textContent === ""`)
}

// say types a message and presses Enter. The Enter is a key-down and a
// key-up, as a keyboard sends them: chromedp's "\r" adds a separate char
// event that a real key press whose key-down was handled never produces.
func (d *chatDev) say(body string) {
	d.t.Helper()
	d.do(chromedp.SendKeys(`[data-test=composer]`, body), chromedp.Focus(`[data-test=composer]`))
	for _, typ := range []input.DispatchKeyEventType{input.DispatchKeyEventTypeRawKeyDown, input.DispatchKeyEventTypeKeyUp} {
		if _, err := chromedp.Call(d.ctx, input.DispatchKeyEvent, input.DispatchKeyEventParams{
			Type: typ, Key: "Enter", Code: "Enter", WindowsVirtualKeyCode: 13, NativeVirtualKeyCode: 13,
		}); err != nil {
			d.t.Fatal(err)
		}
	}
}

// countJS counts the rows of the open timeline showing body: events
// (committed) and outgoing (outbox) rows.
func countJS(sel, body string) string {
	return `[...document.querySelectorAll(` + jsq(sel) + `)].filter(e => e.textContent === ` + jsq(body) + `).length`
}

// waitOnce waits until body is on the timeline exactly once, as a
// committed event, with no outbox row left for it.
func (d *chatDev) waitOnce(body string) {
	d.t.Helper()
	d.waitJS(fmt.Sprintf("%q shown once", body),
		countJS("[data-test=events] [data-test=body]", body)+` === 1 && `+countJS("[data-test=outgoing] [data-test=body]", body)+` === 0`)
}

// bodies lists the message bodies on the open timeline, in order.
func (d *chatDev) bodies() []string {
	d.t.Helper()
	return devEval[[]string](d, `[...document.querySelectorAll("[data-test=events] [data-test=msg] [data-test=body]")].map(e => e.textContent)`)
}

// screenshot saves the device's viewport (see screenshot in browser_test.go).
func (d *chatDev) screenshot(name string) {
	d.t.Helper()
	if screenshot(d.t, d.ctx, name) == "" {
		d.t.Errorf("%s: no screenshot %s", d.name, name)
	}
}

// setOffline cuts (or restores) the device's network, as DevTools'
// "Offline" does: requests and sockets fail and navigator.onLine follows.
func (d *chatDev) setOffline(off bool) {
	d.t.Helper()
	if _, err := chromedp.Call(d.ctx, network.Enable, network.EnableParams{}); err != nil {
		d.t.Fatal(err)
	}
	if _, err := chromedp.Call(d.ctx, network.EmulateNetworkConditionsByRule, network.EmulateNetworkConditionsByRuleParams{
		MatchedNetworkConditions: []*network.Conditions{{Offline: off, DownloadThroughput: -1, UploadThroughput: -1}},
	}); err != nil {
		d.t.Fatal(err)
	}
	if _, err := chromedp.Call(d.ctx, network.OverrideNetworkState, network.OverrideNetworkStateParams{Offline: off, DownloadThroughput: -1, UploadThroughput: -1}); err != nil {
		d.t.Fatal(err)
	}
}

// chatServe starts `parley serve --demo` (ana, ben, cy in c-team) on the backend.
func chatServe(t *testing.T, b backend, env ...string) *proc {
	t.Helper()
	return serveEnv(t, env, "--demo", "--db", b.db, "--data-dir", b.dir)
}

// TestBrowserChatLive (issue 13, test 1 and the XSS part of test 7): two
// users in two browser contexts chat live; every message appears exactly
// once on both sides, in order; a body that is HTML renders as text and runs
// nothing. Screenshots of the list and the timeline are saved.
func TestBrowserChatLive(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		p := chatServe(t, b)
		browser := newBrowser(t)
		ana, ben := pairInTeam(t, browser, p.http)

		const xss = `<img src=x onerror=alert(1)>`
		script := []struct {
			who  *chatDev
			body string
		}{
			{ana, "hello ben"},
			{ben, "hi ana, how are you?"},
			{ana, xss},
			{ben, "<b>bold?</b> & <script>alert(2)</script>"},
			{ana, "last one"},
		}
		var want []string
		for _, s := range script {
			s.who.say(s.body)
			want = append(want, s.body)
			for _, d := range []*chatDev{ana, ben} {
				d.waitOnce(s.body)
			}
		}
		for _, d := range []*chatDev{ana, ben} {
			if got := d.bodies(); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("%s shows %q, want %q", d.name, got, want)
			}
			if n := devEval[int](d, `document.querySelectorAll("#app img, #app script, #app b").length`); n != 0 {
				t.Errorf("%s: a message body became %d elements", d.name, n)
			}
			if n := d.dialogs.Load(); n != 0 {
				t.Errorf("%s: %d JavaScript dialogs opened: a body ran as script", d.name, n)
			}
		}
		// Own messages are marked sent; the other side's are not.
		if n := devEval[int](ana, `document.querySelectorAll("[data-test=msg][data-sender=ana][data-state=sent]").length`); n != 3 {
			t.Errorf("ana sees %d own messages marked sent, want 3", n)
		}
		ana.waitJS("no unread badge: everything is on screen", `!document.querySelector("[data-test=unread]")`)
		ana.screenshot("timeline-" + b.name)
		ana.do(chromedp.Navigate(p.http + "/"))
		ana.waitJS("the list", `!!document.querySelector("[data-test=conv]")`)
		ana.screenshot("list-" + b.name)
		// At 360 px one pane shows at a time: the timeline with its composer.
		ana.do(chromedp.EmulateViewport(360, 740), chromedp.Navigate(p.http+"/c/c-team"))
		ana.waitOnce("last one")
		ana.waitJS("one pane at 360 px", `getComputedStyle(document.querySelector(".sidebar")).display === "none" &&
			document.querySelector("[data-test=composer]").getBoundingClientRect().right <= 360`)
		ana.screenshot("timeline-360-" + b.name)
		if n := ana.dialogs.Load() + ben.dialogs.Load(); n != 0 {
			t.Errorf("%d JavaScript dialogs opened", n)
		}
	})
}

// TestBrowserOfflineReload (issue 13, test 2): ben goes offline, sends three
// messages (kept in the IndexedDB outbox, shown as sending), reloads the
// page while offline (the service worker may answer with its cached shell;
// TestBrowserOfflineShell is about that), comes back and opens the app
// again: the three arrive exactly once, in order, on both sides.
func TestBrowserOfflineReload(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		p := chatServe(t, b)
		browser := newBrowser(t)
		ana, ben := pairInTeam(t, browser, p.http)
		ana.say("before")
		ben.waitOnce("before")

		ben.setOffline(true)
		ben.waitJS("the offline indicator", `document.querySelector("[data-test=conn]").dataset.state !== "online"`)
		msgs := []string{"offline one", "offline two", "offline three"}
		for _, m := range msgs {
			ben.say(m)
		}
		ben.waitJS("three pending rows", `[...document.querySelectorAll("[data-test=msg-out][data-state=pending]")].length === 3`)
		if n := devEval[int](ben, `document.querySelectorAll("[data-test=events] [data-test=msg]").length`); n != 1 {
			t.Fatalf("ben's timeline has %d committed messages while offline, want 1", n)
		}
		// Reload while offline.
		if _, err := chromedp.Run(ben.ctx, chromedp.NavigateResponse(p.http+"/c/c-team")); err == nil {
			t.Log("the offline reload loaded a page (the service worker's shell)")
		}
		// Nothing reached the server meanwhile.
		if n := devEval[int](ana, countJS("[data-test=body]", "offline one")); n != 0 {
			t.Fatalf("ana sees an offline message before ben came back")
		}
		ben.setOffline(false)
		ben.do(chromedp.Navigate(p.http + "/c/c-team"))
		ben.waitOnline()
		for _, d := range []*chatDev{ana, ben} {
			for _, m := range msgs {
				d.waitOnce(m)
			}
			want := append([]string{"before"}, msgs...)
			if got := d.bodies(); strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("%s shows %q, want %q", d.name, got, want)
			}
		}
	})
}

// TestBrowserLostReply (issue 13, test 3): the server commits ana's message
// and dies before its reply is written (fault point
// api.after_send_commit=crash). A server started again on the same address
// and store gets the resend with the same cmid after the browser
// reconnects: it answers dup, and the message shows once on both sides and
// is stored once.
func TestBrowserLostReply(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		p := chatServe(t, b, "PARLEY_FAULTS=api.after_send_commit=crash@1")
		browser := newBrowser(t)
		ana, ben := pairInTeam(t, browser, p.http)

		ana.say("reply lost")
		if err := p.waitExit(30 * time.Second); !killedBySIGKILL(err) {
			t.Fatalf("server: %v, want the fault's SIGKILL", err)
		}
		ana.waitJS("the lost connection", `document.querySelector("[data-test=conn]").dataset.state !== "online"`)
		// Shown once: as a pending row, or as the event if its push got out
		// before the crash (then matched to the pending item).
		if n := devEval[int](ana, countJS("[data-test=body]", "reply lost")); n != 1 {
			t.Fatalf("ana shows the message %d times after the crash, want once", n)
		}
		u, err := url.Parse(p.http)
		if err != nil {
			t.Fatal(err)
		}
		p2 := serveEnv(t, nil, "--db", b.db, "--data-dir", b.dir, "--addr", u.Host)
		if p2.http != p.http {
			t.Fatalf("restarted on %s, want %s", p2.http, p.http)
		}
		for _, d := range []*chatDev{ana, ben} {
			d.waitOnline()
			d.waitOnce("reply lost")
		}
		s := b.store(t)
		n := 0
		for _, body := range teamBodies(t, s) {
			if body == "reply lost" {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("stored %d times, want once", n)
		}
		// The browser resent it under its cmid: the new server answered dup.
		if got := metricLine(scrape(t, p2.http), "parley_sends_total{", `outcome="dup"`, `transport="ws"`); !strings.HasSuffix(got, " 1") {
			t.Fatalf("dup sends on the restarted server: %q, want 1", got)
		}
	})
}

// shortRecallWindow makes the page believe the server's recall window is
// 4 s (GET /api/server answered with recall_window_ms 4000), so the test
// sees Recall leave a message when its window passes without waiting ten
// minutes. It is installed before any script of a document runs.
const shortRecallWindow = `(() => {
  const fetch0 = window.fetch;
  window.fetch = async (...args) => {
    const r = await fetch0(...args);
    if (new URL(r.url).pathname !== "/api/server") return r;
    const b = await r.json();
    b.recall_window_ms = 4000;
    return new Response(JSON.stringify(b), {status: r.status, headers: r.headers});
  };
})();`

// TestBrowserRecall (issue 13 test 4): Recall is offered only on
// one's own messages, inside the window the server tells; it asks first in
// an in-page dialog whose focus starts on Cancel (Cancel and Escape keep the
// message, Recall recalls it on both sides); a refusal (a recall past the
// window on the database clock) shows a sentence, never the code; and
// Recall leaves a message once the server's window has passed.
func TestBrowserRecall(t *testing.T) {
	b := sqliteBackend(t)
	p := chatServe(t, b)
	browser := newBrowser(t)
	ana, ben := pairInTeam(t, browser, p.http)
	ana.say("oops, wrong room")
	ana.say("this one stays")
	ben.say("ben's own words")
	for _, d := range []*chatDev{ana, ben} {
		d.waitOnce("oops, wrong room")
		d.waitOnce("this one stays")
		d.waitOnce("ben's own words")
	}
	seqOf := func(d *chatDev, body string) int {
		return devEval[int](d, `+[...document.querySelectorAll("[data-test=events] [data-test=msg]")].find(li => li.querySelector("[data-test=body]")?.textContent === `+jsq(body)+`).dataset.seq`)
	}
	recallOn := func(seq int) string { return fmt.Sprintf(`[data-test=msg][data-seq="%d"] [data-test=recall]`, seq) }
	has := func(d *chatDev, sel string) bool { return devEval[bool](d, `!!document.querySelector(`+jsq(sel)+`)`) }
	oops, stays, bens := seqOf(ana, "oops, wrong room"), seqOf(ana, "this one stays"), seqOf(ana, "ben's own words")

	// Only on one's own messages.
	if !has(ana, recallOn(oops)) || !has(ana, recallOn(stays)) || has(ana, recallOn(bens)) {
		t.Errorf("ana's Recall actions: on her messages %v %v, on ben's %v; want hers only", has(ana, recallOn(oops)), has(ana, recallOn(stays)), has(ana, recallOn(bens)))
	}
	if has(ben, recallOn(oops)) || has(ben, recallOn(stays)) || !has(ben, recallOn(bens)) {
		t.Errorf("ben's Recall actions: on ana's %v %v, on his %v; want his only", has(ben, recallOn(oops)), has(ben, recallOn(stays)), has(ben, recallOn(bens)))
	}
	if has(ben, fmt.Sprintf(`[data-test=msg][data-seq="%d"] [data-test=edit]`, oops)) {
		t.Errorf("ben is offered Edit on ana's message")
	}

	// It asks first: Cancel, then Escape keep the message.
	dialogOpen := `!!document.querySelector("dialog[data-test=confirm][open]")`
	ana.do(chromedp.Click(recallOn(oops)))
	ana.waitJS("the confirmation", dialogOpen+` && document.activeElement?.dataset.test === "confirm-cancel"`)
	if text := devEval[string](ana, `document.querySelector("[data-test=confirm]").textContent`); !strings.Contains(text, "Recall this message?") || !strings.Contains(text, "Everyone in the conversation will see that it was recalled.") {
		t.Errorf("the confirmation reads %q", text)
	}
	ana.do(chromedp.Click(`[data-test=confirm-cancel]`))
	ana.waitJS("the dialog gone", `!document.querySelector("[data-test=confirm]")`)
	ana.do(chromedp.Click(recallOn(oops)))
	ana.waitJS("the confirmation again", dialogOpen)
	ana.do(chromedp.KeyEvent("\x1b"))
	ana.waitJS("the dialog gone after Escape", `!document.querySelector("[data-test=confirm]")`)
	for _, d := range []*chatDev{ana, ben} {
		d.waitOnce("oops, wrong room")
	}
	// Recall confirmed: gone on both sides.
	ana.do(chromedp.Click(recallOn(oops)))
	ana.waitJS("the confirmation once more", dialogOpen)
	ana.do(chromedp.Click(`[data-test=confirm-ok]`))
	for _, d := range []*chatDev{ana, ben} {
		d.waitJS("the recalled message", fmt.Sprintf(`!!document.querySelector('[data-test=msg][data-seq="%d"] [data-test=recalled]')`, oops))
		if n := devEval[int](d, countJS("[data-test=body]", "oops, wrong room")); n != 0 {
			t.Errorf("%s still shows the recalled body", d.name)
		}
	}
	if n := ana.dialogs.Load() + ben.dialogs.Load(); n != 0 {
		t.Errorf("%d JavaScript dialogs opened; the confirmation is in the page", n)
	}

	// Late: the message is made 11 minutes old in the database (the recall
	// window is 10 minutes on the database clock) while ana's page still
	// offers Recall; the refusal is a sentence, not the code.
	raw, err := sql.Open("sqlite", "file:"+filepath.Join(b.dir, "parley.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(`UPDATE events SET created_at = created_at - 660000 WHERE conv_id = 'c-team' AND seq = ?`, stays); err != nil {
		t.Fatal(err)
	}
	ana.do(chromedp.Click(recallOn(stays)))
	ana.waitJS("the confirmation", dialogOpen)
	ana.do(chromedp.Click(`[data-test=confirm-ok]`))
	errSel := fmt.Sprintf(`document.querySelector('[data-test=msg][data-seq="%d"] [data-test=recall-error]').textContent`, stays)
	ana.waitJS("the late refusal", errSel+` !== ""`)
	if got := devEval[string](ana, errSel); got != "Too late: the time to recall this message has passed." {
		t.Errorf("the late refusal reads %q; want the sentence, not a code", got)
	}
	ana.waitOnce("this one stays")

	// The window passes: Recall leaves the message (a page told a 4 s window).
	quick := newDev(t, browser, "ana, second device")
	if _, err := chromedp.Call(quick.ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: shortRecallWindow}); err != nil {
		t.Fatal(err)
	}
	quick.signIn(p.http, "ana")
	quick.open("c-team")
	if has(quick, recallOn(stays)) {
		t.Errorf("Recall offered on a message older than the window")
	}
	quick.say("short-lived")
	quick.waitOnce("short-lived")
	short := seqOf(quick, "short-lived")
	if !has(quick, recallOn(short)) {
		t.Errorf("no Recall on a message just sent")
	}
	start := time.Now()
	quick.waitJS("Recall gone after the window", `!document.querySelector(`+jsq(recallOn(short))+`)`)
	if el := time.Since(start); el > 6*time.Second {
		t.Errorf("Recall left %v after the message was sent; the window is 4 s", el)
	}
	if !has(quick, fmt.Sprintf(`[data-test=msg][data-seq="%d"] [data-test=edit]`, short)) {
		t.Errorf("Edit left with Recall; edits have no window here")
	}
}

// TestBrowserReadOtherDevice (issue 13, test 5): ana has two devices (two
// browser contexts); ben's messages show an unread badge on both (and in
// the page title); reading them on one device clears the badge on the
// other, live.
func TestBrowserReadOtherDevice(t *testing.T) {
	p := chatServe(t, sqliteBackend(t))
	browser := newBrowser(t)
	laptop := newDev(t, browser, "ana-laptop")
	phone := newDev(t, browser, "ana-phone")
	ben := newDev(t, browser, "ben")
	laptop.signIn(p.http, "ana")
	phone.signIn(p.http, "ana")
	ben.signIn(p.http, "ben")
	ben.open("c-team")
	ben.say("are you there?")
	ben.say("ping")
	ben.waitOnce("ping")
	badge := `document.querySelector("[data-test=conv][data-conv=c-team] [data-test=unread]")?.textContent`
	for _, d := range []*chatDev{laptop, phone} {
		d.waitJS("the unread badge", badge+` === "2"`)
		d.waitJS("the page title", `document.title.startsWith("(2) ")`)
	}
	laptop.screenshot("list-unread")
	phone.open("c-team")
	phone.waitOnce("ping")
	phone.waitJS("no badge on the reading device", badge+` === undefined`)
	laptop.waitJS("the badge cleared by the other device", badge+` === undefined && !document.title.startsWith("(")`)
}

// teamBodies returns c-team's message bodies as ana sees them, in order.
func teamBodies(t *testing.T, s parley.Store) []string {
	t.Helper()
	return convBodies(t, s, "ana", "c-team")
}

// TestBrowserLongTimeline (issue 13, performance): a conversation of 5,000
// messages opens at the newest page (one page of events in the DOM, not the
// history), loads the rest only as the user scrolls up, and a new message
// with all 5,000 loaded adds its node without re-rendering the list (a
// MutationObserver sees no node removed). The times are logged for
// docs/benchmarks.md; they are measurements, not assertions.
func TestBrowserLongTimeline(t *testing.T) {
	if testing.Short() {
		t.Skip("seeds 5,000 messages")
	}
	const total = 5000
	dir := t.TempDir()
	b := backend{name: "sqlite", db: "sqlite:" + filepath.Join(dir, "parley.db"), dir: dir}
	p := chatServe(t, b)
	s := b.store(t)
	ctx := context.Background()
	ben := parley.Principal{User: "ben", DeviceID: "seed", InstallID: "seed"}
	for i := range total {
		if _, err := s.Send(ctx, ben, parley.SendRequest{Conv: "c-team", CMID: fmt.Sprintf("seed-%d", i), Body: fmt.Sprintf("message %d of the long history", i+1)}); err != nil {
			t.Fatal(err)
		}
	}
	browser := newBrowser(t)
	ana := newDev(t, browser, "ana")
	ana.signIn(p.http, "ana")
	start := time.Now()
	ana.open("c-team")
	opened := time.Since(start)
	start = time.Now()
	ana.say("with one page loaded")
	ana.waitOnce("with one page loaded")
	baseline := time.Since(start)
	msgs := `document.querySelectorAll("[data-test=events] [data-test=msg]").length`
	if n := devEval[int](ana, msgs); n < 1 || n > 200 {
		t.Fatalf("the timeline opened with %d messages, want the newest page only", n)
	}
	if got := devEval[string](ana, `[...document.querySelectorAll("[data-test=events] [data-test=body]")].at(-2).textContent`); got != fmt.Sprintf("message %d of the long history", total) {
		t.Fatalf("newest message shown: %q", got)
	}
	// Scroll up until the whole history is loaded.
	start = time.Now()
	pages := 0
	for {
		n := devEval[int](ana, msgs)
		if n == total+1 {
			break
		}
		ana.do(chromedp.Evaluate[chromedp.Void](`document.querySelector("[data-test=timeline]").scrollTop = 0`))
		ana.waitJS("an older page", msgs+` > `+fmt.Sprint(n))
		pages++
	}
	scrolled := time.Since(start)
	if got := devEval[string](ana, `document.querySelector("[data-test=events] [data-test=body]").textContent`); got != "message 1 of the long history" {
		t.Fatalf("oldest message shown: %q", got)
	}
	// A new message with 5,000 loaded: appended, nothing re-rendered.
	ana.do(chromedp.Evaluate[chromedp.Void](`window.__mut = {added: 0, removed: 0};
		new MutationObserver(ms => { for (const m of ms) { window.__mut.added += m.addedNodes.length; window.__mut.removed += m.removedNodes.length; } })
			.observe(document.querySelector("[data-test=events]"), {childList: true, subtree: true});
		document.querySelector("[data-test=timeline]").scrollTop = 1e9;`))
	start = time.Now()
	ana.say("one more")
	ana.waitOnce("one more")
	appended := time.Since(start)
	mut := devEval[map[string]int](ana, `window.__mut`)
	if mut["removed"] != 0 || mut["added"] > 2 {
		t.Fatalf("one new message changed the list by %+v: the list was re-rendered", mut)
	}
	t.Logf("5,000 messages: opened at the newest page in %v; a new message on screen %v after Enter with one page loaded; %d older pages loaded by scrolling in %v; a new message on screen %v after Enter with all loaded (list changes %+v)",
		opened.Round(time.Millisecond), baseline.Round(time.Millisecond), pages, scrolled.Round(time.Millisecond), appended.Round(time.Millisecond), mut)
}

// metricLine is the first line of a /metrics text holding every word.
func metricLine(text string, words ...string) string {
	for _, l := range strings.Split(text, "\n") {
		all := true
		for _, w := range words {
			all = all && strings.Contains(l, w)
		}
		if all {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// TestBrowserSignOut: "Sign out" returns to the sign-in screen and the app
// forgets the session; a session ended elsewhere (the token logged out while
// the socket is open: the server sends UNAUTHENTICATED on it) brings the page
// back to sign-in with the reason shown.
func TestBrowserSignOut(t *testing.T) {
	p := chatServe(t, sqliteBackend(t))
	browser := newBrowser(t)
	ana := newDev(t, browser, "ana")
	ana.signIn(p.http, "ana")
	ana.do(chromedp.Click(`[data-test=signout]`))
	ana.waitJS("the sign-in screen", `!!document.querySelector("[data-test=signin]") && location.pathname === "/signin"`)
	if code := devEval[int](ana, `fetch("/api/me").then(r => r.status)`); code != 401 {
		t.Fatalf("after sign out /api/me is %d, want 401", code)
	}
	ana.signIn(p.http, "ana")
	// Another tab of this browser signs out: the open socket is told.
	ana.do(chromedp.Evaluate[chromedp.Void](`fetch("/api/logout", {method: "POST", credentials: "same-origin"})`))
	ana.waitJS("sign-in with the reason", `!!document.querySelector("[data-test=signin]") &&
		document.querySelector("[data-test=signin-error]").dataset.reason === "UNAUTHENTICATED"`)
	if text := devEval[string](ana, `document.querySelector("[data-test=signin-error]").textContent`); text != "Your session has ended. Sign in again." {
		t.Errorf("the reason reads %q, want a sentence without the code", text)
	}
}

// TestBrowserTwoTabs: two tabs of one browser share the session and the
// IndexedDB outbox. Messages written in both at once show exactly once in
// each tab and are stored once; a message written in a tab that is offline
// is sent by the other tab (the outbox is the browser's, and only the tab
// holding its lock sends), and shows once in both when the first comes back.
func TestBrowserTwoTabs(t *testing.T) {
	dir := t.TempDir()
	b := backend{name: "sqlite", db: "sqlite:" + filepath.Join(dir, "parley.db"), dir: dir}
	p := chatServe(t, b)
	browser := newBrowser(t)
	tab1 := newDev(t, browser, "ana-tab1")
	tab1.signIn(p.http, "ana")
	tab2 := &chatDev{t: t, name: "ana-tab2", ctx: newTab(t, tab1.ctx)} // same browser context
	tab2.do(chromedp.EmulateViewport(1100, 760), chromedp.Navigate(p.http+"/"))
	tab2.waitOnline()
	tab1.open("c-team")
	tab2.open("c-team")

	for i := range 3 {
		tab1.say(fmt.Sprintf("tab one %d", i))
		tab2.say(fmt.Sprintf("tab two %d", i))
	}
	var all []string
	for i := range 3 {
		all = append(all, fmt.Sprintf("tab one %d", i), fmt.Sprintf("tab two %d", i))
	}
	tab1.setOffline(true)
	tab1.waitJS("tab one offline", `document.querySelector("[data-test=conn]").dataset.state !== "online"`)
	tab1.say("written offline")
	all = append(all, "written offline")
	tab2.waitOnce("written offline")
	tab1.setOffline(false)
	for _, d := range []*chatDev{tab1, tab2} {
		for _, m := range all {
			d.waitOnce(m)
		}
	}
	stored := teamBodies(t, b.store(t))
	for _, m := range all {
		n := 0
		for _, s := range stored {
			if s == m {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%q stored %d times, want once", m, n)
		}
	}
}

// TestBrowserRateLimited: with a send limit of 2 per 3 s, five messages
// written at once are all kept: the refused ones (RATE_LIMITED) wait for
// retry_after_ms and are resent under their cmid; all arrive once, in order.
func TestBrowserRateLimited(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "parley.yaml")
	if err := os.WriteFile(cfg, []byte("rate_limits: {send: {limit: 2, window: 3s}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := serveArgs(t, "--demo", "--db", "sqlite:"+filepath.Join(dir, "parley.db"), "--data-dir", dir, "--config", cfg)
	browser := newBrowser(t)
	ana := newDev(t, browser, "ana")
	ana.signIn(p.http, "ana")
	ana.open("c-team")
	var want []string
	for i := range 5 {
		m := fmt.Sprintf("limited %d", i)
		ana.say(m)
		want = append(want, m)
	}
	for _, m := range want {
		ana.waitOnce(m)
	}
	if got := ana.bodies(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("shown %q, want %q", got, want)
	}
	if got := metricLine(scrape(t, p.http), "parley_rate_limited_total{", `bucket="send"`, `transport="ws"`); got == "" || strings.HasSuffix(got, " 0") {
		t.Fatalf("no send was rate-limited (%q): the test proves nothing", got)
	}
}

// TestBrowserFailedSend: a message refused with a terminal code stays on
// the timeline as failed, with the code; "Edit and send as new" puts its
// text back in the composer and drops the failed item. Ben writes while
// offline; meanwhile ana removes him from the group, so the resend is
// NOT_MEMBER. The composer shows the 4,000-character limit before it is hit
// and refuses a longer text.
func TestBrowserFailedSend(t *testing.T) {
	p := chatServe(t, sqliteBackend(t))
	browser := newBrowser(t)
	ben := newDev(t, browser, "ben")
	ben.signIn(p.http, "ben")
	ben.open("c-team")

	// The limit, shown from 3,500 characters on.
	setText := func(n int) {
		ben.do(chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => { const b = document.querySelector("[data-test=composer]");
			b.value = "x".repeat(%d); b.dispatchEvent(new Event("input")); })()`, n)))
	}
	count := `document.querySelector("[data-test=composer-count]").textContent`
	send := `document.querySelector("[data-test=send]").disabled`
	setText(3000)
	if got := devEval[string](ben, count); got != "" {
		t.Errorf("3,000 characters: count %q, want none yet", got)
	}
	setText(3600)
	if got := devEval[string](ben, count); got != "3,600 / 4,000" || devEval[bool](ben, send) {
		t.Errorf("3,600 characters: count %q, send disabled %v", got, devEval[bool](ben, send))
	}
	setText(4001)
	if got := devEval[string](ben, count); !strings.Contains(got, "4,001 / 4,000") || !devEval[bool](ben, send) {
		t.Errorf("4,001 characters: count %q, send disabled %v; want the limit shown and sending refused", got, devEval[bool](ben, send))
	}
	setText(0)

	ben.setOffline(true)
	ben.waitJS("offline", `document.querySelector("[data-test=conn]").dataset.state !== "online"`)
	ben.say("sent after my removal")
	ben.waitJS("the pending row", `!!document.querySelector("[data-test=msg-out][data-state=pending]")`)
	req, _ := http.NewRequest(http.MethodDelete, p.http+"/api/convs/c-team/members/ben", nil)
	req.Header.Set("Authorization", "Bearer "+demoToken(t, p.http, "ana"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("remove ben: %v %v", resp, err)
	}
	resp.Body.Close()
	ben.setOffline(false)
	ben.waitJS("the failed row with its reason", `[...document.querySelectorAll("[data-test=msg-out][data-state=failed] [data-test=state]")].some(e => e.textContent === "Not sent: You are not a member of this conversation.")`)
	ben.waitJS("no composer for a former member", `!!document.querySelector("[data-test=composer]").closest(".hidden") &&
		!document.querySelector("[data-test=not-member]").classList.contains("hidden")`)
	// Ana adds him back; he edits the failed message and sends it as new.
	resp, err = http.DefaultClient.Do(func() *http.Request {
		r, _ := http.NewRequest(http.MethodPost, p.http+"/api/convs/c-team/members", strings.NewReader(`{"user":"ben"}`))
		r.Header.Set("Authorization", "Bearer "+demoToken(t, p.http, "ana"))
		r.Header.Set("Content-Type", "application/json")
		return r
	}())
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("add ben: %v %v", resp, err)
	}
	resp.Body.Close()
	ben.waitJS("the composer back", `!document.querySelector("[data-test=composer]").closest(".hidden")`)
	ben.do(chromedp.Click(`[data-test=msg-out][data-state=failed] [data-test=edit-resend]`))
	ben.waitJS("the text back in the composer, the failed row gone", `document.querySelector("[data-test=composer]").value === "sent after my removal" &&
		!document.querySelector("[data-test=msg-out]")`)
	ben.say("")
	ben.waitOnce("sent after my removal")
}

// TestBrowserNotification: a message from someone else while the page is
// hidden raises a desktop notification (title: the conversation, body:
// sender and text) once the user allowed them; while permission is not
// granted the top bar offers "Allow notifications". Headless Chromium keeps
// every page visible and shows no notification, so the test makes the page
// report itself hidden (document.hidden) and records the Notification
// constructor's calls (the real one still runs).
func TestBrowserNotification(t *testing.T) {
	p := chatServe(t, sqliteBackend(t))
	browser := newBrowser(t)
	ana := newDev(t, browser, "ana")
	ben := newDev(t, browser, "ben")
	ana.signIn(p.http, "ana")
	ben.signIn(p.http, "ben")
	ben.open("c-team")
	perm := devEval[string](ana, `Notification.permission`)
	if button := devEval[bool](ana, `!!document.querySelector("[data-test=allow-notify]")`); button != (perm == "default") {
		t.Fatalf("permission %q, Allow notifications button shown: %v", perm, button)
	}
	if _, err := chromedp.CallBrowser(ana.ctx, browserpb.SetPermission, browserpb.SetPermissionParams{
		Permission: &browserpb.PermissionDescriptor{Name: "notifications"}, Setting: browserpb.PermissionSettingGranted,
		Origin: p.http, BrowserContextID: chromedp.FromContext(ana.ctx).BrowserContextID,
	}); err != nil {
		t.Fatal(err)
	}
	ana.do(chromedp.Evaluate[chromedp.Void](`(() => {
		window.__notes = [];
		const N = window.Notification;
		window.Notification = class extends N {
			constructor(title, opts) { super(title, opts); window.__notes.push(title + " | " + opts.body); }
		};
		Object.defineProperty(document, "hidden", {configurable: true, get: () => true});
	})()`))
	if perm := devEval[string](ana, `Notification.permission`); perm != "granted" {
		t.Fatalf("permission %q after granting", perm)
	}
	ben.say("are you around?")
	ana.waitJS("the notification", `window.__notes.length === 1`)
	if got := devEval[string](ana, `window.__notes[0]`); got != "C team | ben: are you around?" {
		t.Fatalf("notification %q", got)
	}
	// Visible again: no notification for the next one.
	ana.do(chromedp.Evaluate[chromedp.Void](`Object.defineProperty(document, "hidden", {configurable: true, get: () => false})`))
	ben.say("never mind")
	ana.waitJS("the list preview", `document.querySelector("[data-test=conv][data-conv='c-team'] .preview").textContent === "ben: never mind"`)
	if n := devEval[int](ana, `window.__notes.length`); n != 1 {
		t.Fatalf("%d notifications, want 1 (none while visible)", n)
	}
}
