package httpapi

import (
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/middleware"
	"github.com/parleychat/parley/wire"
)

// fileCSP is the Content-Security-Policy of every file and thumbnail: a
// file opened in a browser tab (an SVG, an HTML page someone uploaded)
// runs no script, loads nothing and gets an opaque origin, so it can
// neither read the app's cookies nor call the API as the reader.
const fileCSP = "default-src 'none'; sandbox"

// inlineTypes are the types a browser may show in place: raster images,
// which run no script. Everything else (SVG and HTML included) is an
// attachment.
var inlineTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

// handleFile is GET /api/files/{id}: the file's bytes for a reader
// app.Service.OpenFile lets read it, with ranges, ETag (the SHA-256),
// If-Range and Last-Modified (wire.ServeContent).
func handleFile(c calls) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, body, blob, err := c.app.OpenFile(r.Context(), caller(r), r.PathValue("id"))
		if err != nil {
			c.writeError(w, err, "file.download")
			return
		}
		defer body.Close()
		h := w.Header()
		safeFileHeaders(h, f.MIME, f.Name)
		h.Set("ETag", `"`+f.SHA256+`"`)
		c.serve(w, r, blob, body, "file.download")
	})
}

// handleThumb is GET /api/files/{id}/thumb: the file's thumbnail (a
// JPEG), with the file's access check; NOT_FOUND when it has none.
func handleThumb(c calls) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, blob, err := c.app.OpenThumb(r.Context(), caller(r), r.PathValue("id"))
		if err != nil {
			c.writeError(w, err, "file.thumb")
			return
		}
		defer body.Close()
		safeFileHeaders(w.Header(), "image/jpeg", "")
		c.serve(w, r, blob, body, "file.thumb")
	})
}

// serve answers from an opened blob; a read that fails is logged as an
// internal error under the request's id.
func (c calls) serve(w http.ResponseWriter, r *http.Request, blob parley.Blob, body io.ReadSeeker, op string) {
	id := w.Header().Get(middleware.RequestIDHeader)
	status, text := wire.ServeContent(w, r, blob.ModTime, body, id)
	if status >= 500 {
		c.app.Explain(internalError(text), op, id)
	}
}

// internalError is the text of a failure Go's ServeContent reported.
type internalError string

func (e internalError) Error() string { return "serve blob: " + string(e) }

// safeFileHeaders sets what every file answer carries: its stored type
// (sniffed at upload, never the uploader's word), nosniff, the sandboxing
// CSP, private caching revalidated each time (access ends with a recall
// or a departure, so no copy is served unasked), and the disposition:
// inline for a raster image, else attachment, with name (if any) as the
// file name to save.
func safeFileHeaders(h http.Header, mimeType, name string) {
	h.Set("Content-Type", mimeType)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", fileCSP)
	h.Set("Cache-Control", "private, no-cache")
	h.Set("Accept-Ranges", "bytes")
	base, _, _ := mime.ParseMediaType(mimeType)
	kind := "attachment"
	if inlineTypes[base] {
		kind = "inline"
	}
	h.Set("Content-Disposition", contentDisposition(kind, name))
}

// contentDisposition is a Content-Disposition of kind with name (RFC
// 6266): an ASCII fallback in filename for old clients, and the name
// itself in filename* (RFC 8187, UTF-8, percent-encoded). An empty name
// gives kind alone.
func contentDisposition(kind, name string) string {
	if name == "" {
		return kind
	}
	var ascii, ext strings.Builder
	for _, r := range name {
		// No quote, backslash or percent in the quoted fallback: some
		// clients decode percent-escapes there.
		if r >= 0x20 && r < 0x7f && r != '"' && r != '\\' && r != '%' {
			ascii.WriteRune(r)
		} else {
			ascii.WriteByte('_')
		}
	}
	const hex = "0123456789ABCDEF"
	for _, b := range []byte(name) {
		if isAttrChar(b) {
			ext.WriteByte(b)
		} else {
			ext.WriteByte('%')
			ext.WriteByte(hex[b>>4])
			ext.WriteByte(hex[b&15])
		}
	}
	return kind + `; filename="` + ascii.String() + `"; filename*=UTF-8''` + ext.String()
}

// isAttrChar reports an RFC 8187 attr-char, which filename* carries as it
// is.
func isAttrChar(b byte) bool {
	switch {
	case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		return true
	}
	return strings.IndexByte("!#$&+-.^_`|~", b) >= 0
}
