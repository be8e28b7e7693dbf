package main

import (
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserTextFormat: a message's text renders as DOM
// nodes on the receiving side: http(s) and mailto URLs are links that open
// in a new tab without the opener (rel="noopener noreferrer"), a
// javascript: URL stays text, `code`, a fenced block, *emphasis* and
// **strong** render as code, pre, em and strong, and HTML in a body stays
// text (no element is made from it, no script runs).
func TestBrowserTextFormat(t *testing.T) {
	p := chatServe(t, sqliteBackend(t))
	browser := newBrowser(t)
	ana, ben := pairInTeam(t, browser, p.http)

	// write sends a text as typed (new lines included): set in the box, then Enter.
	write := func(body string) {
		t.Helper()
		ana.do(chromedp.Evaluate[chromedp.Void](`(() => { const b = document.querySelector("[data-test=composer]");
			b.value = ` + jsq(body) + `; b.dispatchEvent(new Event("input")); })()`))
		ana.say("")
	}
	// last is the body element of ben's newest message, as JavaScript.
	const last = `[...document.querySelectorAll("[data-test=events] [data-test=msg] [data-test=body]")].at(-1)`
	// check sends body and waits until ben's newest message satisfies expr (b: its body).
	check := func(body, what, expr string) {
		t.Helper()
		write(body)
		ben.waitJS(what, `(() => { const b = `+last+`; return !!b && (`+expr+`); })()`)
	}

	check("docs at https://example.com/docs?a=1&b=2. read them", "a safe link",
		`(() => { const a = b.querySelector("a"); return !!a && a.getAttribute("href") === "https://example.com/docs?a=1&b=2" &&
			a.textContent === "https://example.com/docs?a=1&b=2" && a.target === "_blank" && a.rel === "noopener noreferrer" &&
			b.textContent === "docs at https://example.com/docs?a=1&b=2. read them"; })()`)
	check("write to mailto:ana@example.com please", "a mailto link",
		`b.querySelector("a")?.getAttribute("href") === "mailto:ana@example.com" && b.querySelector("a").rel === "noopener noreferrer"`)
	check("do not click javascript:alert(1) or data:text/html,hi", "javascript: as text",
		`!b.querySelector("a") && b.textContent === "do not click javascript:alert(1) or data:text/html,hi"`)
	check("run `make <test>` now", "inline code",
		`b.querySelector("code")?.textContent === "make <test>" && !b.querySelector("test") && b.textContent === "run make <test> now"`)
	check("before\n```\nline 1\n<b>not bold</b>\n```\nafter", "a fenced block",
		`b.querySelector("pre > code")?.textContent === "line 1\n<b>not bold</b>" && !b.querySelector("b")`)
	check("this is *really* **very** important", "emphasis and strong",
		`b.querySelector("em")?.textContent === "really" && b.querySelector("strong")?.textContent === "very"`)
	check(`<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>`, "HTML as text",
		`!b.querySelector("img, script") && b.textContent === `+jsq(`<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>`))
	check("hey @ben, see `@ben` and *@ben*", "mentions outside code",
		`b.querySelectorAll("[data-test=mention]").length === 2 && !b.querySelector("code [data-test=mention]") && !!b.querySelector("em [data-test=mention]")`)
	if xss := devEval[bool](ben, `window.__xss !== undefined`); xss {
		t.Errorf("a script in a message body ran")
	}
	if n := devEval[int](ben, `document.querySelectorAll("[data-test=events] a[href^='javascript']").length`); n != 0 {
		t.Errorf("%d javascript: links on the timeline", n)
	}
	ben.screenshot("text-format")
}
