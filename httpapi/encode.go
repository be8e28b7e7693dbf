package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/app"
	"github.com/parleychat/parley/config"
	"github.com/parleychat/parley/middleware"
	"github.com/parleychat/parley/wire"
)

// maxBody bounds request bodies the API reads.
const maxBody = 64 << 10

// calls is what every handler needs to run a use case and answer it: the
// application layer, and the configuration in force for the store timeout.
type calls struct {
	app     *app.Service
	current func() *config.Config
}

// ctx bounds the store calls of one request by the configured store
// timeout: a slow or exhausted store answers UNAVAILABLE, never hangs.
func (c calls) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), c.config(r).StoreTimeout())
}

// config is the configuration the chain judged r by.
func (c calls) config(r *http.Request) *config.Config {
	if cfg := middleware.ConfigFrom(r.Context()); cfg != nil {
		return cfg
	}
	return c.current()
}

// caller is the principal the chain identified (routes that need one are
// only reached with one).
func caller(r *http.Request) parley.Principal {
	return parley.CallerFromContext(r.Context()).Principal
}

// decode reads a JSON body of at most maxBody bytes into v. Errors are
// INVALID_ARGUMENT.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	return decodeFrom(http.MaxBytesReader(w, r.Body, maxBody), v)
}

// decodeFrom reads one JSON object without unknown fields from rd into v.
// The raw body is checked first (wire.CheckText, as the gateway checks a
// frame): invalid UTF-8 and lone surrogate escapes are refused, not turned
// into U+FFFD. Errors are INVALID_ARGUMENT.
func decodeFrom(rd io.Reader, v any) error {
	raw, err := io.ReadAll(rd)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return parley.Errorf(parley.CodeInvalidArgument, "request body over %d bytes", maxBody)
		}
		return parley.Errorf(parley.CodeInvalidArgument, "request body could not be read: %v", err)
	}
	if err := wire.CheckText(raw); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return parley.Errorf(parley.CodeInvalidArgument, "request body: %s", wire.DecodeProblem(err))
	}
	if dec.More() {
		return parley.Errorf(parley.CodeInvalidArgument, "request body must be one JSON object")
	}
	return nil
}

// encode writes v as JSON with status; '&' stays literal (wire.WriteJSON),
// so a download link can be pasted as it is.
func encode(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	wire.WriteJSON(w, v)
}

// writeError answers err as app.Explain says (an internal error is logged
// under the access line's request id and shown with it).
func (c calls) writeError(w http.ResponseWriter, err error, op string) {
	f := c.app.Explain(err, op, w.Header().Get(middleware.RequestIDHeader))
	wire.WriteProblem(w, f.Code, f.Msg, f.RequestID)
}

// frameBody is a reply frame as an HTTP body: the frame without t and rid.
func frameBody(f wire.Frame) wire.Frame {
	f.T, f.RID = "", nil
	return f
}

// idempotencyKey reads the Idempotency-Key header, bare or as a quoted
// structured-field string (RFC 8941 sf-string, as the IETF Idempotency-Key
// draft writes it). The store checks the key's bounds as a cmid.
func idempotencyKey(r *http.Request) (string, error) {
	vs := r.Header.Values("Idempotency-Key")
	if len(vs) != 1 {
		return "", parley.Errorf(parley.CodeInvalidArgument, "exactly one Idempotency-Key header is required")
	}
	k, err := parseKey(strings.TrimSpace(vs[0]))
	if err != nil {
		return "", err
	}
	if k == "" {
		return "", parley.Errorf(parley.CodeInvalidArgument, "Idempotency-Key is empty")
	}
	// Bare or quoted, a key is printable ASCII (docs/protocol.md): a
	// header carrying other bytes (obs-text, which net/http lets through)
	// is refused, not stored as a cmid no other transport can repeat.
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 0x20 || c > 0x7e {
			return "", parley.Errorf(parley.CodeInvalidArgument, "Idempotency-Key must be printable ASCII")
		}
	}
	return k, nil
}

// parseKey unquotes an sf-string ("...", with \" and \\ escapes, printable
// ASCII only) and returns any other value as it is.
func parseKey(v string) (string, error) {
	if !strings.HasPrefix(v, `"`) {
		return v, nil
	}
	bad := parley.Errorf(parley.CodeInvalidArgument, "Idempotency-Key: malformed quoted string")
	if len(v) < 2 || !strings.HasSuffix(v, `"`) {
		return "", bad
	}
	var b strings.Builder
	in := v[1 : len(v)-1]
	for i := 0; i < len(in); i++ {
		c := in[i]
		switch {
		case c == '\\':
			i++
			if i == len(in) || (in[i] != '"' && in[i] != '\\') {
				return "", bad
			}
			b.WriteByte(in[i])
		case c == '"' || c < 0x20 || c > 0x7e:
			return "", bad
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// queryInt reads an optional integer query parameter: absent is def; a
// parameter that is present must be one decimal integer, so an empty value
// (`after=`) or a repeated one is INVALID_ARGUMENT, never the default.
func queryInt(r *http.Request, name string, def int64) (int64, error) {
	vs, ok := r.URL.Query()[name]
	if !ok {
		return def, nil
	}
	if len(vs) != 1 {
		return 0, parley.Errorf(parley.CodeInvalidArgument, "%s must be given once", name)
	}
	n, err := strconv.ParseInt(vs[0], 10, 64)
	if err != nil {
		return 0, parley.Errorf(parley.CodeInvalidArgument, "%s must be an integer", name)
	}
	return n, nil
}

// queryLimit reads the optional page size `limit`: absent is def, present
// it must be 1..max (0 included in the refused: it is out of range like
// any other value, not a request for the default).
func queryLimit(r *http.Request, def, max int) (int, error) {
	n, err := queryInt(r, "limit", int64(def))
	if err != nil {
		return 0, err
	}
	if n < 1 || n > int64(max) {
		return 0, parley.Errorf(parley.CodeInvalidArgument, "limit must be 1–%d", max)
	}
	return int(n), nil
}

// pathSeq reads an integer path value.
func pathSeq(r *http.Request, name string) (int64, error) {
	n, err := strconv.ParseInt(r.PathValue(name), 10, 64)
	if err != nil {
		return 0, parley.Errorf(parley.CodeInvalidArgument, "%s must be an integer", name)
	}
	return n, nil
}
