package main

// Browser tests of the service worker: the offline shell (the server
// process stopped, not emulated), the outbox sent once when it is back,
// and a new release picked up.

import (
	"context"
	"fmt"
	"io/fs"
	"net/url"
	"path/filepath"
	"testing"
	"testing/fstest"
	"time"

	browserpb "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/serviceworker"
	"github.com/chromedp/chromedp"
	"github.com/parleychat/parley/web"
)

// webReleaseEnv, in a server the tests start, makes it host a changed
// release of the app: app.css carries the value in a comment, so its
// hashed name, the shell, the release id and /sw.js all change.
const webReleaseEnv = "PARLEY_TEST_WEB_RELEASE"

// releaseSite is the embedded app with app.css changed by tag.
func releaseSite(tag string) (*web.Site, error) {
	app := fstest.MapFS{}
	err := fs.WalkDir(web.App(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(web.App(), p)
		if p == "app.css" {
			b = append(b, "\n/* release "+tag+" */\n"...)
		}
		app[p] = &fstest.MapFile{Data: b}
		return err
	})
	if err != nil {
		return nil, err
	}
	return web.Load(app)
}

// waitAsync polls an async JavaScript condition (a promise of a boolean)
// until it is true, within d.
func (d *chatDev) waitAsync(what, expr string, wait time.Duration) {
	d.t.Helper()
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(d.ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr, chromedp.EvalAwaitPromise))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("%s: timed out waiting for %s (%s; last error %v)\npage: %s", d.name, what, expr, err, d.html())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cachesJS lists the page's Cache Storage names, sorted, joined by ",".
const cachesJS = `caches.keys().then(k => k.sort().join(","))`

// TestBrowserOfflineShell: after one visit the service worker holds the
// release's shell and files; with the server process killed, a reload
// still shows the app, signed in, with the conversation list it kept and
// the messages written meanwhile waiting in the outbox; when a server is back on the same address they are
// sent by themselves and stored once. A new release (a changed file) is
// installed at the next visit, the old release's cache is deleted, and the
// next offline reload shows the new release's files.
func TestBrowserOfflineShell(t *testing.T) {
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "parley.db")
	b := backend{name: "sqlite", db: db, dir: dir}
	p := serveEnv(t, nil, "--demo", "--db", db, "--data-dir", dir)
	u, err := url.Parse(p.http)
	if err != nil {
		t.Fatal(err)
	}
	site, err := web.New()
	if err != nil {
		t.Fatal(err)
	}
	browser := newBrowser(t)
	ben := newDev(t, browser, "ben")
	ben.signIn(p.http, "ben")
	ben.open("c-team")
	ben.waitAsync("the service worker and its cache", `navigator.serviceWorker.ready.then(r => r.active && r.active.state === "activated")
		.then(ok => ok && caches.keys()).then(k => !!k && k.includes("parley-`+site.Release()+`"))`, 30*time.Second)
	if got := devEval[string](ben, `navigator.serviceWorker.getRegistration().then(r => r.scope + " " + r.active.scriptURL)`); got != p.http+"/ "+p.http+"/sw.js" {
		t.Fatalf("registration %q, want scope / and /sw.js", got)
	}

	// The server process dies: the page goes offline, the messages wait.
	p.kill()
	ben.waitJS("the lost connection", `document.querySelector("[data-test=conn]").dataset.state !== "online"`)
	msgs := []string{"written with the server down", "and another"}
	for _, m := range msgs {
		ben.say(m)
	}
	ben.waitJS("two pending rows", `document.querySelectorAll("[data-test=msg-out][data-state=pending]").length === 2`)
	// A reload with no server: the service worker answers with the shell.
	ben.do(chromedp.Navigate(p.http + "/c/c-team"))
	ben.waitJS("the app offline, signed in, with its outbox and the kept list", `document.querySelectorAll("[data-test=msg-out][data-state=pending]").length === 2 &&
		!!document.querySelector("[data-test=composer]") && document.querySelector("[data-test=conn]").dataset.state !== "online" &&
		!!document.querySelector("[data-test=conv][data-conv=c-team]")`)
	if !devEval[bool](ben, `!!navigator.serviceWorker.controller`) {
		t.Errorf("the offline page is not controlled by the service worker")
	}
	ben.screenshot("offline")

	// Back: a server on the same address and store; the outbox goes once.
	p2 := serveEnv(t, nil, "--db", db, "--data-dir", dir, "--addr", u.Host)
	ben.waitAsync("the connection back", `Promise.resolve(document.querySelector("[data-test=conn]")?.dataset.state === "online")`, 60*time.Second)
	for _, m := range msgs {
		ben.waitOnce(m)
	}
	s := b.store(t)
	for _, m := range msgs {
		n := 0
		for _, body := range teamBodies(t, s) {
			if body == m {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%q stored %d times, want once", m, n)
		}
	}

	// A new release: the next visit installs it and drops the old cache.
	p2.kill()
	next, err := releaseSite("2")
	if err != nil {
		t.Fatal(err)
	}
	if next.Release() == site.Release() {
		t.Fatalf("the changed app has the same release %s", site.Release())
	}
	p3 := serveEnv(t, []string{webReleaseEnv + "=2"}, "--db", db, "--data-dir", dir, "--addr", u.Host)
	css, _ := next.Path("app.css")
	ben.do(chromedp.Navigate(p.http + "/c/c-team"))
	ben.waitAsync("the new release's cache alone", cachesJS+`.then(k => k === "parley-`+next.Release()+`")`, 30*time.Second)
	ben.waitAsync("the new worker in control", `Promise.resolve(navigator.serviceWorker.controller?.state === "activated")`, 10*time.Second)
	p3.kill()
	ben.do(chromedp.Navigate(p.http + "/c/c-team"))
	ben.waitJS("the app offline again", `!!document.querySelector("[data-test=composer]")`)
	if got := devEval[string](ben, `new URL(document.querySelector("link[rel=stylesheet]").href).pathname`); got != css {
		t.Errorf("offline shell names %s, want the new release's %s", got, css)
	}
	if n := devEval[int](ben, `document.styleSheets.length`); n < 1 {
		t.Errorf("the new release's stylesheet did not load offline")
	}
}

// swRegistration returns the id DevTools knows the page's service worker
// registration by (the ServiceWorker domain's).
func (d *chatDev) swRegistration(scope string) serviceworker.RegistrationID {
	d.t.Helper()
	found := make(chan serviceworker.RegistrationID, 16)
	ctx, cancel := context.WithCancel(d.ctx)
	defer cancel()
	if err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*serviceworker.EventWorkerRegistrationUpdated); ok {
			for _, r := range e.Registrations {
				if r.ScopeURL == scope && !r.IsDeleted {
					found <- r.RegistrationID
				}
			}
		}
	}); err != nil {
		d.t.Fatal(err)
	}
	if _, err := chromedp.Call(d.ctx, serviceworker.Enable, cdp.Empty{}); err != nil {
		d.t.Fatal(err)
	}
	select {
	case id := <-found:
		return id
	case <-time.After(browserTimeout):
		d.t.Fatalf("%s: no service worker registration for %s", d.name, scope)
		return ""
	}
}

// TestBrowserPushHint: the service worker shows a push only after reading
// its message through the API with the session cookie. A hint for a
// message of the user's conversation becomes a notification with the
// sender and the text; a hint for a conversation the user cannot read, and
// a payload that is not a hint, show nothing. The pushes are delivered to
// the worker through DevTools (as the browser's push service would hand
// them over, decrypted).
func TestBrowserPushHint(t *testing.T) {
	p := chatServe(t, sqliteBackend(t))
	browser := newBrowser(t)
	ana := newDev(t, browser, "ana")
	ana.signIn(p.http, "ana")
	if _, err := chromedp.CallBrowser(ana.ctx, browserpb.SetPermission, browserpb.SetPermissionParams{
		Permission: &browserpb.PermissionDescriptor{Name: "notifications"}, Setting: browserpb.PermissionSettingGranted,
		Origin: p.http, BrowserContextID: chromedp.FromContext(ana.ctx).BrowserContextID,
	}); err != nil {
		t.Fatal(err)
	}
	ana.waitAsync("the service worker", `navigator.serviceWorker.ready.then(r => !!r.active)`, 30*time.Second)
	reg := ana.swRegistration(p.http + "/")

	ben := login(t, p.http, "ben")
	send := func(conv, body, key string) int64 {
		t.Helper()
		var sent struct{ Seq int64 }
		if st := callAPI(t, p.http, ben, "POST", "/api/convs/"+conv+"/messages", map[string]string{"body": body}, &sent, "Idempotency-Key", key); st != 201 {
			t.Fatalf("ben's message in %s: %d", conv, st)
		}
		return sent.Seq
	}
	if st := callAPI(t, p.http, ben, "POST", "/api/convs", map[string]any{"kind": "group", "id": "ben-cy", "title": "Ben and Cy", "members": []string{"cy"}}, nil); st != 201 {
		t.Fatalf("ben's conversation with cy: %d", st)
	}
	secret := send("ben-cy", "not for ana", "push-1")
	team := send("c-team", "lunch at noon?", "push-2")
	deliver := func(data string) {
		t.Helper()
		if _, err := chromedp.Call(ana.ctx, serviceworker.DeliverPushMessage, serviceworker.DeliverPushMessageParams{
			Origin: p.http, RegistrationID: reg, Data: data,
		}); err != nil {
			t.Fatal(err)
		}
	}
	deliver(fmt.Sprintf(`{"conv":"ben-cy","seq":%d}`, secret))
	deliver(`not a hint`)
	deliver(`{"conv":"c-team"}`)
	deliver(fmt.Sprintf(`{"conv":"c-team","seq":%d}`, team))
	notes := `navigator.serviceWorker.ready.then(r => r.getNotifications()).then(ns => ns.map(n => n.tag + " | " + n.body).join("\n"))`
	ana.waitAsync("the notification", notes+`.then(s => s.includes("parley-c-team | ben: lunch at noon?"))`, 30*time.Second)
	if got := devEval[string](ana, notes); got != "parley-c-team | ben: lunch at noon?" {
		t.Errorf("notifications:\n%s\nwant only c-team's", got)
	}
}
