// Package web is Parley's browser client as the server hosts it: the
// app under app/ is embedded in the binary, hashed at
// start and served under content-addressed names, so every asset is cached
// for a year and a new release is picked up by the next page load.
//
// At start (Load) every file is named NAME.HASH.EXT after the sha256 of its
// served bytes. A script's or stylesheet's lines that hold only comments
// are served empty (stripComments): the line numbers stay the source's. A JavaScript module's relative import specifiers
// (`from "./x.js"`, `from "../x.js"`, `import "./x.js"`) are rewritten to the
// hashed names first, so a module's hash covers the hashes of what it imports
// (a Merkle tree: changing dom.js renames every module that imports it,
// directly or not). That needs an acyclic import graph; a cycle is refused at
// start. A dynamic import (`import("./x.js")`) is rewritten the same way; the
// module it names is loaded only when the page asks for it, so it is not
// part of the first load (Size) unless a static import also names it. index.html is the shell: its `/assets/NAME.EXT` references are
// rewritten the same way, and it is served with no-store for every
// navigation path.
//
// The service worker (sw.js, beside app/) is served at ServiceWorkerPath
// with the release's manifest written into it: the release id, the shell's
// hashed references and every hashed asset. Its bytes change with each
// release, so the browser installs the new worker, which caches the new
// shell and assets together and deletes the older releases' caches.
package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

//go:embed app
var embedded embed.FS

// swSource is the service worker as written: its manifest placeholder is
// replaced at Load.
//
//go:embed sw.js
var swSource []byte

// swPlaceholder is the manifest literal of sw.js that Load replaces.
var swPlaceholder = []byte(`/*MANIFEST*/ { release: "dev", shell: "/", refs: [], assets: [] }`)

// ServiceWorkerPath is where the service worker is served: at the root,
// so its scope is the whole origin.
const ServiceWorkerPath = "/sw.js"

// ServiceWorkerCacheControl is what the service worker is served with:
// always revalidated, so a new release is seen at the next check.
const ServiceWorkerCacheControl = "no-cache"

// ShellFile is the app's entry page inside the app directory.
const ShellFile = "index.html"

// AssetsPrefix is the URL path under which the hashed assets are served.
const AssetsPrefix = "/assets/"

// hashLen is how many hex digits of the sha256 go into a name: 48 bits,
// plenty to tell releases of one file apart.
const hashLen = 12

// AssetCacheControl is what a hashed asset is served with: its name changes
// with its content, so a cached copy never goes stale.
const AssetCacheControl = "public, max-age=31536000, immutable"

// ContentSecurityPolicy is the shell's policy: scripts, styles, fetches and
// sockets only from the page's own origin, no inline script or style, no
// plugins, no framing, no <base> tricks, forms post only here.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"

// Site is the hashed app: its assets by served path and the rendered shell.
type Site struct {
	assets map[string]*asset   // served name ("app.3f2a1b0c9d8e.js") → the asset
	names  map[string]string   // app name ("app.js") → served name
	order  []string            // app names, sorted
	shell  []byte              // index.html with hashed references
	static map[string][]string // app name → the app names it imports statically
	first  []string            // app names of the first load, sorted
	sw     []byte              // the service worker with this release's manifest
	swTag  string              // its ETag
	rel    string              // the release id
}

type asset struct {
	name  string // served name, relative to AssetsPrefix
	body  []byte
	ctype string
	etag  string // the hash, quoted: conditional requests answer 304
}

// New loads the app embedded in the binary.
func New() (*Site, error) {
	return Load(App())
}

// App is the app embedded in the binary, as Load takes it.
func App() fs.FS {
	sub, err := fs.Sub(embedded, "app")
	if err != nil {
		panic(err) // "app" is a valid path: cannot happen
	}
	return sub
}

// contentTypes are the types of the files an app is made of; others come
// from mime.TypeByExtension.
var contentTypes = map[string]string{
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
	".png":  "image/png",
	".ico":  "image/x-icon",
	".json": "application/json",
	".txt":  "text/plain; charset=utf-8",
}

// importRE finds an import's relative specifier in a module: `from
// "./x.js"`, `from "../x.js"`, the side-effect form `import "./x.js"` and
// the dynamic `import("./x.js")` (group 1 then holds the parenthesis).
// Group 2 is the specifier.
var importRE = regexp.MustCompile(`(\bfrom\s*|\bimport\s*\(?\s*)"(\.\.?/[^"\n]*)"`)

// shellRefRE finds an asset reference in the shell: "/assets/NAME.EXT".
var shellRefRE = regexp.MustCompile(`"/assets/([^"\n]+)"`)

// Load hashes the app in fsys: every file but the shell becomes an asset;
// the shell (index.html) is required. It fails on a relative import that
// names no file of the app, on an import cycle, and on a shell reference to
// a missing asset: each would break the page, so the server must not start
// with it.
func Load(fsys fs.FS) (*Site, error) {
	src, err := readApp(fsys)
	if err != nil {
		return nil, err
	}
	shell, ok := src[ShellFile]
	if !ok {
		return nil, fmt.Errorf("web: the app has no %s", ShellFile)
	}
	delete(src, ShellFile)

	s := &Site{assets: map[string]*asset{}, names: map[string]string{}, static: map[string][]string{}}
	for name := range src {
		s.order = append(s.order, name)
	}
	slices.Sort(s.order)
	l := &linker{site: s, src: src, state: map[string]int{}}
	for _, name := range s.order {
		if err := l.visit(name); err != nil {
			return nil, err
		}
	}
	if s.shell, err = s.renderShell(shell); err != nil {
		return nil, err
	}
	s.first = s.firstLoad(shell)
	if err := s.renderWorker(); err != nil {
		return nil, err
	}
	return s, nil
}

// manifest is what the service worker knows of a release.
type manifest struct {
	Release string   `json:"release"` // names the release's cache
	Shell   string   `json:"shell"`   // the path its shell is fetched and cached under
	Refs    []string `json:"refs"`    // the hashed paths the shell names: a shell without them is another release's
	Assets  []string `json:"assets"`  // every hashed asset's path, sorted
}

// renderWorker writes the release's manifest into the service worker. The
// release id is the hash of the shell and every hashed name: any change to
// any file of the app changes it.
func (s *Site) renderWorker() error {
	m := manifest{Shell: "/", Refs: []string{}}
	sum := sha256.New()
	sum.Write(s.shell)
	for _, name := range s.order {
		p := AssetsPrefix + s.names[name]
		m.Assets = append(m.Assets, p)
		sum.Write([]byte("\n" + p))
	}
	slices.Sort(m.Assets)
	for _, ref := range shellRefRE.FindAllSubmatch(s.shell, -1) {
		m.Refs = append(m.Refs, AssetsPrefix+string(ref[1]))
	}
	s.rel = hex.EncodeToString(sum.Sum(nil))[:hashLen]
	m.Release = s.rel
	js, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if bytes.Count(swSource, swPlaceholder) != 1 {
		return fmt.Errorf("web: sw.js must hold its manifest placeholder exactly once")
	}
	s.sw = bytes.Replace(swSource, swPlaceholder, js, 1)
	s.swTag = strconv.Quote(s.rel)
	return nil
}

// Release is the release id: a hash of the shell and every asset's hashed
// name.
func (s *Site) Release() string { return s.rel }

// ServiceWorker returns the service worker as served.
func (s *Site) ServiceWorker() []byte { return slices.Clone(s.sw) }

// firstLoad returns the assets a first load fetches: those the shell names
// and, transitively, what they import statically.
func (s *Site) firstLoad(shell []byte) []string {
	seen := map[string]bool{}
	var walk func(name string)
	walk = func(name string) {
		if seen[name] {
			return
		}
		seen[name] = true
		for _, dep := range s.static[name] {
			walk(dep)
		}
	}
	for _, m := range shellRefRE.FindAllSubmatch(shell, -1) {
		walk(string(m[1]))
	}
	out := make([]string, 0, len(seen))
	for name := range seen {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// readApp reads every file of fsys, by its path.
func readApp(fsys fs.FS) (map[string][]byte, error) {
	src := map[string][]byte{}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		src[p] = b
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("web: reading the app: %w", err)
	}
	return src, nil
}

// A linker hashes the assets of an app, each module after what it imports
// (depth-first, post-order), so an importer's body names its imports'
// hashed names before it is hashed itself. It tracks the path being visited
// to report a cycle with its members.
type linker struct {
	site  *Site
	src   map[string][]byte // app name → body as written
	state map[string]int    // app name → unvisited, visiting or linked
	stack []string          // the modules being visited, importers first
}

const (
	unvisited = iota
	visiting
	linked
)

// visit adds asset name to the site, after the modules it imports.
func (l *linker) visit(name string) error {
	switch l.state[name] {
	case linked:
		return nil
	case visiting:
		i := slices.Index(l.stack, name)
		cycle := append(slices.Clone(l.stack[i:]), name)
		return fmt.Errorf("web: import cycle: %s (modules must import each other without cycles)", strings.Join(cycle, " → "))
	}
	l.state[name] = visiting
	l.stack = append(l.stack, name)
	body := l.src[name]
	if ext := path.Ext(name); ext == ".js" || ext == ".css" {
		var err error
		if body, err = stripComments(body, ext == ".css"); err != nil {
			return fmt.Errorf("web: %s: %w", name, err)
		}
	}
	if path.Ext(name) == ".js" {
		var err error
		if body, err = l.rewriteImports(name, body); err != nil {
			return err
		}
	}
	l.site.add(name, body)
	l.stack = l.stack[:len(l.stack)-1]
	l.state[name] = linked
	return nil
}

// rewriteImports returns module name's body with every relative import
// specifier renamed to the hashed name of the module it names, linking
// those modules first.
func (l *linker) rewriteImports(name string, body []byte) ([]byte, error) {
	var rerr error
	out := importRE.ReplaceAllFunc(body, func(m []byte) []byte {
		if rerr != nil {
			return m
		}
		sub := importRE.FindSubmatch(m)
		spec := string(sub[2])
		dep := path.Join(path.Dir(name), spec)
		if _, ok := l.src[dep]; !ok || path.Ext(spec) != ".js" || strings.HasPrefix(dep, "../") {
			rerr = fmt.Errorf("web: %s imports %q, which is no module of the app (relative, ending .js)", name, spec)
			return m
		}
		if err := l.visit(dep); err != nil {
			rerr = err
			return m
		}
		if !strings.Contains(string(sub[1]), "(") {
			l.site.static[name] = append(l.site.static[name], dep)
		}
		hashed := l.site.names[dep]
		rel := path.Join(path.Dir(spec), path.Base(hashed))
		if strings.HasPrefix(spec, "./") {
			rel = "./" + rel
		}
		return slices.Concat(sub[1], []byte(`"`+rel+`"`))
	})
	return out, rerr
}

// renderShell returns the shell with its /assets/NAME.EXT references
// renamed to the hashed names; a reference to a missing asset is an error.
func (s *Site) renderShell(shell []byte) ([]byte, error) {
	var rerr error
	out := shellRefRE.ReplaceAllFunc(shell, func(m []byte) []byte {
		name := string(shellRefRE.FindSubmatch(m)[1])
		hashed, ok := s.names[name]
		if !ok {
			if rerr == nil {
				rerr = fmt.Errorf("web: %s references /assets/%s, which is not in the app", ShellFile, name)
			}
			return m
		}
		return []byte(`"` + AssetsPrefix + hashed + `"`)
	})
	return out, rerr
}

// add records name's served body under its hashed name.
func (s *Site) add(name string, body []byte) {
	sum := sha256.Sum256(body)
	h := hex.EncodeToString(sum[:])[:hashLen]
	ext := path.Ext(name)
	hashed := strings.TrimSuffix(name, ext) + "." + h + ext
	ctype, ok := contentTypes[ext]
	if !ok {
		ctype = mime.TypeByExtension(ext)
	}
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	s.assets[hashed] = &asset{name: hashed, body: body, ctype: ctype, etag: strconv.Quote(h)}
	s.names[name] = hashed
}

// Path returns the URL path an asset is served under, by its name in the
// app ("app.js", "views/list.js"), and whether the app has it.
func (s *Site) Path(name string) (string, bool) {
	hashed, ok := s.names[name]
	if !ok {
		return "", false
	}
	return AssetsPrefix + hashed, true
}

// Assets lists the app's asset names (not hashed), sorted.
func (s *Site) Assets() []string { return slices.Clone(s.order) }

// FirstLoad lists the asset names (not hashed, sorted) a first load
// fetches: the shell's references and what they import statically. The
// others are imported dynamically, when the page needs them.
func (s *Site) FirstLoad() []string { return slices.Clone(s.first) }

// Shell returns the rendered index.html.
func (s *Site) Shell() []byte { return slices.Clone(s.shell) }

// Sizes returns the served size in bytes of the shell (under ShellFile)
// and of every asset (under its app name).
func (s *Site) Sizes() map[string]int {
	m := map[string]int{ShellFile: len(s.shell)}
	for name, hashed := range s.names {
		m[name] = len(s.assets[hashed].body)
	}
	return m
}

// Size is what a first load costs in bytes, uncompressed: the shell and
// every asset of FirstLoad as served.
func (s *Site) Size() int {
	n := len(s.shell)
	for _, name := range s.first {
		n += len(s.assets[s.names[name]].body)
	}
	return n
}

// ServeHTTP serves a hashed asset for a path under AssetsPrefix (404
// problem+json NOT_FOUND for any other name, the unhashed one included),
// the service worker at ServiceWorkerPath and the shell for every other
// path. Which paths reach it is the caller's choice: httpapi sends
// /assets/, /sw.js and navigation requests only.
func (s *Site) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if name, ok := strings.CutPrefix(r.URL.Path, AssetsPrefix); ok {
		s.serveAsset(w, r, name)
		return
	}
	if r.URL.Path == ServiceWorkerPath {
		s.serveWorker(w, r)
		return
	}
	s.ServeShell(w, r)
}

// serveWorker writes the service worker: revalidated on every check (an
// ETag of the release answers 304 while it is unchanged), same-origin
// fetches only.
func (s *Site) serveWorker(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", contentTypes[".js"])
	h.Set("Cache-Control", ServiceWorkerCacheControl)
	h.Set("ETag", s.swTag)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	wire.ServeContent(w, r, time.Time{}, bytes.NewReader(s.sw), parley.RequestIDFromContext(r.Context()))
}

func (s *Site) serveAsset(w http.ResponseWriter, r *http.Request, name string) {
	a, ok := s.assets[name]
	if !ok {
		wire.WriteProblem(w, parley.CodeNotFound, "no such asset; the page may be from an older release: reload it", "")
		return
	}
	h := w.Header()
	h.Set("Content-Type", a.ctype)
	h.Set("Cache-Control", AssetCacheControl)
	h.Set("ETag", a.etag)
	h.Set("X-Content-Type-Options", "nosniff")
	// The bytes are in memory, so only a client's error can fail here (an
	// unsatisfiable range, a failed precondition): problems, as everywhere.
	wire.ServeContent(w, r, time.Time{}, bytes.NewReader(a.body), parley.RequestIDFromContext(r.Context()))
}

// ServeShell writes the shell: never cached (it names the current
// release's assets), with the headers of docs/protocol.md#browser-safety.
func (s *Site) ServeShell(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Length", strconv.Itoa(len(s.shell)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(s.shell)
	}
}
