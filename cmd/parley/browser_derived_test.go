package main

// Browser tests of edits, reactions, threads, mentions and direct messages:
// the real `parley serve --demo` and the embedded app in Chromium, as in
// browser_chat_test.go.

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	browserpb "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"

	"github.com/parleychat/parley"
)

// sqliteBackend is a fresh SQLite store in the test's temporary directory.
func sqliteBackend(t *testing.T) backend {
	t.Helper()
	dir := t.TempDir()
	return backend{name: "sqlite", db: "sqlite:" + filepath.Join(dir, "parley.db"), dir: dir}
}

// msgJS finds the timeline's message whose body starts with text.
func msgJS(body string) string {
	return `[...document.querySelectorAll("[data-test=events] [data-test=msg]")].find(m => m.querySelector("[data-test=body]")?.textContent.startsWith(` + jsq(body) + `))`
}

// click clicks the element a JavaScript expression finds.
func (d *chatDev) click(what, expr string) {
	d.t.Helper()
	d.waitJS(what, `!!(`+expr+`)`)
	d.do(chromedp.Evaluate[chromedp.Void](`(` + expr + `).click()`))
}

// reactionJS is the reaction chip of emoji on the message starting with body.
func reactionJS(body, emoji string) string {
	return msgJS(body) + `?.querySelector("[data-test=reaction][data-emoji='` + emoji + `']")`
}

// kindCounts counts a conversation's stored events by kind, as user reads them.
func kindCounts(t *testing.T, s parley.Store, user, conv string) map[parley.EventKind]int {
	t.Helper()
	n := map[parley.EventKind]int{}
	var after int64
	for {
		page, err := s.Sync(context.Background(), parley.Principal{User: user}, parley.SyncRequest{Conv: conv, After: after, Limit: parley.MaxPage})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range page.Events {
			n[ev.Kind]++
		}
		after = page.NextAfter
		if !page.HasMore {
			return n
		}
	}
}

// TestBrowserEditReactThread: two users live. ana mentions ben (picked
// from the @ autocomplete) and ben sees the mention marked; ana edits it
// and ben sees the new text, the edited marker and both versions; both
// react and toggle (counts, the own reaction highlighted); ben replies in
// a thread and ana sees the reply count, opens the thread and answers,
// which ben's open thread shows at once.
func TestBrowserEditReactThread(t *testing.T) {
	p := chatServe(t, sqliteBackend(t))
	browser := newBrowser(t)
	ana, ben := pairInTeam(t, browser, p.http)

	// @ autocomplete: "@b" offers ben; Enter takes him.
	ana.do(chromedp.SendKeys(`[data-test=composer]`, "hello @b"))
	ana.waitJS("the member suggestion", `!!document.querySelector("[data-test=mention-option][data-user=ben]")`)
	ana.do(chromedp.Evaluate[chromedp.Void](`document.querySelector("[data-test=composer]").dispatchEvent(new KeyboardEvent("keydown", {key: "Enter", bubbles: true, cancelable: true}))`))
	ana.waitJS("the completed mention", `document.querySelector("[data-test=composer]").value === "hello @ben "`)
	ana.say("there")
	for _, d := range []*chatDev{ana, ben} {
		d.waitOnce("hello @ben there")
	}
	ben.waitJS("the mention of ben marked", msgJS("hello @ben")+`?.querySelector("[data-test=mention].mention-me")?.textContent === "@ben"`)

	// Edit: ana's message changes on both sides, marked edited, with two versions.
	ana.click("ana's Edit", msgJS("hello @ben")+`?.querySelector("[data-test=edit]")`)
	ana.waitJS("the editor", `!!document.querySelector("[data-test=edit-box]")`)
	ana.do(chromedp.Evaluate[chromedp.Void](`document.querySelector("[data-test=edit-box]").value = "hello @ben, edited"`),
		chromedp.Click(`[data-test=edit-save]`))
	for _, d := range []*chatDev{ana, ben} {
		d.waitJS("the edit", `!!`+msgJS("hello @ben, edited")+`?.querySelector("[data-test=edited]")`)
	}
	ben.click("the edited marker", msgJS("hello @ben, edited")+`.querySelector("[data-test=edited]")`)
	ben.waitJS("two versions", `[...document.querySelectorAll("[data-test=version] .body")].map(e => e.textContent).join("|") === "hello @ben there|hello @ben, edited"`)
	ben.do(chromedp.Click(`[data-test=versions-close]`))

	// Reactions: ben 👍 through the picker, ana adds hers on the chip, ben takes his back.
	ben.click("ben's React", msgJS("hello @ben, edited")+`.querySelector("[data-test=react]")`)
	ben.click("the 👍 of the picker", `document.querySelector("[data-test=pick][data-emoji='👍']")`)
	ana.waitJS("one 👍", reactionJS("hello @ben, edited", "👍")+`?.textContent === "👍 1"`)
	ben.waitJS("ben's 👍 highlighted", reactionJS("hello @ben, edited", "👍")+`?.dataset.me === "true"`)
	if me := devEval[string](ana, reactionJS("hello @ben, edited", "👍")+`.dataset.me`); me != "false" {
		t.Fatalf("ana's view marks ben's reaction as hers (%s)", me)
	}
	ana.click("the 👍 chip", reactionJS("hello @ben, edited", "👍"))
	for _, d := range []*chatDev{ana, ben} {
		d.waitJS("two 👍", reactionJS("hello @ben, edited", "👍")+`?.textContent === "👍 2"`)
	}
	ben.click("ben's 👍 chip", reactionJS("hello @ben, edited", "👍"))
	for _, d := range []*chatDev{ana, ben} {
		d.waitJS("one 👍 again", reactionJS("hello @ben, edited", "👍")+`?.textContent === "👍 1"`)
	}
	ana.waitJS("ana's 👍 highlighted", reactionJS("hello @ben, edited", "👍")+`?.dataset.me === "true"`)

	// Thread: ben replies; ana sees the count, opens the thread and answers.
	ben.click("ben's Reply", msgJS("hello @ben, edited")+`.querySelector("[data-test=reply]")`)
	ben.waitJS("the thread panel", `!!document.querySelector("[data-test=thread] [data-test=thread-msg]")`)
	ben.do(chromedp.SendKeys(`[data-test=thread-composer]`, "a reply in the thread"),
		chromedp.Click(`[data-test=thread-send]`))
	ana.waitJS("one reply", msgJS("hello @ben, edited")+`?.querySelector("[data-test=replies]")?.textContent === "1 reply"`)
	ana.click("the reply count", msgJS("hello @ben, edited")+`.querySelector("[data-test=replies]")`)
	ana.waitJS("the reply in ana's thread", `[...document.querySelectorAll("[data-test=thread] [data-test=thread-msg] [data-test=body]")].map(e => e.textContent).join("|") === "hello @ben, edited|a reply in the thread"`)
	ana.do(chromedp.SendKeys(`[data-test=thread-composer]`, "ana answers"),
		chromedp.Click(`[data-test=thread-send]`))
	ben.waitJS("ana's answer in ben's open thread", `[...document.querySelectorAll("[data-test=thread] [data-test=thread-msg] [data-test=body]")].map(e => e.textContent).join("|") === "hello @ben, edited|a reply in the thread|ana answers"`)
	ben.waitJS("two replies", msgJS("hello @ben, edited")+`?.querySelector("[data-test=replies]")?.textContent === "2 replies"`)
	ana.screenshot("thread")
	if n := ana.dialogs.Load() + ben.dialogs.Load(); n != 0 {
		t.Errorf("%d JavaScript dialogs opened", n)
	}
}

// TestBrowserOfflineEditReact: ben edits his message and reacts to ana's
// while offline (shown as pending), then reloads the page and comes back:
// the edit and the reaction reach ana, and each is stored once.
func TestBrowserOfflineEditReact(t *testing.T) {
	b := sqliteBackend(t)
	p := chatServe(t, b)
	browser := newBrowser(t)
	ana, ben := pairInTeam(t, browser, p.http)
	ana.say("ana writes")
	ben.say("ben writes")
	for _, d := range []*chatDev{ana, ben} {
		d.waitOnce("ana writes")
		d.waitOnce("ben writes")
	}

	// The on-demand screens load with the timeline, so they work offline.
	ben.waitJS("the on-demand module", `performance.getEntriesByType("resource").some(e => e.name.includes("/extras."))`)
	ben.setOffline(true)
	ben.waitJS("the offline indicator", `document.querySelector("[data-test=conn]").dataset.state !== "online"`)
	ben.click("ben's Edit", msgJS("ben writes")+`?.querySelector("[data-test=edit]")`)
	ben.waitJS("the editor", `!!document.querySelector("[data-test=edit-box]")`)
	ben.do(chromedp.Evaluate[chromedp.Void](`document.querySelector("[data-test=edit-box]").value = "ben wrote, offline"`),
		chromedp.Click(`[data-test=edit-save]`))
	ben.waitJS("the pending edit", `!!`+msgJS("ben wrote, offline")+`?.querySelector("[data-test=edit-pending]")`)
	ben.click("ben's React", msgJS("ana writes")+`.querySelector("[data-test=react]")`)
	ben.click("the 🎉 of the picker", `document.querySelector("[data-test=pick][data-emoji='🎉']")`)
	ben.waitJS("the pending reaction", reactionJS("ana writes", "🎉")+`?.textContent === "🎉 1"`)

	ben.setOffline(false)
	ben.do(chromedp.Navigate(p.http + "/c/c-team"))
	ben.waitOnline()
	for _, d := range []*chatDev{ana, ben} {
		d.waitJS("the edit", `!!`+msgJS("ben wrote, offline")+`?.querySelector("[data-test=edited]")`)
		d.waitJS("the reaction", reactionJS("ana writes", "🎉")+`?.textContent === "🎉 1"`)
	}
	ben.waitJS("the outbox empty", `!document.querySelector("[data-test=edit-pending]")`)
	n := kindCounts(t, b.store(t), "ana", "c-team")
	if n[parley.EventEdit] != 1 || n[parley.EventReaction] != 1 {
		t.Fatalf("stored %d edits and %d reactions, want 1 and 1", n[parley.EventEdit], n[parley.EventReaction])
	}
}

// TestBrowserMentionBadge: ben mentions ana while she is on the list: her
// row shows the mentions badge and a notification names the mention;
// opening the conversation clears the badge. ana then opens a direct
// conversation with ben from the directory and ben gets it, named "ana".
func TestBrowserMentionBadge(t *testing.T) {
	p := chatServe(t, sqliteBackend(t))
	browser := newBrowser(t)
	ana := newDev(t, browser, "ana")
	ben := newDev(t, browser, "ben")
	ana.signIn(p.http, "ana")
	ben.signIn(p.http, "ben")
	ben.open("c-team")
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
	})()`))
	ben.say("@ana can you look?")
	row := `document.querySelector("[data-test=conv][data-conv='c-team'] [data-test=mentions]")`
	ana.waitJS("the mentions badge", row+`?.textContent === "@1"`)
	ana.waitJS("the notification", `window.__notes.length === 1`)
	if got := devEval[string](ana, `window.__notes[0]`); got != "ben mentioned you in C team | ben: @ana can you look?" {
		t.Fatalf("notification %q", got)
	}
	ana.open("c-team")
	ana.waitJS("the badge cleared", `!`+row)

	// A direct message from the directory.
	ana.do(chromedp.Navigate(p.http + "/dm"))
	ana.waitJS("the directory search", `!!document.querySelector("[data-test=dm-search]")`)
	ana.do(chromedp.SendKeys(`[data-test=dm-search]`, "be"))
	ana.click("ben in the directory", `document.querySelector("[data-test=dm-user][data-user=ben]")`)
	ana.waitJS("the direct conversation", `document.querySelector("[data-test=conv-view]")?.dataset.conv === "dm:ana:ben"`)
	ana.waitJS("its title", `document.querySelector("[data-test=conv-title]").textContent === "ben"`)
	ana.say("just us")
	ana.waitOnce("just us")
	ben.waitJS("the direct conversation in ben's list", `document.querySelector("[data-test=conv][data-conv='dm:ana:ben'] .title")?.textContent === "ana"`)
}

// TestBrowserEditWindow: with an edit window in the policy file,
// GET /api/server tells it (edit_window_ms) and the page offers Edit on the
// user's own message only inside it: Edit leaves the message when the
// window passes, while Recall (a 10-minute window) stays.
func TestBrowserEditWindow(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "parley.yaml")
	if err := os.WriteFile(cfg, []byte("edit_window: 4s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := serveArgs(t, "--demo", "--db", "sqlite:"+filepath.Join(dir, "parley.db"), "--data-dir", dir, "--config", cfg)
	if st, got := get(t, p.http+"/api/server"); st != http.StatusOK || !strings.Contains(got, `"edit_window_ms":4000`) || !strings.Contains(got, `"recall_window_ms":600000`) {
		t.Fatalf("GET /api/server: %d %s; want the edit and recall windows", st, got)
	}
	browser := newBrowser(t)
	ana := newDev(t, browser, "ana")
	ana.signIn(p.http, "ana")
	ana.open("c-team")
	ana.say("edit me quickly")
	ana.waitOnce("edit me quickly")
	edit := msgJS("edit me quickly") + `?.querySelector("[data-test=edit]")`
	if !devEval[bool](ana, `!!`+edit) {
		t.Fatalf("no Edit on a message just sent")
	}
	start := time.Now()
	ana.waitJS("Edit gone after the window", `!`+edit)
	if el := time.Since(start); el > 6*time.Second {
		t.Errorf("Edit left %v after the message was shown; the window is 4 s", el)
	}
	if !devEval[bool](ana, `!!`+msgJS("edit me quickly")+`?.querySelector("[data-test=recall]")`) {
		t.Errorf("Recall left with Edit; its window is 10 minutes")
	}
}
