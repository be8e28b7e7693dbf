package httpapi

import (
	"mime"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// handleNavigation answers a path no route serves: a browser navigation
// (isNavigation) gets the app's shell, so a reload or a shared link of
// /c/ID opens the app there; anything else is notFound's problem+json.
func handleNavigation(app http.Handler, notFound http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if app != nil && isNavigation(r) {
			app.ServeHTTP(w, r)
			return
		}
		notFound.ServeHTTP(w, r)
	})
}

// serverPaths are exact paths the server may own without a route here (a
// listener elsewhere, a feature turned off): never the shell.
var serverPaths = []string{"/ws", "/healthz", "/readyz", "/metrics"}

// fileExtensions are the extensions that make a path a file request, not a
// page of the app: /favicon.ico, /robots.txt, /app.js typed into the
// address bar get a 404, not the shell. Only these count, because the
// app's own paths may hold a dot: a conversation id matches
// [A-Za-z0-9._:-]{1,64}, and /c/release.2026 must reload into the app.
var fileExtensions = []string{
	".js", ".mjs", ".css", ".map", ".json", ".webmanifest", ".txt", ".xml", ".html", ".htm",
	".ico", ".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp", ".avif",
	".woff", ".woff2", ".ttf", ".otf", ".wasm", ".pdf", ".zip", ".gz",
}

// isNavigation reports a navigation to a page of the app: GET or HEAD,
// an Accept that admits HTML (a browser's document request, or curl's
// */*), not a server path, and a last segment without a file extension.
func isNavigation(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	if !acceptsHTML(r.Header.Values("Accept")) {
		return false
	}
	p := r.URL.Path
	if slices.Contains(serverPaths, strings.TrimSuffix(p, "/")) || strings.HasPrefix(p, "/ws/") {
		return false
	}
	return !slices.Contains(fileExtensions, strings.ToLower(path.Ext(p)))
}

// acceptsHTML reports whether an Accept header admits text/html: a range
// text/html, text/* or */* whose weight is not zero. No header at all is
// no client that asked for a page (an API client that forgot it gets the
// 404 it would get for any unknown path).
func acceptsHTML(accept []string) bool {
	for _, line := range accept {
		for _, rng := range strings.Split(line, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(rng))
			if err != nil || (mt != "text/html" && mt != "text/*" && mt != "*/*") {
				continue
			}
			if q, err := strconv.ParseFloat(params["q"], 64); params["q"] == "" || (err == nil && q > 0) {
				return true
			}
		}
	}
	return false
}

// browserSafety guards the state-changing routes of a server whose session
// cookie authenticates a real page (docs/protocol.md#browser-safety):
//
//   - a cross-origin request is refused (403 PERMISSION_DENIED) before its
//     handler runs: http.CrossOriginProtection's Sec-Fetch-Site / Origin
//     check, with the --origins patterns allowed besides the server's own
//     origin. Requests without either header (the Go client, curl) are no
//     browser's and pass;
//   - a body whose Content-Type is not application/json is refused (415),
//     so no HTML form or no-cors fetch (text/plain, form-encoded,
//     multipart: the types a page may send cross-origin without a
//     preflight) is ever read as a request.
type browserSafety struct {
	cop     *http.CrossOriginProtection
	origins []string
}

func newBrowserSafety(origins []string) *browserSafety {
	return &browserSafety{cop: http.NewCrossOriginProtection(), origins: origins}
}

// wrap guards h when pattern's method changes state; GET and HEAD routes
// (and the method-less catch-alls, which change nothing) are left as they
// are.
func (b *browserSafety) wrap(pattern string, h http.Handler) http.Handler {
	method, _, ok := strings.Cut(pattern, " ")
	if !ok || method == http.MethodGet || method == http.MethodHead {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := b.cop.Check(r); err != nil && !originAllowed(r.Header.Get("Origin"), b.origins) {
			wire.WriteProblem(w, parley.CodePermissionDenied, "cross-origin request refused: a page of another origin cannot change state here (--origins lists the allowed ones)", "")
			return
		}
		if hasBody(r) {
			if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
				writeUnsupportedMediaType(w)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// wrapOrigin guards h against cross-origin requests only: for routes
// whose bodies are not JSON (the tus uploads).
func (b *browserSafety) wrapOrigin(pattern string, h http.Handler) http.Handler {
	method, _, _ := strings.Cut(pattern, " ")
	if method == http.MethodHead {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := b.cop.Check(r); err != nil && !originAllowed(r.Header.Get("Origin"), b.origins) {
			wire.WriteProblem(w, parley.CodePermissionDenied, "cross-origin request refused: a page of another origin cannot change state here (--origins lists the allowed ones)", "")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// originAllowed reports whether origin matches one of patterns the way
// the gateway's WebSocket upgrade matches --origins: a pattern with "://"
// against scheme://host, any other against the host; path.Match syntax,
// case-insensitive.
func originAllowed(origin string, patterns []string) bool {
	if origin == "" || len(patterns) == 0 {
		return false
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	for _, p := range patterns {
		target := u.Host
		if strings.Contains(p, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if ok, _ := path.Match(strings.ToLower(p), strings.ToLower(target)); ok {
			return true
		}
	}
	return false
}

// hasBody reports whether a request carries a body (a chunked one
// included).
func hasBody(r *http.Request) bool {
	return r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody
}

// writeUnsupportedMediaType answers 415 as problem+json with the code
// INVALID_ARGUMENT (terminal: fix the request), as a 405 does.
func writeUnsupportedMediaType(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusUnsupportedMediaType)
	wire.WriteJSON(w, wire.Problem{
		Type: "about:blank", Title: http.StatusText(http.StatusUnsupportedMediaType), Status: http.StatusUnsupportedMediaType,
		Detail: "the request body must be JSON sent as Content-Type: application/json", Code: parley.CodeInvalidArgument,
	})
}

// nosniff marks every response X-Content-Type-Options: nosniff: a browser
// never runs or styles with a body the server did not label so.
func nosniff(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		h.ServeHTTP(w, r)
	})
}

// HSTSValue is the Strict-Transport-Security of a server reached over TLS
// (--secure-cookie): a browser that saw it goes to https for a year, so a
// network attacker cannot downgrade a later visit to plain HTTP and read
// the session cookie. No includeSubDomains: other hosts of the domain are
// not Parley's to decide.
const HSTSValue = "max-age=31536000"

// hsts sets Strict-Transport-Security on every response.
func hsts(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Strict-Transport-Security", HSTSValue)
		h.ServeHTTP(w, r)
	})
}
