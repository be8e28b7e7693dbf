package main

// Browser tests of the live signals' screens: the typing line, the
// presence dots, and what the page reports (typing while composing, away
// and online).

import (
	"testing"
	"time"

	browserpb "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// socketTap, installed before the app's scripts run, records the frames
// the page sends (window.__sent) and keeps its socket (window.__ws), so a
// test can hand the app a push the way the socket does (pushTo).
const socketTap = `(() => {
  window.__sent = [];
  const Socket = window.WebSocket;
  window.WebSocket = class extends Socket {
    constructor(...args) { super(...args); window.__ws = this; }
    send(data) { try { window.__sent.push(JSON.parse(data)); } catch (e) {} return super.send(data); }
  };
})();`

// tap installs socketTap on the device's next documents.
func (d *chatDev) tap() {
	d.t.Helper()
	if _, err := chromedp.Call(d.ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: socketTap}); err != nil {
		d.t.Fatal(err)
	}
}

// pushTo hands the page a frame as if its socket had received it.
func (d *chatDev) pushTo(frameJS string) {
	d.t.Helper()
	d.do(chromedp.Evaluate[chromedp.Void](`window.__ws.dispatchEvent(new MessageEvent("message", {data: JSON.stringify(` + frameJS + `)}))`))
}

// sentJS counts the frames the page sent that match a condition on f.
func sentJS(cond string) string {
	return `window.__sent.filter(f => ` + cond + `).length`
}

// TestBrowserLiveScreens: what the page does with the live signals, the
// pushes handed to it as its socket would: writing in the composer sends
// one typing frame per 3 s; a typing push shows "… is typing…" under the
// timeline until its until, or until that user's message arrives; a
// presence push puts a dot by that user's name; hiding the page reports
// away, input online again.
func TestBrowserLiveScreens(t *testing.T) {
	p := chatServe(t, sqliteBackend(t))
	browser := newBrowser(t)
	ana := newDev(t, browser, "ana")
	ana.tap()
	ana.signIn(p.http, "ana")
	ben := login(t, p.http, "ben")
	if st := callAPI(t, p.http, ben, "POST", "/api/convs/c-team/messages", map[string]string{"body": "hello from ben"}, nil, "Idempotency-Key", "live-1"); st != 201 {
		t.Fatalf("ben's message: %d", st)
	}
	ana.open("c-team")
	ana.waitOnce("hello from ben")
	ana.waitJS("the live signals running", `!!document.querySelector("[data-test=conv-view] > [data-test=typing]")`)

	// Typing: one frame for a burst of keys, another after 3 s.
	ana.do(chromedp.SendKeys(`[data-test=composer]`, "hello"))
	typing := sentJS(`f.t === "typing" && f.conv === "c-team" && !f.rid`)
	ana.waitJS("a typing frame", typing+` === 1`)
	time.Sleep(3100 * time.Millisecond)
	ana.do(chromedp.SendKeys(`[data-test=composer]`, " again"))
	ana.waitJS("a second typing frame after 3 s", typing+` === 2`)
	if n := devEval[int](ana, typing); n != 2 {
		t.Errorf("%d typing frames, want 2", n)
	}

	// A typing push shows the line; it clears at until.
	line := `document.querySelector("[data-test=conv-view] > [data-test=typing]").textContent`
	ana.pushTo(`{t: "typing", conv: "c-team", user: "ben", until: new Date(Date.now() + 1500).toISOString()}`)
	ana.waitJS("ben typing", line+`.endsWith(" is typing…")`)
	ana.screenshot("typing")
	ana.waitJS("the line cleared at until", line+` === ""`)
	// Another conversation's typing shows nothing here.
	ana.pushTo(`{t: "typing", conv: "elsewhere", user: "cy", until: new Date(Date.now() + 4000).toISOString()}`)
	// Ben typing, then his message: the line goes before until.
	ana.pushTo(`{t: "typing", conv: "c-team", user: "ben", until: new Date(Date.now() + 20000).toISOString()}`)
	ana.waitJS("ben typing again", line+`.endsWith(" is typing…") && !`+line+`.includes(" and ")`)
	if st := callAPI(t, p.http, ben, "POST", "/api/convs/c-team/messages", map[string]string{"body": "done typing"}, nil, "Idempotency-Key", "live-2"); st != 201 {
		t.Fatalf("ben's message: %d", st)
	}
	ana.waitOnce("done typing")
	ana.waitJS("the line cleared by the message", line+` === ""`)

	// Presence: a dot by ben's name, following the pushes.
	dot := `[...document.querySelectorAll("[data-test=events] [data-test=msg] [data-name-of=ben]")].map(e => e.dataset.presence || "-").join(",")`
	ana.pushTo(`{t: "presence", user: "ben", state: "online", last_seen: new Date().toISOString()}`)
	ana.waitJS("ben online", dot+` === "online,online"`)
	ana.pushTo(`{t: "presence", user: "ben", state: "away", last_seen: new Date().toISOString()}`)
	ana.waitJS("ben away", dot+` === "away,away"`)

	// Hidden: away; input: online again.
	ana.do(chromedp.Evaluate[chromedp.Void](`Object.defineProperty(document, "visibilityState", {configurable: true, get: () => "hidden"}); document.dispatchEvent(new Event("visibilitychange"))`))
	ana.waitJS("away reported", sentJS(`f.t === "presence" && f.state === "away"`)+` === 1`)
	ana.do(chromedp.Evaluate[chromedp.Void](`Object.defineProperty(document, "visibilityState", {configurable: true, get: () => "visible"}); document.dispatchEvent(new Event("visibilitychange"))`),
		chromedp.SendKeys(`[data-test=composer]`, "!"))
	ana.waitJS("online reported", sentJS(`f.t === "presence" && f.state === "online"`)+` === 1`)
}

// pushStub, installed before the app's scripts run, stands in for the
// browser's push service (headless Chromium reaches none): subscribe
// records the key it was given and answers a subscription whose toJSON is
// what a browser would send.
const pushStub = `(() => {
  window.__subscribed = [];
  window.__unsubscribed = 0;
  PushManager.prototype.getSubscription = async function () { return window.__sub || null; };
  PushManager.prototype.subscribe = async function (opts) {
    const key = btoa(String.fromCharCode(...new Uint8Array(opts.applicationServerKey))).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
    window.__subscribed.push({visible: opts.userVisibleOnly, key});
    return window.__sub = {options: opts, unsubscribe: async () => { window.__sub = null; window.__unsubscribed++; return true; },
      toJSON: () => ({endpoint: "https://push.example.net/send/abc", expirationTime: null,
      keys: {p256dh: "BNcRdreALRFXTkOOUHK1EtK2wtaz5Ry4YfYCA_0QTpQtUbVlUls0VJXg7A8u-Ts1XbjhazAkj7I99e8QcYP7DkM", auth: "tBHItJI5svbpez7KI4CCXg"}})};
  };
})();`

// TestBrowserPushSubscribe: once notifications are allowed the page
// subscribes with the server's VAPID key (userVisibleOnly) and registers
// the subscription, once; the members screen sets the conversation's
// notification level; signing out unsubscribes the browser.
func TestBrowserPushSubscribe(t *testing.T) {
	p := chatServe(t, sqliteBackend(t))
	ana := login(t, p.http, "ana")
	var key struct{ Key string }
	if st := callAPI(t, p.http, ana, "GET", "/api/push/key", nil, &key); st != 200 || key.Key == "" {
		t.Fatalf("GET /api/push/key: %d %q", st, key.Key)
	}
	browser := newBrowser(t)
	dev := newDev(t, browser, "ana")
	if _, err := chromedp.Call(dev.ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: pushStub + socketTap}); err != nil {
		t.Fatal(err)
	}
	dev.signIn(p.http, "ana")
	if n := devEval[int](dev, `window.__subscribed.length`); n != 0 {
		t.Fatalf("subscribed %d times before notifications were allowed", n)
	}
	if _, err := chromedp.CallBrowser(dev.ctx, browserpb.SetPermission, browserpb.SetPermissionParams{
		Permission: &browserpb.PermissionDescriptor{Name: "notifications"}, Setting: browserpb.PermissionSettingGranted,
		Origin: p.http, BrowserContextID: chromedp.FromContext(dev.ctx).BrowserContextID,
	}); err != nil {
		t.Fatal(err)
	}
	dev.waitJS("the subscription", `window.__subscribed.length === 1`)
	if got := devEval[string](dev, `JSON.stringify(window.__subscribed[0])`); got != `{"visible":true,"key":"`+key.Key+`"}` {
		t.Errorf("subscribed with %s, want userVisibleOnly and the key %s", got, key.Key)
	}
	p.waitLog(`route="POST /api/push/subscriptions" status=201`, browserTimeout)

	// The level: all by default, mentions once chosen.
	dev.do(chromedp.Navigate(p.http + "/c/c-team/members"))
	dev.waitJS("the level", `document.querySelector("[data-test=notify-level]")?.value === "all"`)
	dev.do(chromedp.SetValue(`[data-test=notify-level]`, "mentions"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector("[data-test=notify-level]").dispatchEvent(new Event("change"))`))
	dev.waitJS("the level saved", `document.querySelector("[data-test=status]").textContent.includes("mentioned")`)
	var levels struct {
		Settings []struct{ Conv, Level string }
	}
	callAPI(t, p.http, ana, "GET", "/api/push/settings", nil, &levels)
	if len(levels.Settings) != 1 || levels.Settings[0].Conv != "c-team" || levels.Settings[0].Level != "mentions" {
		t.Errorf("levels %+v, want c-team: mentions", levels.Settings)
	}
	// Signing out ends the browser's subscription.
	dev.waitJS("the subscription of this page", `!!window.__sub`)
	dev.do(chromedp.Click(`[data-test=signout]`))
	dev.waitJS("unsubscribed", `window.__unsubscribed === 1 && !window.__sub`)
}
