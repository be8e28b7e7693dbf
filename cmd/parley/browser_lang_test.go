package main

// Browser tests of the page's language (docs/web-client.md#languages),
// the notification feedback and the accessibility skeleton of the shell:
// the app follows the browser's languages (here a Chinese browser, by the
// DevTools overrides of Accept-Language and the locale), writes times
// through Intl in the locale, and has a switch that keeps the user's
// choice; the "Allow notifications" button says what the browser
// answered; every screen has a skip link, one h1 and one main landmark.

import (
	"regexp"
	"testing"

	browserpb "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// speakChinese makes the device's browser a Chinese one: Accept-Language
// and navigator.languages (the user agent override) and Intl's default
// locale. It holds for the tab's later navigations and reloads.
func speakChinese(d *chatDev) {
	d.t.Helper()
	ua := devEval[string](d, `navigator.userAgent`)
	if _, err := chromedp.Call(d.ctx, emulation.SetUserAgentOverride, emulation.SetUserAgentOverrideParams{UserAgent: ua, AcceptLanguage: "zh-CN"}); err != nil {
		d.t.Fatal(err)
	}
	if _, err := chromedp.Call(d.ctx, emulation.SetLocaleOverride, emulation.SetLocaleOverrideParams{Locale: "zh-CN"}); err != nil {
		d.t.Fatal(err)
	}
}

// text is the trimmed text of the element a CSS selector finds ("" when none).
func text(sel string) string {
	return `(document.querySelector(` + jsq(sel) + `)?.textContent ?? "").trim()`
}

// oneOfEach is true when the page has exactly one h1 and one main landmark.
const oneOfEach = `document.querySelectorAll("h1").length === 1 && document.querySelectorAll("main, [role=main]").length === 1`

// i18nModule imports the page's own i18n.js (its hashed name, from the
// resources the page loaded): the same module instance the app uses.
const i18nModule = `import(performance.getEntriesByType("resource").map(e => e.name).find(n => /\/assets\/i18n\.[0-9a-f]+\.js$/.test(n)))`

// TestBrowserLanguage: a browser whose language is Chinese gets the app in
// Simplified Chinese — the sign-in screen (its title, labels, the demo
// hint, a refused sign-in's sentence) and, signed in, the top bar, the
// list and a conversation; <html lang> is zh-CN and a message's time is
// written on a 24-hour clock. The language switch turns the page English,
// and the choice outlives a reload.
func TestBrowserLanguage(t *testing.T) {
	p := chatServe(t, sqliteBackend(t))
	browser := newBrowser(t)
	ana := newDev(t, browser, "ana")
	ana.do(chromedp.Navigate("about:blank"))
	speakChinese(ana)

	ana.do(chromedp.Navigate(p.http+"/signin"), chromedp.WaitVisible(`[data-test=login]`))
	if got := devEval[string](ana, `navigator.languages.join(",")`); got != "zh-CN" {
		t.Fatalf("navigator.languages %q, want zh-CN (the override)", got)
	}
	ana.waitJS("the demo hint in Chinese", text("[data-test=demo-hint]")+` === "演示服务器：可使用 ana、ben 或 cy 登录，密码为 parley-demo。"`)
	for expr, want := range map[string]string{
		`document.documentElement.lang`:      "zh-CN",
		`document.title`:                     "登录 · Parley",
		text("[data-test=signin-submit]"):    "登录",
		text("label:has([data-test=login])"): "用户名",
		text("[data-test=skip-link]"):        "跳到主要内容",
	} {
		if got := devEval[string](ana, expr); got != want {
			t.Errorf("sign-in: %s = %q, want %q", expr, got, want)
		}
	}
	if !devEval[bool](ana, oneOfEach) {
		t.Errorf("sign-in: not one h1 and one main")
	}
	ana.do(chromedp.SendKeys(`[data-test=login]`, "ana"), chromedp.SendKeys(`[data-test=password]`, "wrong"), chromedp.Click(`[data-test=signin-submit]`))
	ana.waitJS("the refusal in Chinese", text("[data-test=signin-error]")+` === "用户名或密码错误。"`)

	ana.signIn(p.http, "ana")
	ana.waitJS("the list's heading", text("h1")+` === "会话" && !!document.querySelector("[data-test=conv][data-conv=c-team]")`)
	for expr, want := range map[string]string{
		text(".conn-label"):                                "已连接",
		text("[data-test=search-open]"):                    "搜索",
		text("[data-test=signout]"):                        "退出登录",
		text(`nav a[href="/new"]`):                         "新建会话",
		text("main .empty-pane"):                           "请选择一个会话。",
		`document.documentElement.lang`:                    "zh-CN",
		`document.querySelector("[data-test=lang]").value`: "zh",
	} {
		if got := devEval[string](ana, expr); got != want {
			t.Errorf("list screen: %s = %q, want %q", expr, got, want)
		}
	}
	if !devEval[bool](ana, oneOfEach) {
		t.Errorf("list screen: not one h1 and one main")
	}
	// The list's rows: an avatar, and the counts in words (the badges
	// themselves are hidden from assistive technology).
	if got := devEval[string](ana, `document.querySelector("[data-test=conv][data-conv=c-team] .avatar")?.textContent`); got == "" {
		t.Errorf("no avatar in c-team's row")
	}
	ben := login(t, p.http, "ben")
	if st := callAPI(t, p.http, ben, "POST", "/api/convs/c-team/messages", map[string]string{"body": "@ana 在吗？"}, nil, "Idempotency-Key", "lang-1"); st != 201 {
		t.Fatalf("ben's message: %d", st)
	}
	row := `document.querySelector("[data-test=conv][data-conv=c-team]")`
	ana.waitJS("the unread badge", row+`?.querySelector("[data-test=unread]")?.textContent === "1"`)
	ana.waitJS("the row's counts in words", row+`.querySelector("[data-test=conv-counts]").textContent === "，1 条未读消息，1 条消息提到了你，" && `+
		row+`.querySelector(".preview").textContent === "ben：@ana 在吗？"`)
	ana.screenshot("zh-list")
	ana.open("c-team")
	ana.say("你好")
	ana.waitOnce("你好")
	if !devEval[bool](ana, oneOfEach) {
		t.Errorf("conversation screen: not one h1 and one main")
	}
	ana.screenshot("zh-conversation")
	if got := devEval[string](ana, text("[data-test=conv][data-conv=c-team] .preview")); got != "ana：你好" {
		t.Errorf("the list's preview %q, want ana：你好", got)
	}
	// The message's time: hours and minutes on a 24-hour clock, no AM/PM
	// (上午/下午), whatever the hour of the run.
	shown := devEval[string](ana, msgJS("你好")+`.querySelector("time").textContent.trim()`)
	if !regexp.MustCompile(`^([01]?\d|2[0-3]):[0-5]\d$`).MatchString(shown) {
		t.Errorf("the message's time %q, want HH:MM on a 24-hour clock", shown)
	}
	// And an afternoon time through the app's own i18n.js.
	if got := devEval[string](ana, i18nModule+`.then(m => m.when(new Date(2026, 11, 7, 15, 5), "time"))`); got != "15:05" {
		t.Errorf(`when(15:05, "time") = %q in zh-CN, want 15:05`, got)
	}

	// The switch: English, kept across a reload.
	ana.do(chromedp.Evaluate[chromedp.Void](`(() => { const s = document.querySelector("[data-test=lang]"); s.value = "en"; s.dispatchEvent(new Event("change")); })()`))
	ana.waitJS("the page in English", `document.documentElement.lang === "en" && `+text("[data-test=search-open]")+` === "Search"`)
	ana.waitOnline()
	ana.do(chromedp.Reload())
	ana.waitJS("English after a reload", `document.documentElement.lang === "en" && `+text("[data-test=signout]")+` === "Sign out"`)
	ana.waitOnline()
	if got := devEval[string](ana, text(".conn-label")); got != "Connected" {
		t.Errorf("connection label %q after switching to English", got)
	}
	if got := devEval[string](ana, i18nModule+`.then(m => m.language() + " " + m.t("app.choose"))`); got != "en Choose a conversation." {
		t.Errorf("i18n.js after the switch: %q", got)
	}
	ana.screenshot("en-list")

	// A session ended elsewhere: the sign-in says so in a sentence, the
	// code only in data-reason.
	ana.do(chromedp.Evaluate[chromedp.Void](`fetch("/api/logout", {method: "POST", credentials: "same-origin"})`))
	ana.waitJS("sign-in with the reason", `document.querySelector("[data-test=signin-error]")?.dataset.reason === "UNAUTHENTICATED"`)
	if got := devEval[string](ana, text("[data-test=signin-error]")); got != "Your session has ended. Sign in again." {
		t.Errorf("the reason %q", got)
	}
}

// TestBrowserNotifyStatus: "Allow notifications" says what the browser
// answered: refused, the button goes and a sentence says notifications
// are blocked (a toast, and the sidebar's notify-status, which a reload
// shows again until dismissed); allowed, a toast says they are on; a
// browser without notifications says it cannot show them.
func TestBrowserNotifyStatus(t *testing.T) {
	p := chatServe(t, sqliteBackend(t))
	browser := newBrowser(t)
	ana := newDev(t, browser, "ana")
	setPerm := func(setting browserpb.PermissionSetting) {
		t.Helper()
		if _, err := chromedp.CallBrowser(ana.ctx, browserpb.SetPermission, browserpb.SetPermissionParams{
			Permission: &browserpb.PermissionDescriptor{Name: "notifications"}, Setting: setting,
			Origin: p.http, BrowserContextID: chromedp.FromContext(ana.ctx).BrowserContextID,
		}); err != nil {
			t.Fatal(err)
		}
	}
	ana.do(chromedp.Navigate(p.http + "/signin"))
	setPerm(browserpb.PermissionSettingPrompt)
	ana.signIn(p.http, "ana")
	ana.waitJS("the Allow button", `!!document.querySelector("[data-test=allow-notify]") && !document.querySelector("[data-test=notify-status]")`)

	// The user (or the browser) refuses.
	const blocked = "Notifications are blocked in this browser's site settings."
	ana.do(chromedp.Evaluate[chromedp.Void](`Notification.requestPermission = () => Promise.resolve("denied")`))
	ana.click("Allow notifications", `document.querySelector("[data-test=allow-notify]")`)
	ana.waitJS("the sentence", text("[data-test=notify-status] span")+` === `+jsq(blocked)+
		` && `+text("[data-test=toast]")+` === `+jsq(blocked)+` && !document.querySelector("[data-test=allow-notify]")`)

	// Already denied at the start: said again until dismissed.
	setPerm(browserpb.PermissionSettingDenied)
	ana.do(chromedp.Reload())
	ana.waitOnline()
	ana.waitJS("the sentence after a reload", text("[data-test=notify-status] span")+` === `+jsq(blocked))
	ana.click("Dismiss", `document.querySelector("[data-test=notify-status-dismiss]")`)
	ana.waitJS("the sentence gone", `!document.querySelector("[data-test=notify-status]")`)
	ana.do(chromedp.Reload())
	ana.waitOnline()
	if devEval[bool](ana, `!!document.querySelector("[data-test=notify-status]") || !!document.querySelector("[data-test=allow-notify]")`) {
		t.Errorf("after dismissing, a reload shows the sentence or the button again")
	}

	// Allowed: a short confirmation.
	setPerm(browserpb.PermissionSettingPrompt)
	ana.do(chromedp.Reload())
	ana.waitOnline()
	ana.do(chromedp.Evaluate[chromedp.Void](`Notification.requestPermission = () => Promise.resolve("granted")`))
	ana.click("Allow notifications", `document.querySelector("[data-test=allow-notify]")`)
	ana.waitJS("the confirmation", text("[data-test=toast]")+` === "Notifications are on." && !document.querySelector("[data-test=allow-notify]")`)

	// A browser without notifications.
	cy := newDev(t, browser, "cy")
	if _, err := chromedp.Call(cy.ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: `delete window.Notification`}); err != nil {
		t.Fatal(err)
	}
	cy.signIn(p.http, "cy")
	cy.waitJS("the unsupported sentence", text("[data-test=notify-status] span")+` === "This browser cannot show notifications." && !document.querySelector("[data-test=allow-notify]")`)
}

// TestBrowserSkipLink: on the sign-in screen and in the shell the skip
// link is the first thing the keyboard reaches: shown when it has the
// focus, and Enter on it moves the focus to the screen's main landmark.
func TestBrowserSkipLink(t *testing.T) {
	p := chatServe(t, sqliteBackend(t))
	browser := newBrowser(t)
	ana := newDev(t, browser, "ana")
	key := func(typ input.DispatchKeyEventType, k, code, txt string, vk int64) {
		t.Helper()
		if _, err := chromedp.Call(ana.ctx, input.DispatchKeyEvent, input.DispatchKeyEventParams{
			Type: typ, Key: k, Code: code, Text: txt, WindowsVirtualKeyCode: vk, NativeVirtualKeyCode: vk,
		}); err != nil {
			t.Fatal(err)
		}
	}
	firstFocusable := `document.querySelector("a[href], button, input, select, textarea, [tabindex]:not([tabindex='-1'])")?.dataset.test`
	check := func(screen string) {
		t.Helper()
		if got := devEval[string](ana, firstFocusable); got != "skip-link" {
			t.Errorf("%s: the first focusable element is %q, want the skip link", screen, got)
		}
		if !devEval[bool](ana, oneOfEach) {
			t.Errorf("%s: not one h1 and one main", screen)
		}
		// From the top of the page (the focus on the root element, as
		// after a load): Tab reaches the skip link, shown.
		ana.do(chromedp.Evaluate[chromedp.Void](`document.documentElement.tabIndex = -1, document.documentElement.focus()`))
		key(input.DispatchKeyEventTypeRawKeyDown, "Tab", "Tab", "", 9)
		key(input.DispatchKeyEventTypeKeyUp, "Tab", "Tab", "", 9)
		ana.waitJS(screen+": the skip link focused", `document.activeElement?.dataset.test === "skip-link"`)
		if !devEval[bool](ana, `(() => { const r = document.activeElement.getBoundingClientRect(); return r.top >= 0 && r.left >= 0 && r.width > 20 && r.bottom <= innerHeight; })()`) {
			t.Errorf("%s: the focused skip link is not on screen", screen)
		}
		if got := devEval[string](ana, text("[data-test=skip-link]")); got != "Skip to the content" {
			t.Errorf("%s: skip link %q", screen, got)
		}
		key(input.DispatchKeyEventTypeKeyDown, "Enter", "Enter", "\r", 13)
		key(input.DispatchKeyEventTypeKeyUp, "Enter", "Enter", "", 13)
		ana.waitJS(screen+": the focus in main", `document.activeElement?.id === "main" && document.activeElement.tagName === "MAIN"`)
	}
	ana.do(chromedp.Navigate(p.http+"/signin"), chromedp.WaitVisible(`[data-test=login]`))
	check("sign-in")
	ana.signIn(p.http, "ana")
	ana.waitJS("the list", `!!document.querySelector("[data-test=conv][data-conv=c-team]")`)
	check("list screen")
	if got := devEval[string](ana, `location.pathname`); got != "/" {
		t.Errorf("the skip link navigated to %s", got)
	}
	ana.open("c-team")
	check("conversation screen")
}
