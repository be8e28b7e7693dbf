package main

import (
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserAccount: on the account screen ana sets a display name, and
// ben's view of the team conversation shows it in place of her id (in the
// timeline and the conversation list); a wrong current password is
// refused with a sentence (not the code) and ana stays signed in; ana
// signs another of her devices out after a confirmation (Cancel changes
// nothing), and its token then stops working.
func TestBrowserAccount(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		p := serveApp(t, "--db", b.db, "--data-dir", b.dir)
		other := login(t, p.http, "ana") // ana's other device, "t"
		if st := callAPI(t, p.http, other, "POST", "/api/convs/c-team/messages", map[string]string{"body": "hello from ana"}, nil,
			"Idempotency-Key", "acc-1"); st != http.StatusCreated {
			t.Fatalf("send: %d", st)
		}
		br := newBrowser(t)
		ana, ben := newDevice(t, br), newDevice(t, br)
		openSignedIn(t, ben, p, "ben", "/c/c-team")
		const who = `[data-test="msg"][data-sender="ana"] .who`
		waitTrue(t, ben, `document.querySelector('`+who+`')?.textContent === "ana"`)

		openSignedIn(t, ana, p, "ana", "/account")
		act(t, ana,
			chromedp.WaitVisible(sel("display-name")),
			chromedp.SendKeys(sel("display-name"), "Ana Lima"),
			chromedp.Click(sel("save-name")),
		)
		waitTrue(t, ana, `document.querySelector('[data-test="status"]')?.textContent.includes("Ana Lima")`)
		waitTrue(t, ana, `document.querySelector('[data-test="me"]')?.textContent === "Ana Lima"`)
		screenshot(t, ana, "account")

		// Names are looked up once per page: a reload shows the new one.
		act(t, ben, chromedp.Reload())
		waitTrue(t, ben, `document.querySelector('`+who+`')?.textContent === "Ana Lima"`)
		waitTrue(t, ben, `document.querySelector('[data-conv="c-team"] .preview')?.textContent.startsWith("Ana Lima: ")`)
		screenshot(t, ben, "name")

		act(t, ana,
			chromedp.SendKeys(sel("current-password"), "not my password"),
			chromedp.SendKeys(sel("new-password"), "a much newer password"),
			chromedp.SendKeys(sel("new-password-again"), "a much newer password"),
			chromedp.Click(sel("change-password")),
		)
		waitTrue(t, ana, `[...document.querySelectorAll('[data-test="status"][data-code="INVALID_ARGUMENT"]')].some(e => e.textContent === "The current password is wrong.")`)
		if st := callAPI(t, p.http, other, "GET", "/api/me", nil, nil); st != http.StatusOK {
			t.Fatalf("ana's other device after a refused change: %d", st)
		}

		waitTrue(t, ana, `document.querySelector('[data-test="session-browser-ana"][data-current="true"]') && document.querySelector('[data-test="signout-t"]')`)
		if eval[bool](t, ana, `!!document.querySelector('[data-test="signout-browser-ana"]')`) {
			t.Errorf("the current device offers Sign out on the devices list")
		}
		act(t, ana, chromedp.Click(sel("signout-t")))
		wantConfirm(t, ana, "Sign out t")
		act(t, ana, chromedp.Click(sel("confirm-cancel")))
		waitTrue(t, ana, `!document.querySelector('[data-test="confirm"]') && document.querySelector('[data-test="session-t"]')`)
		if st := callAPI(t, p.http, other, "GET", "/api/me", nil, nil); st != http.StatusOK {
			t.Fatalf("ana's other device after a cancelled sign-out: %d", st)
		}
		act(t, ana, chromedp.Click(sel("signout-t")))
		wantConfirm(t, ana, "Sign out t")
		act(t, ana, chromedp.Click(sel("confirm-ok")))
		waitTrue(t, ana, `document.querySelector('[data-test="sessions"][data-loaded]') && !document.querySelector('[data-test="session-t"]')`)
		if st := callAPI(t, p.http, other, "GET", "/api/me", nil, nil); st != http.StatusUnauthorized {
			t.Errorf("the signed-out device's token: %d, want 401", st)
		}
		if eval[string](t, ana, `location.pathname`) != "/account" {
			t.Errorf("ana left the account screen")
		}
	})
}
