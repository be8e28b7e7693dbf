package wire_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// Every code of parley.Codes has its status of docs/protocol.md#error-codes,
// row by row; an unknown code is read as UNAVAILABLE.
func TestHTTPStatus(t *testing.T) {
	want := map[parley.Code]int{
		"INVALID_ARGUMENT": 400, "UNAUTHENTICATED": 401, "STALE_INSTALL": 401, "PERMISSION_DENIED": 403,
		"NOT_MEMBER": 404, "NOT_FOUND": 404, "ALREADY_EXISTS": 409, "NOT_SENDER": 403,
		"IDEMPOTENCY_MISMATCH": 422, "ORIGINAL_EXPIRED": 410, "CURSOR_AHEAD": 409, "EPOCH_CHANGED": 409,
		"ALREADY_RECALLED": 409, "RECALL_WINDOW_EXPIRED": 409, "EDIT_WINDOW_EXPIRED": 409, "RATE_LIMITED": 429, "UNAVAILABLE": 503, "TOO_LARGE": 413,
	}
	if len(parley.Codes) != len(want) {
		t.Errorf("parley.Codes has %d codes, the protocol %d", len(parley.Codes), len(want))
	}
	for _, c := range parley.Codes {
		got := wire.HTTPStatus(c.Code)
		if http.StatusText(got) == "" {
			t.Errorf("%s: status %d", c.Code, got)
		}
		if got != want[c.Code] {
			t.Errorf("%s: HTTP %d, docs/protocol.md says %d", c.Code, got, want[c.Code])
		}
	}
	if got := wire.HTTPStatus("NO_SUCH_CODE"); got != http.StatusServiceUnavailable {
		t.Errorf("unknown code: HTTP %d, want 503", got)
	}
}

// WriteProblem answers with the code's status, in the header and the body.
func TestWriteProblemStatus(t *testing.T) {
	for _, c := range parley.Codes {
		rec := httptest.NewRecorder()
		wire.WriteProblem(rec, c.Code, "detail", "")
		status := wire.HTTPStatus(c.Code)
		if rec.Code != status {
			t.Errorf("%s: status %d, want %d", c.Code, rec.Code, status)
		}
		var p wire.Problem
		err := json.Unmarshal(rec.Body.Bytes(), &p)
		if err != nil || p.Status != status || p.Code != c.Code || p.Title != http.StatusText(status) {
			t.Errorf("%s: body %+v (%v)", c.Code, p, err)
		}
		if status == http.StatusServiceUnavailable && rec.Header().Get("Retry-After") != strconv.Itoa(wire.RetryAfter) {
			t.Errorf("%s: Retry-After %q", c.Code, rec.Header().Get("Retry-After"))
		}
	}
}
