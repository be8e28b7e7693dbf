package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/config"
	"github.com/parleychat/parley/middleware"
	"github.com/parleychat/parley/wire"
)

// maxBody bounds request bodies the API reads.
const maxBody = 64 << 10

// ctx bounds the store calls of one request by the configured store
// timeout: a slow or exhausted store answers UNAVAILABLE, never hangs.
func (d Deps) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), d.config(r).StoreTimeout())
}

// config is the configuration the chain judged r by.
func (d Deps) config(r *http.Request) *config.Config {
	if cfg := middleware.ConfigFrom(r.Context()); cfg != nil {
		return cfg
	}
	return d.Config()
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

// writeError answers err; an error without a protocol code is logged with
// the request's id and answered UNAVAILABLE with a generic message and that
// id. A canceled context (the client hung up) is no internal error: it is
// not logged here (the access line records status 499).
func writeError(w http.ResponseWriter, log *slog.Logger, err error, op string) {
	var pe *parley.Error
	if errors.As(err, &pe) {
		msg := pe.Msg
		if pe.Code == parley.CodePermissionDenied {
			msg = parley.ErrAccessDenied.Msg // one message: the refused learn nothing
		}
		wire.WriteProblem(w, pe.Code, msg, "")
		return
	}
	// A request whose client hung up ends with its context canceled: not
	// an internal error (the access line says 499); nobody reads the answer.
	if errors.Is(err, context.Canceled) {
		wire.WriteProblem(w, parley.CodeUnavailable, parley.InternalMessage, "")
		return
	}
	id := w.Header().Get(middleware.RequestIDHeader) // the access line's id
	if id == "" {
		id = parley.NewID()
	}
	log.Error("internal error", "op", op, "request_id", id, "err", err)
	wire.WriteProblem(w, parley.CodeUnavailable, parley.InternalMessage, id)
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
