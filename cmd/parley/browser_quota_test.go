package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
)

// TestBrowserFileUsage: after ben uploads a file over tus, the admin's
// users screen shows his files against the quota in the sizes the rest of
// the app writes (bytes.js humanSize), and his own account screen says
// what he uses and how large a file may be.
func TestBrowserFileUsage(t *testing.T) {
	p := serveApp(t)
	ben := login(t, p.http, "ben")
	data := bytes.Repeat([]byte("parley! "), 3<<20/16) // 1.5 MiB
	path := tusCreate(t, p.http, ben, "report.bin", len(data))
	if resp, body := tusReq(t, p.http, "PATCH", path, ben, data, "Upload-Offset", "0",
		"Content-Type", "application/offset+octet-stream"); resp.StatusCode != http.StatusOK {
		t.Fatalf("PATCH: %d %s", resp.StatusCode, body)
	}

	br := newBrowser(t)
	admin, own := newDevice(t, br), newDevice(t, br)
	openSignedIn(t, admin, p, "ana", "/admin/users")
	cell := `document.querySelector('[data-test="user-table"][data-loaded] [data-test="user-files-ben"]')`
	waitTrue(t, admin, cell+`?.dataset.bytes === "`+strconv.Itoa(len(data))+`"`)
	quota := int64(10 << 30)
	if got, want := eval[string](t, admin, cell+`.textContent.trim()`), pageHumanSize(t, admin, int64(len(data)))+" of "+pageHumanSize(t, admin, quota)+" (1 file)"; got != want {
		t.Errorf("ben's files on the users screen: %q, want %q", got, want)
	}
	if got, want := eval[string](t, admin, `document.querySelector('[data-test="user-files-ana"]').textContent.trim()`), pageHumanSize(t, admin, 0)+" of "+pageHumanSize(t, admin, quota)+" (0 files)"; got != want {
		t.Errorf("ana's files on the users screen: %q, want %q", got, want)
	}
	if got := eval[float64](t, admin, cell+`.querySelector("meter").value`); got != float64(len(data)) {
		t.Errorf("ben's meter: %v, want %d", got, len(data))
	}
	screenshot(t, admin, "admin-files")

	openSignedIn(t, own, p, "ben", "/account")
	waitTrue(t, own, `document.querySelector('[data-test="my-files"][data-loaded]')`)
	if got, want := eval[string](t, own, `document.querySelector('[data-test="my-files-used"]').textContent`), pageHumanSize(t, own, int64(len(data)))+" of "+pageHumanSize(t, own, quota)+" (1 file) used"; got != want {
		t.Errorf("ben's account screen: %q, want %q", got, want)
	}
	if got := eval[string](t, own, `document.querySelector('[data-test="my-files"]').textContent`); !bytes.Contains([]byte(got), []byte("up to "+pageHumanSize(t, own, 100<<20))) {
		t.Errorf("ben's account screen does not say how large a file may be: %q", got)
	}
	screenshot(t, own, "account-files")
}

// pageHumanSize is how the page writes n bytes: bytes.js's own humanSize, run
// in the page, so the test follows the app's one way of writing sizes.
func pageHumanSize(t testing.TB, dev context.Context, n int64) string {
	t.Helper()
	// Assets are served under hashed names (bytes.HASH.js): the page
	// loaded it already, so its name is among the page's resources.
	return eval[string](t, dev, fmt.Sprintf(`import(performance.getEntriesByType("resource").map((e) => e.name).find((n) => /\/assets\/bytes\.[0-9a-f]+\.js$/.test(n))).then((m) => m.humanSize(%d))`, n))
}
