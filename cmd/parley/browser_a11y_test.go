package main

// The accessibility test (docs/web-client.md#tests): every screen of the app, at a
// desktop and a phone size, in light and dark colours, checked by
// axe-core (Deque's rules engine, the one browsers' audit tools use) and
// by the page-structure and touch-target rules axe leaves out.

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// axeEnv names axe-core's axe.min.js; when set, the accessibility test
// must run (CI sets it), and a missing file fails it.
const axeEnv = "PARLEY_TEST_AXE"

// axeSource returns axe-core's source, or skips the test with how to get it.
func axeSource(t *testing.T) string {
	t.Helper()
	p := os.Getenv(axeEnv)
	if p == "" {
		t.Skipf("no axe-core: install it outside the repo (npm install --no-save --prefix /opt/parley-axe axe-core@4.14.1) and set %s=/opt/parley-axe/node_modules/axe-core/axe.min.js to run the accessibility test (.ci/run does)", axeEnv)
	}
	src, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%s=%s: %v", axeEnv, p, err)
	}
	return string(src)
}

// a11ySize is one viewport the screens are checked at.
type a11ySize struct {
	name          string
	width, height int64
	phone         bool
}

var a11ySizes = []a11ySize{{"desktop", 1280, 800, false}, {"phone", 390, 844, true}}

// axeViolation is what the test reports of one axe rule that failed.
type axeViolation struct {
	ID      string   `json:"id"`
	Impact  string   `json:"impact"`
	Help    string   `json:"help"`
	Targets []string `json:"targets"`
}

// axeRun runs axe-core on the document (only the colour-contrast rule
// when contrastOnly) and returns its serious and critical violations.
const axeRun = `(async (contrastOnly) => {
  const opts = {resultTypes: ["violations"]};
  if (contrastOnly) opts.runOnly = {type: "rule", values: ["color-contrast"]};
  const r = await axe.run(document, opts);
  return r.violations.filter(v => v.impact === "serious" || v.impact === "critical")
    .map(v => ({id: v.id, impact: v.impact, help: v.help, targets: v.nodes.map(n => n.target.join(" "))}));
})`

// a11yLayout measures what axe does not: the visible h1s and main
// landmarks, and on a phone whether the top bar is one row and which
// controls of the top bar, the list and the composer are smaller than a
// 44 px touch target.
const a11yLayout = `((vw) => {
  const shown = e => e.getClientRects().length > 0 && getComputedStyle(e).visibility !== "hidden";
  const name = e => {
    const t = e.getAttribute("data-test"), c = e.getAttribute("class");
    const text = (e.getAttribute("aria-label") || e.textContent || e.getAttribute("placeholder") || "").trim().slice(0, 30);
    return e.tagName.toLowerCase() + (t ? "[data-test=" + t + "]" : c ? "." + c.split(" ")[0] : "") + (text ? " " + JSON.stringify(text) : "");
  };
  const out = {h1: [...document.querySelectorAll("h1")].filter(shown).length,
    main: [...document.querySelectorAll("main, [role=main]")].filter(shown).length,
    topbarRows: [], topbarOut: [], small: [], wide: []};
  // The page is no wider than the screen: the outermost elements that reach past its right edge.
  for (const e of document.querySelectorAll("body *")) {
    if (!shown(e) || e.getBoundingClientRect().right <= vw + 1) continue;
    let clipped = false;
    for (let p = e.parentElement; p && p !== document.body; p = p.parentElement) {
      if (getComputedStyle(p).overflowX !== "visible" && p.getBoundingClientRect().right <= vw + 1) { clipped = true; break; }
    }
    if (!clipped && !(e.parentElement && out.wide.some(w => w.el.contains(e)))) out.wide.push({el: e, text: name(e) + " to x=" + Math.round(e.getBoundingClientRect().right)});
  }
  out.wide = out.wide.map(w => w.text);
  const bar = document.querySelector("header.topbar, .topbar");
  if (bar) {
    // An open menu panel (out of the flow: absolute or fixed) is no row.
    const kids = [...bar.children].filter(e => shown(e) && !["absolute", "fixed"].includes(getComputedStyle(e).position))
      .map(e => ({e, r: e.getBoundingClientRect()})).filter(k => k.r.width > 0 && k.r.height > 0);
    const minBottom = Math.min(...kids.map(k => k.r.bottom));
    out.topbarRows = kids.filter(k => k.r.top >= minBottom).map(k => name(k.e) + " at y=" + Math.round(k.r.top));
    // The row fits the screen: nothing of it is scrolled out of sight.
    out.topbarOut = kids.filter(k => k.r.left < -1 || k.r.right > vw + 1).map(k => name(k.e) + " at x=" + Math.round(k.r.left) + "–" + Math.round(k.r.right));
  }
  const areas = [".topbar", ".sidebar", "[data-test=convlist]", "form.composer", ".composer"];
  const seen = new Set();
  for (const a of areas) {
    for (const root of document.querySelectorAll(a)) {
      if (!shown(root)) continue;
      for (const e of root.querySelectorAll("a[href], button, input:not([type=hidden]), textarea, select, summary")) {
        if (seen.has(e) || !shown(e) || e.closest("[inert], [aria-hidden=true]") || e.classList.contains("visually-hidden")) continue;
        seen.add(e);
        const r = e.getBoundingClientRect();
        if (r.width === 0 && r.height === 0) continue;
        const wide = e.tagName === "BUTTON" || e.tagName === "SUMMARY";
        if (r.height < 44 || (wide && r.width < 44)) out.small.push(name(e) + " " + Math.round(r.width) + "×" + Math.round(r.height));
      }
    }
  }
  return out;
})`

type a11yLayoutResult struct {
	H1         int      `json:"h1"`
	Main       int      `json:"main"`
	TopbarRows []string `json:"topbarRows"`
	TopbarOut  []string `json:"topbarOut"`
	Small      []string `json:"small"`
	Wide       []string `json:"wide"`
}

// audit checks the screen the device shows: axe in light and dark
// colours, one h1 and one main, and on a phone the top bar's one row and
// the touch targets. Every failure is reported (Errorf), so one run lists
// all of a screen's problems; screenshots are saved as <screen>-<size>
// and <screen>-<size>-dark.
func audit(t *testing.T, d *chatDev, axe, screen string, size a11ySize) {
	t.Helper()
	where := screen + " at " + size.name
	if !devEval[bool](d, `typeof axe !== "undefined"`) {
		if _, err := chromedp.Run(d.ctx, chromedp.Evaluate[chromedp.Void](axe)); err != nil {
			t.Fatalf("%s: injecting axe-core: %v", where, err)
		}
	}
	for _, dark := range []bool{false, true} {
		scheme, shot := "light", screen+"-"+size.name
		if dark {
			scheme, shot = "dark", shot+"-dark"
		}
		if _, err := chromedp.Call(d.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}},
		}); err != nil {
			t.Fatal(err)
		}
		for _, v := range devEval[[]axeViolation](d, fmt.Sprintf(`%s(%t)`, axeRun, dark)) {
			t.Errorf("%s, %s: axe %s (%s): %s\n\t%s", where, scheme, v.ID, v.Impact, v.Help, strings.Join(v.Targets, "\n\t"))
		}
		d.screenshot(shot)
	}
	if _, err := chromedp.Call(d.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{}); err != nil {
		t.Fatal(err)
	}
	l := devEval[a11yLayoutResult](d, fmt.Sprintf("%s(%d)", a11yLayout, size.width))
	if l.H1 != 1 {
		t.Errorf("%s: %d visible h1, want exactly 1", where, l.H1)
	}
	if l.Main != 1 {
		t.Errorf("%s: %d visible main landmarks, want exactly 1", where, l.Main)
	}
	if !size.phone {
		return
	}
	if len(l.Wide) > 0 {
		t.Errorf("%s: wider than the screen (%d px): %s", where, size.width, strings.Join(l.Wide, ", "))
	}
	if len(l.TopbarRows) > 0 {
		t.Errorf("%s: the top bar wraps; below its first row: %s", where, strings.Join(l.TopbarRows, ", "))
	}
	if len(l.TopbarOut) > 0 {
		t.Errorf("%s: the top bar does not fit the screen; out of sight: %s", where, strings.Join(l.TopbarOut, ", "))
	}
	if len(l.Small) > 0 {
		t.Errorf("%s: touch targets under 44 px: %s", where, strings.Join(l.Small, ", "))
	}
}

// TestBrowserAccessibility: each screen — sign-in, sign-in
// with its error, the conversation list, a conversation with messages
// (others', an own one, a file), an open thread, the search dialog with
// hits, the members screen, new conversation, the account, export, the
// admin's users and the new direct message screen — at 1280×800 and at
// 390×844 (a phone: mobile viewport, touch), in light and dark colours:
// axe-core finds no serious or critical violation, there is exactly one
// visible h1 and one main landmark; on the phone the top bar is one row
// that fits the screen, the controls of the top bar, the list and the
// composer are at least 44 px high (buttons 44 px wide too), nothing
// reaches past the screen's right edge (the page never scrolls
// sideways), and a menu folded behind a button passes the same checks
// when open.
func TestBrowserAccessibility(t *testing.T) {
	axe := axeSource(t)
	p := serveApp(t)
	b := newBrowser(t)
	out := newDev(t, b, "signed-out")
	ana := newDev(t, b, "ana")

	// What the screens show: others' messages (a link, code, emphasis,
	// Chinese), ana's own message with a file. (The README's picture of
	// the app is this conversation at desktop size.)
	ben, cy := login(t, p.http, "ben"), login(t, p.http, "cy")
	for i, m := range []struct{ token, body string }{
		{ben, "Morning! The release notes are at https://parley.example/notes — read *Upgrading* before `parley migrate`."},
		{cy, "收到，我明天去上海出差，周五回来。"},
		{ben, "Can someone check the zeppelin schedule?"},
	} {
		if st := callAPI(t, p.http, m.token, "POST", "/api/convs/c-team/messages", map[string]string{"body": m.body}, nil, "Idempotency-Key", fmt.Sprintf("a11y-%d", i)); st != 201 {
			t.Fatalf("message %d: %d", i, st)
		}
	}
	ana.signIn(p.http, "ana")
	ana.open("c-team")
	ana.say("On it: the zeppelin leaves at dawn.")
	ana.waitOnce("On it: the zeppelin leaves at dawn.")
	pic := writePNG(t, t.TempDir(), "harbour.png", 320, 200)
	ana.do(chromedp.SetUploadFiles(`[data-test=attach-input]`, []string{pic}))
	ana.waitJS("the file uploaded", `[...document.querySelectorAll("form.composer [data-test=chip]")].every(c => c.dataset.state === "uploaded") && document.querySelectorAll("form.composer [data-test=chip]").length === 1`)
	ana.do(chromedp.Click(`[data-test=send]`))
	ana.waitJS("the file message", `!!document.querySelector("[data-test=events] [data-test=msg] img[data-test=thumb]")?.complete`)

	convDone := `document.querySelector("[data-test=conv-view]")?.dataset.conv === "c-team" && document.querySelector("[data-test=timeline-status]")?.textContent === "" &&
		document.querySelectorAll("[data-test=events] [data-test=msg]").length >= 4 && [...document.querySelectorAll("[data-test=events] img")].every(i => i.complete)`
	type screen struct {
		name string
		dev  *chatDev
		open func(d *chatDev)
	}
	page := func(path, ready string) func(d *chatDev) {
		return func(d *chatDev) {
			d.do(chromedp.Navigate(p.http + path))
			d.waitJS(path, ready)
		}
	}
	screens := []screen{
		{"signin", out, page("/signin", `!!document.querySelector("[data-test=signin]") && !document.querySelector("[data-test=demo-hint]").hidden`)},
		{"signin-error", out, func(d *chatDev) {
			page("/signin", `!!document.querySelector("[data-test=signin]")`)(d)
			d.do(chromedp.SendKeys(`[data-test=login]`, "ana"), chromedp.SendKeys(`[data-test=password]`, "not-the-password"),
				chromedp.Click(`[data-test=signin-submit]`))
			d.waitJS("the sign-in error", `document.querySelector("[data-test=signin-error]").textContent !== "" && !document.querySelector("[data-test=signin-submit]").disabled`)
		}},
		{"list", ana, page("/", `document.querySelector("[data-test=conn]")?.dataset.state === "online" && !!document.querySelector("[data-test=conv][data-conv=c-team]")`)},
		{"conversation", ana, page("/c/c-team", convDone)},
		{"thread", ana, func(d *chatDev) {
			page("/c/c-team", convDone)(d)
			d.click("Reply on ben's message", msgJS("Can someone check the zeppelin schedule?")+`.querySelector("[data-test=reply]")`)
			d.waitJS("the thread panel", `!!document.querySelector("[data-test=thread] [data-test=thread-msg]")`)
		}},
		{"search", ana, func(d *chatDev) {
			page("/c/c-team", convDone)(d)
			d.click("Search", `document.querySelector("[data-test=search-open]")`)
			d.waitJS("the search dialog", `document.querySelector("[data-test=search]")?.open === true`)
			d.do(chromedp.SendKeys(`[data-test=search-box]`, "zeppelin\r"))
			d.waitJS("two hits", `document.querySelectorAll("[data-test=search-hit]").length === 2`)
		}},
		{"members", ana, page("/c/c-team/members", `!!document.querySelector('[data-test="member-list"][data-loaded] [data-test="member-ben"]')`)},
		{"new-conversation", ana, page("/new", `!!document.querySelector("[data-test=create-conv]")`)},
		{"account", ana, page("/account", `!!document.querySelector("[data-test=display-name]") && !!document.querySelector("[data-test=sessions] li")`)},
		{"export", ana, page("/exports", `!!document.querySelector('[data-test="export-scope"] option[value="conv:c-team"]')`)},
		{"admin-users", ana, page("/admin/users", `!!document.querySelector('[data-test="user-table"][data-loaded] [data-test="user-ben"]')`)},
		{"direct-message", ana, page("/dm", `!!document.querySelector("[data-test=dm-user][data-user=ben]")`)},
	}
	for _, size := range a11ySizes {
		var opts []chromedp.EmulateViewportOption
		if size.phone {
			opts = append(opts, chromedp.EmulateMobile, chromedp.EmulateTouch)
		}
		for _, d := range []*chatDev{out, ana} {
			d.do(chromedp.EmulateViewport(size.width, size.height, opts...))
		}
		for _, s := range screens {
			s.open(s.dev)
			audit(t, s.dev, axe, s.name, size)
			// A phone's top bar may fold its menu behind a button: the
			// open menu is audited too (its touch targets, axe).
			if size.phone && s.name == "list" && devEval[bool](s.dev, `!!document.querySelector("[data-test=menu-toggle]")?.checkVisibility()`) {
				s.dev.click("the menu button", `document.querySelector("[data-test=menu-toggle]")`)
				s.dev.waitJS("the menu open", `document.querySelector("[data-test=menu-toggle]").getAttribute("aria-expanded") === "true"`)
				audit(t, s.dev, axe, "menu-open", size)
			}
		}
	}
}
