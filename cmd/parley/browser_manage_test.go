package main

// The management screens in real Chromium against a real `parley serve`
// (issue 13): export and download, a group's members, the admin screens,
// and what a non-admin sees of them. The harness (newBrowser, newDevice,
// serveApp, act, eval, screenshot) is in browser_test.go.
// Every outcome is checked against the API or the store, not only the page.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

const demoPass = "parley-demo"

// waitTrue waits until the JavaScript expression is truthy on the device
// (polled on animation frames), failing with a screenshot after
// browserTimeout.
func waitTrue(t testing.TB, dev context.Context, expr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(dev, browserTimeout)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool]("!!("+expr+")", chromedp.WithPollingTimeout(browserTimeout))); err != nil {
		screenshot(t, dev, "failed")
		t.Fatalf("waiting for %s: %v", expr, err)
	}
}

// sel is the CSS selector of a data-test name.
func sel(name string) chromedp.CSS { return chromedp.CSS(fmt.Sprintf(`[data-test=%q]`, name)) }

// callAPI makes one HTTP API call with a bearer token (none when token is
// "") and decodes the JSON reply into out (when not nil); it returns the
// status.
func callAPI(t testing.TB, base, token, method, path string, body any, out any, header ...string) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode
}

// openSignedIn signs dev in as login (from the page, so the browser keeps
// the session cookie) and opens path. A login answered 503 or 429 is
// retried after its Retry-After, as a client must: password hashing has
// a bounded number of slots, and a loaded machine can run out.
func openSignedIn(t testing.TB, dev context.Context, p *proc, login, path string) {
	t.Helper()
	act(t, dev, chromedp.Navigate(p.http+"/signin"), chromedp.WaitReady(chromedp.CSS(`#app > *`)))
	body, _ := json.Marshal(map[string]string{"login": login, "password": demoPass, "device_id": "browser-" + login, "install_id": "install-" + login})
	status := eval[int](t, dev, fmt.Sprintf(`(async () => {
		for (let i = 0; ; i++) {
			const r = await fetch("/api/login", {method: "POST", credentials: "same-origin",
				headers: {"Content-Type": "application/json"}, body: %s});
			if ((r.status !== 503 && r.status !== 429) || i === 20) return r.status;
			await new Promise(ok => setTimeout(ok, 1000 * Number(r.headers.get("Retry-After") || 1)));
		}
	})()`, jsString(string(body))))
	if status != http.StatusOK {
		t.Fatalf("sign in %s: status %d", login, status)
	}
	act(t, dev, chromedp.Navigate(p.http+path))
}

// login returns a token of user, retrying a 503 or 429 after its
// Retry-After (see openSignedIn).
func login(t testing.TB, base, user string) string {
	t.Helper()
	body := map[string]string{"login": user, "password": demoPass, "device_id": "t", "install_id": "t1"}
	for i := 0; ; i++ {
		var s struct{ Token string }
		req, _ := json.Marshal(body)
		resp, err := http.Post(base+"/api/login", "application/json", bytes.NewReader(req))
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(&s)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && s.Token != "" {
			return s.Token
		}
		if (resp.StatusCode != http.StatusServiceUnavailable && resp.StatusCode != http.StatusTooManyRequests) || i == 20 {
			t.Fatalf("login %s: %d", user, resp.StatusCode)
		}
		wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		time.Sleep(time.Duration(max(wait, 1)) * time.Second)
	}
}

// TestBrowserExportDownload is issue 13's test 8: an export started from
// the browser is followed to done, and the file Chromium downloads through
// the page's link has the sha256 and size the job reports
// (GET /exports/{id}); the same link answers ranges, so the browser can
// resume it.
func TestBrowserExportDownload(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		p := serveApp(t, "--db", b.db, "--data-dir", b.dir)
		token := login(t, p.http, "ana")
		for i, body := range []string{"first", "<img src=x onerror=alert(1)> ünïcödé", "third"} {
			if st := callAPI(t, p.http, token, "POST", "/api/convs/c-team/messages", map[string]string{"body": body}, nil,
				"Idempotency-Key", fmt.Sprintf("export-msg-%d", i)); st != http.StatusCreated {
				t.Fatalf("send %d: %d", i, st)
			}
		}

		br := newBrowser(t)
		dev := newDevice(t, br)
		// The screen is opened from the menu. A direct load of /exports
		// does not reach the app yet: ServeMux redirects it to /exports/,
		// the export API's catch-all, which answers 404 (routes.go needs a
		// GET /exports navigation route; see the web-manage report).
		openSignedIn(t, dev, p, "ana", "/")
		act(t, dev, chromedp.Click(`nav a[href="/exports"]`), chromedp.WaitVisible(sel("export-start")))
		// The scope list offers every conversation of the user.
		waitTrue(t, dev, `document.querySelector('[data-test="export-scope"] option[value="conv:c-team"]')`)
		act(t, dev, chromedp.Click(sel("export-start")), chromedp.WaitVisible(sel("export-download")))
		jobID := eval[string](t, dev, `document.querySelector('[data-job]').dataset.job`)
		shown := eval[string](t, dev, `document.querySelector('[data-test="export-sha256"]').textContent`)
		progress := eval[string](t, dev, `document.querySelector('[data-test="export-progress"]').textContent`)

		var job struct {
			State  string `json:"state"`
			SHA256 string `json:"sha256"`
			Bytes  int64  `json:"bytes"`
			URL    string `json:"url"`
		}
		if st := callAPI(t, p.http, token, "GET", "/exports/"+jobID, nil, &job); st != http.StatusOK || job.State != "done" || job.SHA256 == "" {
			t.Fatalf("GET /exports/%s: %d %+v", jobID, st, job)
		}
		if shown != job.SHA256 {
			t.Errorf("page shows sha256 %q, job has %q", shown, job.SHA256)
		}
		if !strings.Contains(progress, "100%") {
			t.Errorf("progress of a done job reads %q", progress)
		}
		screenshot(t, dev, "export")

		// Chromium downloads through the page's link into a directory of
		// the test; the file is named by the download's GUID.
		dir := t.TempDir()
		dctx, cancel := context.WithTimeout(dev, browserTimeout)
		defer cancel()
		events := chromedp.Events(dctx, browser.DownloadProgress)
		if _, err := chromedp.Call(dev, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
			Behavior:         browser.SetDownloadBehaviorBehaviorAllowAndName,
			BrowserContextID: chromedp.FromContext(dev).BrowserContextID,
			DownloadPath:     dir,
			EventsEnabled:    ptrTo(true),
		}); err != nil {
			t.Fatal(err)
		}
		act(t, dev, chromedp.Click(sel("export-download")))
		var file string
		for ev, err := range events {
			if err != nil {
				t.Fatalf("download events: %v", err)
			}
			if ev.State == browser.DownloadProgressStateCanceled {
				t.Fatalf("download canceled: %+v", ev)
			}
			if ev.State == browser.DownloadProgressStateCompleted {
				file = filepath.Join(dir, ev.GUID)
				break
			}
		}
		if file == "" {
			t.Fatal("the download did not complete")
		}
		if got := fileSHA(t, file); got != job.SHA256 {
			t.Errorf("downloaded file sha256 %s, job %s", got, job.SHA256)
		}
		if fi, err := os.Stat(file); err != nil || fi.Size() != job.Bytes {
			t.Errorf("downloaded %v bytes (%v), job has %d", fi.Size(), err, job.Bytes)
		}

		// The link the page holds answers a range under its ETag: what a
		// browser's resume sends.
		href := eval[string](t, dev, `document.querySelector('[data-test="export-download"]').getAttribute("href")`)
		req, _ := http.NewRequest("GET", p.http+href, nil)
		req.Header.Set("Range", "bytes=10-")
		req.Header.Set("If-Range", `"`+job.SHA256+`"`)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		rest, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		whole, _ := os.ReadFile(file)
		if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(rest, whole[10:]) {
			t.Errorf("resume of the page's link: %d, %d bytes (want 206 and the file's tail)", resp.StatusCode, len(rest))
		}

		// The job stays on the screen after a reload (localStorage).
		act(t, dev, chromedp.Navigate(p.http+"/"), chromedp.Click(`nav a[href="/exports"]`), chromedp.WaitVisible(sel("export-download")))
		if got := eval[string](t, dev, `document.querySelector('[data-job]').dataset.job`); got != jobID {
			t.Errorf("after a reload the screen shows job %q, want %q", got, jobID)
		}

		// One conversation's export: a second job, scoped to it. The choices
		// fill in when the conversation list arrives (after the reload
		// above it may come later than the screen).
		waitTrue(t, dev, `document.querySelector('[data-test="export-scope"] option[value="conv:c-team"]') !== null`)
		act(t, dev, chromedp.SetValue(sel("export-scope"), "conv:c-team"), chromedp.Click(sel("export-start")))
		waitTrue(t, dev, `document.querySelectorAll('[data-job]').length === 2 && document.querySelector('[data-job]').dataset.job !== `+jsString(jobID))
		one := eval[string](t, dev, `document.querySelector('[data-job]').dataset.job`)
		var scoped struct {
			Scope string `json:"scope"`
		}
		if st := callAPI(t, p.http, token, "GET", "/exports/"+one, nil, &scoped); st != http.StatusOK || scoped.Scope != "conv:c-team" {
			t.Errorf("second job %s: %d scope %q, want conv:c-team", one, st, scoped.Scope)
		}

		// At 360 px the screen fits the width (the hash wraps).
		act(t, dev, chromedp.EmulateViewport(360, 740))
		waitTrue(t, dev, `innerWidth === 360`)
		if w := eval[int](t, dev, `document.documentElement.scrollWidth`); w > 360 {
			t.Errorf("export screen is %d px wide at a 360 px viewport", w)
		}
	})
}

func ptrTo[T any](v T) *T { return &v }

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestBrowserGroupMembers creates a group from the UI, adds and removes a
// member, and leaves it; each step is checked against the store.
func TestBrowserGroupMembers(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		p := serveApp(t, "--db", b.db, "--data-dir", b.dir)
		st := b.store(t)
		members := func(conv string) []string {
			t.Helper()
			ms, err := st.ConvMembers(context.Background(), conv)
			if err != nil {
				t.Fatalf("ConvMembers %s: %v", conv, err)
			}
			return ms
		}
		br := newBrowser(t)
		dev := newDevice(t, br)
		openSignedIn(t, dev, p, "ana", "/new")

		// An unknown user is refused with the server's reason, and
		// nothing is created.
		act(t, dev,
			chromedp.WaitVisible(sel("conv-title")),
			chromedp.SendKeys(sel("conv-title"), "Planning"),
			chromedp.SendKeys(sel("member-input"), "ben nobody"),
			chromedp.Click(sel("member-add")),
			chromedp.WaitVisible(sel("chip-nobody")),
			chromedp.Click(sel("create-conv")),
		)
		waitTrue(t, dev, `document.querySelector('[data-test="status"][data-code="NOT_FOUND"]')`)
		wantSentence(t, dev, "does not exist", "NOT_FOUND")
		// The chips show people by name, with an avatar.
		if !eval[bool](t, dev, `!!document.querySelector('[data-test="chip-ben"] .avatar') && !!document.querySelector('[data-test="chip-ben"] [data-name-of="ben"]')`) {
			t.Errorf("the new conversation's chip of ben has no avatar or name")
		}
		screenshot(t, dev, "new")
		convsOf := func(token string) []string {
			var r struct {
				Convs []struct {
					Conv   string `json:"conv"`
					Member bool   `json:"member"`
				} `json:"convs"`
			}
			callAPI(t, p.http, token, "GET", "/api/convs", nil, &r)
			var ids []string
			for _, c := range r.Convs {
				if c.Member {
					ids = append(ids, c.Conv)
				}
			}
			return ids
		}
		anaToken := login(t, p.http, "ana")
		if got := convsOf(anaToken); len(got) != 1 {
			t.Fatalf("after a refused create ana is in %v, want only c-team", got)
		}

		// Without nobody the group is made; the page moves to it.
		act(t, dev, chromedp.Click(`[data-test="chip-nobody"] button`), chromedp.WaitNotPresent(sel("chip-nobody")),
			chromedp.Click(sel("create-conv")))
		waitTrue(t, dev, `/^\/c\/c-[0-9a-f]{32}$/.test(location.pathname)`)
		conv := strings.TrimPrefix(eval[string](t, dev, `location.pathname`), "/c/")
		if got := members(conv); !slices.Equal(got, []string{"ana", "ben"}) {
			t.Fatalf("new group members %v, want [ana ben]", got)
		}

		// The members screen lists them; add cy, remove ben.
		act(t, dev, chromedp.Navigate(p.http+"/c/"+conv+"/members"))
		waitTrue(t, dev, `document.querySelector('[data-test="member-list"][data-loaded] [data-test="member-ben"]')`)
		if n := eval[int](t, dev, `document.querySelectorAll('[data-test="member-list"] li').length`); n != 2 {
			t.Errorf("members screen lists %d members, want 2", n)
		}
		if !eval[bool](t, dev, `!!document.querySelector('[data-test="member-ben"] .avatar') && !!document.querySelector('[data-test="member-ben"] [data-name-of="ben"]')`) {
			t.Errorf("the members list shows ben without an avatar or name")
		}
		act(t, dev, chromedp.SendKeys(sel("add-member-input"), "cy"), chromedp.Click(sel("add-member")))
		waitTrue(t, dev, `document.querySelector('[data-test="member-cy"]')`)
		if got := members(conv); !slices.Equal(got, []string{"ana", "ben", "cy"}) {
			t.Fatalf("after add: members %v", got)
		}
		// cy joined later: their screen says the list may be incomplete
		// (the joins before theirs are not theirs to see). cy is neither
		// the owner nor an admin, so nobody may be removed from cy's
		// screen: no removal is offered, adding is. Adding someone who does
		// not exist reads as a sentence and changes nothing.
		cyDev := newDevice(t, br)
		openSignedIn(t, cyDev, p, "cy", "/c/"+conv+"/members")
		waitTrue(t, cyDev, `document.querySelector('[data-test="member-list"][data-loaded] [data-test="member-cy"]') && document.querySelector('[data-test="add-member"]')`)
		if got := eval[string](t, cyDev, `document.querySelector('[data-test="member-note"]').textContent`); !strings.Contains(got, "may be incomplete") {
			t.Errorf("cy's members note %q, want it to say the list may be incomplete", got)
		}
		if n := eval[int](t, cyDev, `document.querySelectorAll('[data-test^="remove-"]').length`); n != 0 {
			t.Errorf("cy, not the owner, is offered %d removals", n)
		}
		if !eval[bool](t, cyDev, `!!document.querySelector('[data-test="leave"]')`) {
			t.Errorf("cy, a member, is not offered to leave")
		}
		act(t, cyDev, chromedp.SendKeys(sel("add-member-input"), "nobody"), chromedp.Click(sel("add-member")))
		waitTrue(t, cyDev, `document.querySelector('[data-test="status"][data-code="NOT_FOUND"]')`)
		wantSentence(t, cyDev, "There is no user nobody.", "NOT_FOUND")
		if got := members(conv); !slices.Equal(got, []string{"ana", "ben", "cy"}) {
			t.Fatalf("after cy's refused add: members %v", got)
		}

		// Removing asks first: Cancel (and Escape) change nothing, the
		// button that names the removal does it.
		act(t, dev, chromedp.Click(sel("remove-ben")))
		wantConfirm(t, dev, "Remove ben")
		act(t, dev, chromedp.Click(sel("confirm-cancel")))
		waitTrue(t, dev, `!document.querySelector('[data-test="confirm"]')`)
		act(t, dev, chromedp.Click(sel("remove-ben")))
		wantConfirm(t, dev, "Remove ben")
		act(t, dev, chromedp.KeyEvent(kb.Escape))
		waitTrue(t, dev, `!document.querySelector('[data-test="confirm"]')`)
		if got := members(conv); !slices.Equal(got, []string{"ana", "ben", "cy"}) {
			t.Fatalf("after a cancelled removal: members %v", got)
		}
		act(t, dev, chromedp.Click(sel("remove-ben")))
		wantConfirm(t, dev, "Remove ben")
		act(t, dev, chromedp.Click(sel("confirm-ok")))
		waitTrue(t, dev, `!document.querySelector('[data-test="member-ben"]') && document.querySelector('[data-test="member-cy"]')`)
		if got := members(conv); !slices.Equal(got, []string{"ana", "cy"}) {
			t.Fatalf("after remove: members %v", got)
		}
		if got := convsOf(login(t, p.http, "ben")); slices.Contains(got, conv) {
			t.Errorf("ben is still a member of %s per GET /api/convs", conv)
		}
		screenshot(t, dev, "members")

		// Leave, after a confirmation: back to the list, which no longer
		// shows the group.
		act(t, dev, chromedp.Click(sel("leave")))
		wantConfirm(t, dev, "Leave Planning")
		act(t, dev, chromedp.Click(sel("confirm-cancel")))
		waitTrue(t, dev, `!document.querySelector('[data-test="confirm"]')`)
		if got := members(conv); !slices.Equal(got, []string{"ana", "cy"}) {
			t.Fatalf("after a cancelled leave: members %v", got)
		}
		act(t, dev, chromedp.Click(sel("leave")))
		wantConfirm(t, dev, "Leave Planning")
		act(t, dev, chromedp.Click(sel("confirm-ok")))
		waitTrue(t, dev, `location.pathname === "/"`)
		if got := members(conv); !slices.Equal(got, []string{"cy"}) {
			t.Fatalf("after leave: members %v", got)
		}
		if got := convsOf(anaToken); slices.Contains(got, conv) {
			t.Errorf("ana still a member of %s after leaving", conv)
		}

		// A direct conversation from the same screen.
		act(t, dev, chromedp.Navigate(p.http+"/new"), chromedp.WaitVisible(sel("kind-direct")),
			chromedp.Click(sel("kind-direct")),
			chromedp.SendKeys(sel("member-input"), "cy"),
			chromedp.Click(sel("create-conv")))
		waitTrue(t, dev, `/^\/c\/c-[0-9a-f]{32}$/.test(location.pathname)`)
		direct := strings.TrimPrefix(eval[string](t, dev, `location.pathname`), "/c/")
		c, err := st.Conversation(context.Background(), direct)
		if err != nil || c.Kind != "direct" {
			t.Fatalf("direct conversation %s: %+v %v", direct, c, err)
		}
		if got := members(direct); !slices.Equal(got, []string{"ana", "cy"}) {
			t.Fatalf("direct members %v", got)
		}

		// At 360 px both screens fit the width; a direct conversation's
		// members screen offers no changes.
		act(t, dev, chromedp.EmulateViewport(360, 740), chromedp.Navigate(p.http+"/c/"+direct+"/members"))
		waitTrue(t, dev, `document.querySelector('[data-test="member-list"][data-loaded] [data-test="member-cy"]') && document.querySelector('[data-test="member-controls"]').textContent.includes("cannot change")`)
		if n := eval[int](t, dev, `document.querySelectorAll('[data-test^="remove-"], [data-test="leave"]').length`); n != 0 {
			t.Errorf("a direct conversation's members screen offers %d changes", n)
		}
		if w := eval[int](t, dev, `document.documentElement.scrollWidth`); w > 360 {
			t.Errorf("members screen is %d px wide at 360 px", w)
		}
		act(t, dev, chromedp.Navigate(p.http+"/new"), chromedp.WaitVisible(sel("conv-title")))
		if w := eval[int](t, dev, `document.documentElement.scrollWidth`); w > 360 {
			t.Errorf("new conversation screen is %d px wide at 360 px", w)
		}
	})
}

// TestBrowserAdminUsers: an admin creates, disables and enables a user
// from the users screen (the disabled user cannot log in, the enabled one
// can), sees it in the audit log, and sets a conversation's retention.
func TestBrowserAdminUsers(t *testing.T) {
	p := serveApp(t)
	br := newBrowser(t)
	dev := newDevice(t, br)
	openSignedIn(t, dev, p, "ana", "/admin/users")
	act(t, dev, chromedp.WaitVisible(sel("new-user-id")))
	waitTrue(t, dev, `document.querySelector('[data-test="user-table"][data-loaded] [data-test="user-ben"]')`)
	// The admin menu is there for an admin.
	if n := eval[int](t, dev, `document.querySelectorAll('nav a[href="/admin/users"]').length`); n < 1 {
		t.Errorf("no admin menu entry for ana")
	}

	act(t, dev,
		chromedp.SendKeys(sel("new-user-id"), "dana"),
		chromedp.SendKeys(sel("new-user-password"), "dana-password-1"),
		chromedp.Click(sel("create-user")))
	waitTrue(t, dev, `document.querySelector('[data-test="user-dana"][data-disabled="false"]')`)
	anaToken := login(t, p.http, "ana")
	// danaLogin is the status of a login as dana (a 503 or 429 from a
	// loaded machine is retried: it is no answer about the account).
	danaLogin := func() int {
		for i := 0; ; i++ {
			st := callAPI(t, p.http, "", "POST", "/api/login", map[string]string{
				"login": "dana", "password": "dana-password-1", "device_id": "d1", "install_id": "i1"}, nil)
			if (st != http.StatusServiceUnavailable && st != http.StatusTooManyRequests) || i == 20 {
				return st
			}
			time.Sleep(time.Second)
		}
	}
	if st := danaLogin(); st != http.StatusOK {
		t.Fatalf("dana's login after create: %d", st)
	}

	// Users are shown by name with an avatar.
	if !eval[bool](t, dev, `!!document.querySelector('[data-test="user-ben"] .avatar') && !!document.querySelector('[data-test="user-ben"] [data-name-of="ben"]')`) {
		t.Errorf("the users table shows ben without an avatar or name")
	}
	if eval[bool](t, dev, `!!document.querySelector('[data-test="user-toggle-ana"]')`) {
		t.Errorf("ana is offered to disable her own account")
	}

	// Disabling asks first; Cancel leaves the account as it was.
	act(t, dev, chromedp.Click(sel("user-toggle-dana")))
	wantConfirm(t, dev, "Disable dana")
	act(t, dev, chromedp.Click(sel("confirm-cancel")))
	waitTrue(t, dev, `!document.querySelector('[data-test="confirm"]') && document.querySelector('[data-test="user-dana"][data-disabled="false"]')`)
	if st := danaLogin(); st != http.StatusOK {
		t.Fatalf("dana's login after a cancelled disable: %d", st)
	}
	act(t, dev, chromedp.Click(sel("user-toggle-dana")))
	wantConfirm(t, dev, "Disable dana")
	act(t, dev, chromedp.Click(sel("confirm-ok")))
	waitTrue(t, dev, `document.querySelector('[data-test="user-dana"][data-disabled="true"]')`)
	screenshot(t, dev, "admin-users") // the one for the README: a disabled user among active ones
	if st := danaLogin(); st != http.StatusUnauthorized {
		t.Fatalf("a disabled user's login: %d, want 401", st)
	}
	act(t, dev, chromedp.Click(sel("user-toggle-dana")))
	waitTrue(t, dev, `document.querySelector('[data-test="user-dana"][data-disabled="false"]')`)
	if st := danaLogin(); st != http.StatusOK {
		t.Fatalf("an enabled user's login: %d", st)
	}

	// Paging: 60 more accounts (bots, no password) make a second page.
	for i := range 60 {
		if st := callAPI(t, p.http, anaToken, "POST", "/api/admin/users", map[string]string{"id": fmt.Sprintf("zz%02d", i)}, nil); st != http.StatusCreated {
			t.Fatalf("create zz%02d: %d", i, st)
		}
	}
	act(t, dev, chromedp.Navigate(p.http+"/admin/users"))
	waitTrue(t, dev, `document.querySelector('[data-test="user-table"][data-loaded] [data-test="user-ana"]')`)
	if n := eval[int](t, dev, `document.querySelectorAll('[data-test="user-table"] tbody tr').length`); n != 50 {
		t.Errorf("first page has %d rows, want 50", n)
	}
	act(t, dev, chromedp.Click(sel("page-next")))
	waitTrue(t, dev, `document.querySelector('[data-test="user-zz59"]') && !document.querySelector('[data-test="user-ana"]')`)
	if !eval[bool](t, dev, `document.querySelector('[data-test="page-next"]').disabled`) {
		t.Errorf("Next is enabled on the last page")
	}
	act(t, dev, chromedp.Click(sel("page-prev")))
	waitTrue(t, dev, `document.querySelector('[data-test="user-ana"]') && document.querySelector('[data-test="page-prev"]').disabled`)

	// The audit log shows the operations, newest first.
	act(t, dev, chromedp.Click(`nav.m-tabs a[href="/admin/audit"]`))
	waitTrue(t, dev, `document.querySelector('[data-test="audit-table"][data-loaded]')`)
	actions := eval[[]string](t, dev, `[...document.querySelectorAll('[data-test="audit-entry"]')].map(e => e.dataset.action)`)
	if len(actions) != 50 || actions[0] != "user.list" || actions[1] != "user.list" || actions[2] != "user.list" || actions[3] != "user.create" {
		t.Errorf("audit log actions %v, want the three listings, then the creates, newest first", actions)
	}
	// The older page holds the disable and enable made in the page.
	act(t, dev, chromedp.Click(sel("page-next")))
	waitTrue(t, dev, `[...document.querySelectorAll('[data-test="audit-entry"]')].some(e => e.dataset.action === "user.disable")`)
	older := eval[[]string](t, dev, `[...document.querySelectorAll('[data-test="audit-entry"]')].map(e => e.dataset.action)`)
	if i, j := slices.Index(older, "user.enable"), slices.Index(older, "user.disable"); i < 0 || j < 0 || i > j {
		t.Errorf("older audit page %v, want user.enable before user.disable (newest first)", older)
	}

	// Retention of c-team: shown, set, and stored.
	act(t, dev, chromedp.Click(`nav.m-tabs a[href="/admin/convs"]`), chromedp.WaitVisible(sel("retention-c-team")),
		chromedp.Click(sel("retention-c-team")), chromedp.WaitVisible(sel("retention-save")))
	if got := eval[string](t, dev, `document.querySelector('[data-test="retention-current"]').textContent`); got != "kept forever" {
		t.Errorf("c-team retention shown as %q", got)
	}
	// A policy that removes messages asks first.
	act(t, dev, chromedp.SendKeys(sel("retention-max-age"), "30d"),
		chromedp.SetValue(sel("retention-keep-last"), "100"),
		chromedp.Click(sel("retention-save")))
	wantConfirm(t, dev, "Save and remove")
	act(t, dev, chromedp.Click(sel("confirm-ok")))
	waitTrue(t, dev, `document.querySelector('[data-test="retention-current"]').textContent.includes("newest 100 kept")`)
	var c struct {
		Retention struct {
			MaxAge   string `json:"max_age"`
			KeepLast int64  `json:"keep_last"`
		} `json:"retention"`
	}
	if st := callAPI(t, p.http, anaToken, "GET", "/api/admin/convs/c-team", nil, &c); st != http.StatusOK ||
		c.Retention.MaxAge != "720h0m0s" || c.Retention.KeepLast != 100 {
		t.Errorf("c-team retention after save: %d %+v", st, c.Retention)
	}
	// A bad duration is refused, in a sentence that says what to write.
	act(t, dev, chromedp.Clear(sel("retention-max-age")), chromedp.SendKeys(sel("retention-max-age"), "soon"),
		chromedp.Click(sel("retention-save")))
	wantConfirm(t, dev, "Save and remove")
	act(t, dev, chromedp.Click(sel("confirm-ok")))
	waitTrue(t, dev, `document.querySelector('[data-test="status"][data-code="INVALID_ARGUMENT"]')`)
	wantSentence(t, dev, "such as 720h or 30d", "INVALID_ARGUMENT")

	// At 360 px the users screen fits: wide tables scroll in their box,
	// not the page.
	act(t, dev, chromedp.EmulateViewport(360, 740), chromedp.Navigate(p.http+"/admin/users"))
	waitTrue(t, dev, `document.querySelector('[data-test="user-table"][data-loaded]')`)
	if w := eval[int](t, dev, `document.documentElement.scrollWidth`); w > 360 {
		t.Errorf("users screen is %d px wide at a 360 px viewport", w)
	}
	screenshot(t, dev, "admin-users-360")

	// Dark, by prefers-color-scheme: the screen's colours follow.
	light := eval[string](t, dev, `getComputedStyle(document.querySelector('.m-table thead th')).backgroundColor`)
	if _, err := chromedp.Call(dev, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}},
	}); err != nil {
		t.Fatal(err)
	}
	act(t, dev, chromedp.EmulateViewport(1280, 800))
	waitTrue(t, dev, `matchMedia("(prefers-color-scheme: dark)").matches`)
	if dark := eval[string](t, dev, `getComputedStyle(document.querySelector('.m-table thead th')).backgroundColor`); dark == light {
		t.Errorf("table header is %s in light and dark alike", dark)
	}
	screenshot(t, dev, "admin-users-dark")
}

// TestBrowserAdminRefused: a non-admin has no admin menu, and opening an
// admin screen says, in a sentence, that it is for administrators (in
// Chinese too, once chosen); nothing of the listing shows.
func TestBrowserAdminRefused(t *testing.T) {
	p := serveApp(t)
	br := newBrowser(t)
	dev := newDevice(t, br)
	openSignedIn(t, dev, p, "ben", "/")
	waitTrue(t, dev, `document.querySelector('nav a[href="/exports"]')`)
	if n := eval[int](t, dev, `document.querySelectorAll('nav a[href^="/admin/"]').length`); n != 0 {
		t.Errorf("ben sees %d admin menu entries", n)
	}
	for _, path := range []string{"/admin/users", "/admin/audit", "/admin/convs"} {
		act(t, dev, chromedp.Navigate(p.http+path))
		waitTrue(t, dev, `document.querySelector('[data-test="status"][data-code="PERMISSION_DENIED"]')`)
		wantSentence(t, dev, "Only administrators can open this screen.", "PERMISSION_DENIED")
		if n := eval[int](t, dev, `document.querySelectorAll('h1').length`); n != 1 {
			t.Errorf("%s has %d h1 elements, want 1", path, n)
		}
		if n := eval[int](t, dev, `document.querySelectorAll('tbody tr').length`); n != 0 {
			t.Errorf("%s shows %d rows to a non-admin", path, n)
		}
	}
	// In Chinese the screen and its refusal are Chinese.
	eval[bool](t, dev, `(localStorage.setItem("parley.lang", "zh"), true)`)
	act(t, dev, chromedp.Navigate(p.http+"/admin/users"))
	waitTrue(t, dev, `document.querySelector('[data-test="status"][data-code="PERMISSION_DENIED"]')`)
	wantSentence(t, dev, "只有管理员可以打开此页面。", "PERMISSION_DENIED")
	if got := eval[string](t, dev, `document.querySelector('h1').textContent`); got != "用户" {
		t.Errorf("the users screen in Chinese is headed %q, want 用户", got)
	}
}

// setNetwork cuts (off) or restores a device's network, as DevTools'
// "Offline" does: fetches fail as they do when the server is unreachable.
func setNetwork(t testing.TB, dev context.Context, off bool) {
	t.Helper()
	if _, err := chromedp.Call(dev, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(dev, network.EmulateNetworkConditionsByRule, network.EmulateNetworkConditionsByRuleParams{
		MatchedNetworkConditions: []*network.Conditions{{Offline: off, DownloadThroughput: -1, UploadThroughput: -1}},
	}); err != nil {
		t.Fatal(err)
	}
}

// TestBrowserManageErrors: a refusal for rate is shown with its retry
// time and changes nothing; an unreachable server reads "try again", and
// trying again works.
func TestBrowserManageErrors(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "parley.yaml")
	if err := os.WriteFile(cfg, []byte("rate_limits:\n  convs: {limit: 1, window: 1h}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := serveApp(t, "--config", cfg)
	br := newBrowser(t)
	dev := newDevice(t, br)
	openSignedIn(t, dev, p, "ana", "/new")
	create := func(title string) {
		t.Helper()
		act(t, dev, chromedp.WaitVisible(sel("conv-title")),
			chromedp.SendKeys(sel("conv-title"), title),
			chromedp.SendKeys(sel("member-input"), "ben"),
			chromedp.Click(sel("create-conv")))
	}
	create("One")
	waitTrue(t, dev, `location.pathname.startsWith("/c/c-")`)
	act(t, dev, chromedp.Navigate(p.http+"/new"))
	create("Two")
	waitTrue(t, dev, `document.querySelector('[data-test="status"][data-code="RATE_LIMITED"]')`)
	wantSentence(t, dev, "try again in", "RATE_LIMITED")
	var convs struct {
		Convs []struct{ Title string } `json:"convs"`
	}
	callAPI(t, p.http, login(t, p.http, "ana"), "GET", "/api/convs", nil, &convs)
	for _, c := range convs.Convs {
		if c.Title == "Two" {
			t.Errorf("a rate-limited create made a conversation")
		}
	}

	// Offline, starting an export is "try again"; back online, it works.
	act(t, dev, chromedp.Navigate(p.http+"/"), chromedp.Click(`nav a[href="/exports"]`), chromedp.WaitVisible(sel("export-start")))
	setNetwork(t, dev, true)
	act(t, dev, chromedp.Click(sel("export-start")))
	waitTrue(t, dev, `document.querySelector('[data-test="status"][data-code="UNAVAILABLE"]')`)
	wantSentence(t, dev, "try again", "UNAVAILABLE")
	setNetwork(t, dev, false)
	act(t, dev, chromedp.Click(sel("export-start")), chromedp.WaitVisible(sel("export-download")))
}

// pressEnter sends Enter as a key-down and a key-up, as a keyboard does
// when the page handles the key-down (chromedp's "\r" would add a char
// event a handled key press never produces).
func pressEnter(t testing.TB, dev context.Context) {
	t.Helper()
	for _, typ := range []input.DispatchKeyEventType{input.DispatchKeyEventTypeRawKeyDown, input.DispatchKeyEventTypeKeyUp} {
		if _, err := chromedp.Call(dev, input.DispatchKeyEvent, input.DispatchKeyEventParams{
			Type: typ, Key: "Enter", Code: "Enter", WindowsVirtualKeyCode: 13, NativeVirtualKeyCode: 13,
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// focused is the data-test of the focused element.
func focused(t testing.TB, dev context.Context) string {
	t.Helper()
	return eval[string](t, dev, `document.activeElement ? (document.activeElement.dataset.test || document.activeElement.tagName) : ""`)
}

// TestBrowserNewConvKeyboard creates a group with the keyboard alone: Tab
// between the fields, Enter in the id field adds the person (and does not
// submit), Enter on Create submits.
func TestBrowserNewConvKeyboard(t *testing.T) {
	p := serveApp(t)
	br := newBrowser(t)
	dev := newDevice(t, br)
	openSignedIn(t, dev, p, "ana", "/new")
	act(t, dev, chromedp.WaitVisible(sel("conv-title")), chromedp.Focus(sel("conv-title")), chromedp.KeyEvent("Keys"), chromedp.KeyEvent(kb.Tab))
	if got := focused(t, dev); got != "member-input" {
		t.Fatalf("Tab from the title focused %q, want member-input", got)
	}
	act(t, dev, chromedp.KeyEvent("ben"))
	pressEnter(t, dev)
	waitTrue(t, dev, `document.querySelector('[data-test="chip-ben"]')`)
	if got := eval[string](t, dev, `location.pathname`); got != "/new" {
		t.Fatalf("Enter in the id field left the screen for %s", got)
	}
	var path []string
	for range 3 {
		act(t, dev, chromedp.KeyEvent(kb.Tab))
		path = append(path, focused(t, dev))
	}
	if want := []string{"member-add", "BUTTON", "create-conv"}; !slices.Equal(path, want) {
		t.Fatalf("Tab order after the id field %v, want %v (Add, the chip's remove, Create)", path, want)
	}
	act(t, dev, chromedp.KeyEvent(kb.Enter))
	waitTrue(t, dev, `location.pathname.startsWith("/c/c-")`)
	conv := strings.TrimPrefix(eval[string](t, dev, `location.pathname`), "/c/")
	var c struct {
		Title string `json:"title"`
		Kind  string `json:"kind"`
		Owner string `json:"owner"`
	}
	if st := callAPI(t, p.http, login(t, p.http, "ana"), "GET", "/api/admin/convs/"+conv, nil, &c); st != http.StatusOK || c.Title != "Keys" || c.Kind != "group" || c.Owner != "ana" {
		t.Errorf("created by keyboard: %d %+v", st, c)
	}
}

// wantSentence checks that the status line reads as a sentence containing
// want and does not show the protocol code (the code stays in data-code).
func wantSentence(t testing.TB, dev context.Context, want, code string) {
	t.Helper()
	got := eval[string](t, dev, `document.querySelector('[data-test="status"][data-code]').textContent`)
	if !strings.Contains(got, want) {
		t.Errorf("the status reads %q, want a sentence with %q", got, want)
	}
	if strings.Contains(got, code) {
		t.Errorf("the status reads %q: it shows the code %s", got, code)
	}
}

// wantConfirm waits for the confirmation dialog: modal, with the focus on
// Cancel and the OK button naming the action.
func wantConfirm(t testing.TB, dev context.Context, ok string) {
	t.Helper()
	waitTrue(t, dev, `document.querySelector('dialog[data-test="confirm"][open]')`)
	if got := eval[string](t, dev, `document.querySelector('[data-test="confirm-ok"]').textContent`); got != ok {
		t.Errorf("the confirmation's button reads %q, want %q", got, ok)
	}
	if got := focused(t, dev); got != "confirm-cancel" {
		t.Errorf("the confirmation opened with the focus on %q, want confirm-cancel", got)
	}
	if !eval[bool](t, dev, `document.querySelector('dialog[data-test="confirm"]').matches(':modal')`) {
		t.Errorf("the confirmation is not modal")
	}
}
