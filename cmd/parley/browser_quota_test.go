package main

import (
	"bytes"
	"net/http"
	"strconv"
	"testing"
)

// TestBrowserFileUsage: after ben uploads a file over tus, the admin's
// users screen shows his files against the quota in human sizes, and his
// own account screen says what he uses and how large a file may be.
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
	if got, want := eval[string](t, admin, cell+`.textContent.trim()`), "1.5 MiB of 10 GiB (1 file)"; got != want {
		t.Errorf("ben's files on the users screen: %q, want %q", got, want)
	}
	if got, want := eval[string](t, admin, `document.querySelector('[data-test="user-files-ana"]').textContent.trim()`), "0 bytes of 10 GiB (0 files)"; got != want {
		t.Errorf("ana's files on the users screen: %q, want %q", got, want)
	}
	if got := eval[float64](t, admin, cell+`.querySelector("meter").value`); got != float64(len(data)) {
		t.Errorf("ben's meter: %v, want %d", got, len(data))
	}
	screenshot(t, admin, "admin-files")

	openSignedIn(t, own, p, "ben", "/account")
	waitTrue(t, own, `document.querySelector('[data-test="my-files"][data-loaded]')`)
	if got, want := eval[string](t, own, `document.querySelector('[data-test="my-files-used"]').textContent`), "1.5 MiB of 10 GiB (1 file) used"; got != want {
		t.Errorf("ben's account screen: %q, want %q", got, want)
	}
	if got := eval[string](t, own, `document.querySelector('[data-test="my-files"]').textContent`); !bytes.Contains([]byte(got), []byte("up to 100 MiB")) {
		t.Errorf("ben's account screen does not say how large a file may be: %q", got)
	}
	screenshot(t, own, "account-files")
}
