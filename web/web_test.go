package web_test

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/web"
	"github.com/parleychat/parley/wire"
)

// MaxFirstLoad is the budget of issue 13: the shell and every asset,
// uncompressed, at most 150 KiB.
const MaxFirstLoad = 150 << 10

// TestEmbeddedApp: the app compiled into the binary loads — every relative
// import names a module of the app, there is no import cycle, every shell
// reference names an asset — and every asset is reachable under its hashed
// name from the rendered shell.
func TestEmbeddedApp(t *testing.T) {
	s, err := web.New()
	if err != nil {
		t.Fatal(err)
	}
	shell := string(s.Shell())
	for _, name := range []string{"app.js", "app.css", "boot.js"} {
		p, ok := s.Path(name)
		if !ok {
			t.Fatalf("core asset %s missing from the app", name)
		}
		if !strings.Contains(shell, `"`+p+`"`) {
			t.Errorf("shell does not reference %s as %s:\n%s", name, p, shell)
		}
	}
	if strings.Contains(shell, `"/assets/app.js"`) {
		t.Errorf("shell still names an unhashed asset:\n%s", shell)
	}
	if !strings.Contains(shell, `<div id="app"></div>`) {
		t.Errorf("shell has no mount point:\n%s", shell)
	}
	// No inline script: every <script> has a src (CSP script-src 'self').
	for _, tag := range regexp.MustCompile(`<script[^>]*>`).FindAllString(shell, -1) {
		if !strings.Contains(tag, ` src="/assets/`) {
			t.Errorf("inline or foreign script in the shell: %s", tag)
		}
	}
	if strings.Contains(shell, " style=") {
		t.Errorf("inline style in the shell")
	}
}

// TestFirstLoadBudget: the shell and the assets of a first load (what the
// shell names and what that imports statically, and the largest language
// catalogue) stay within 150 KiB uncompressed. Modules imported dynamically load when the page needs
// them and are listed apart. This is a size budget: it fails when the app
// outgrows it.
func TestFirstLoadBudget(t *testing.T) {
	s, err := web.New()
	if err != nil {
		t.Fatal(err)
	}
	sizes := s.Sizes()
	sum := 0
	first := s.FirstLoad()
	for _, name := range append([]string{web.ShellFile}, first...) {
		t.Logf("%-20s %7d bytes", name, sizes[name])
		sum += sizes[name]
	}
	if sum != s.Size() {
		t.Fatalf("sizes add up to %d, Size says %d", sum, s.Size())
	}
	// The page loads one catalogue's core, i18n/LANG.js (i18n.js imports
	// it before the first render); the budget holds with the largest. The
	// strings of screens loaded on demand (i18n/AREA.LANG.js) load with
	// them.
	lazy, catalogue, largest := 0, 0, ""
	for _, name := range s.Assets() {
		if slices.Contains(first, name) {
			continue
		}
		if strings.HasPrefix(name, "i18n/") && strings.Count(name, ".") == 1 {
			t.Logf("%-20s %7d bytes (the page's language)", name, sizes[name])
			if sizes[name] > catalogue {
				catalogue, largest = sizes[name], name
			}
			continue
		}
		t.Logf("%-20s %7d bytes (loaded when needed)", name, sizes[name])
		lazy += sizes[name]
	}
	if largest == "" {
		t.Fatal("no catalogue under i18n/")
	}
	total := s.Size() + catalogue
	t.Logf("first load: %d bytes (%.1f KiB) in %d assets, the shell and %s; budget %d KiB; %d bytes load when needed",
		total, float64(total)/1024, len(first), largest, MaxFirstLoad>>10, lazy)
	if total > MaxFirstLoad {
		t.Fatalf("first load is %d bytes, over the %d-byte budget", total, MaxFirstLoad)
	}
}

// app is a small app with modules in two directories, a side-effect
// import, a re-export and a bare specifier that must stay as it is.
func app() fstest.MapFS {
	return fstest.MapFS{
		"index.html":    {Data: []byte(`<link rel="stylesheet" href="/assets/app.css"><script src="/assets/boot.js"></script><script type="module" src="/assets/app.js"></script><div id="app"></div>`)},
		"app.css":       {Data: []byte("body{}")},
		"boot.js":       {Data: []byte(`"use strict";`)},
		"app.js":        {Data: []byte("import { h } from \"./dom.js\";\nimport { list } from \"./views/list.js\";\nimport \"./side.js\";\nlist(h);\n")},
		"dom.js":        {Data: []byte("export function h() {}\n")},
		"side.js":       {Data: []byte("window.x = 1;\n")},
		"views/list.js": {Data: []byte("import { h } from \"../dom.js\";\nexport { h as hh } from \"../dom.js\";\nexport function list() {}\n")},
	}
}

// TestLoadRewritesImports: relative specifiers become hashed names, kept
// relative to the importing module; the shell names hashed assets.
func TestLoadRewritesImports(t *testing.T) {
	s, err := web.Load(app())
	if err != nil {
		t.Fatal(err)
	}
	hashed := func(name string) string {
		p, ok := s.Path(name)
		if !ok {
			t.Fatalf("%s not served", name)
		}
		if !regexp.MustCompile(`^/assets/` + regexp.QuoteMeta(strings.TrimSuffix(name, path.Ext(name))) + `\.[0-9a-f]{12}` + regexp.QuoteMeta(path.Ext(name)) + `$`).MatchString(p) {
			t.Fatalf("%s served as %s, want /assets/NAME.HASH.EXT", name, p)
		}
		return path.Base(p)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	get := func(name string) string {
		p, _ := s.Path(name)
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", p, resp.StatusCode, b)
		}
		return string(b)
	}
	appJS := get("app.js")
	for _, want := range []string{
		`from "./` + hashed("dom.js") + `"`,
		`from "./views/` + hashed("views/list.js") + `"`,
		`import "./` + hashed("side.js") + `"`,
	} {
		if !strings.Contains(appJS, want) {
			t.Errorf("app.js lacks %s:\n%s", want, appJS)
		}
	}
	listJS := get("views/list.js")
	if n := strings.Count(listJS, `from "../`+hashed("dom.js")+`"`); n != 2 {
		t.Errorf("views/list.js has %d rewritten imports of dom.js, want 2:\n%s", n, listJS)
	}
	shell := string(s.Shell())
	for _, name := range []string{"app.css", "boot.js", "app.js"} {
		if !strings.Contains(shell, `"/assets/`+hashed(name)+`"`) {
			t.Errorf("shell lacks %s:\n%s", hashed(name), shell)
		}
	}
}

// TestHashCoversImports: changing a module renames it and every module
// that imports it, directly or not, and nothing else.
func TestHashCoversImports(t *testing.T) {
	before, err := web.Load(app())
	if err != nil {
		t.Fatal(err)
	}
	changed := app()
	changed["dom.js"] = &fstest.MapFile{Data: []byte("export function h() { return 1; }\n")}
	after, err := web.Load(changed)
	if err != nil {
		t.Fatal(err)
	}
	for name, wantRenamed := range map[string]bool{
		"dom.js": true, "views/list.js": true, "app.js": true, "side.js": false, "boot.js": false, "app.css": false,
	} {
		p1, _ := before.Path(name)
		p2, _ := after.Path(name)
		if renamed := p1 != p2; renamed != wantRenamed {
			t.Errorf("%s: %s → %s, renamed %v, want %v", name, p1, p2, renamed, wantRenamed)
		}
	}
}

// TestLoadRefuses: an app that would break in the browser does not load,
// with an error naming the problem.
func TestLoadRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(fstest.MapFS)
		error string
	}{
		{"cycle", func(a fstest.MapFS) {
			a["dom.js"] = &fstest.MapFile{Data: []byte("import { list } from \"./views/list.js\";\n")}
		}, "import cycle: dom.js → views/list.js → dom.js"},
		{"self import", func(a fstest.MapFS) {
			a["side.js"] = &fstest.MapFile{Data: []byte("import \"./side.js\";\n")}
		}, "import cycle: side.js → side.js"},
		{"missing module", func(a fstest.MapFS) {
			a["side.js"] = &fstest.MapFile{Data: []byte("import { x } from \"./nope.js\";\n")}
		}, `side.js imports "./nope.js"`},
		{"specifier without .js", func(a fstest.MapFS) {
			a["side.js"] = &fstest.MapFile{Data: []byte("import { h } from \"./dom\";\n")}
		}, `side.js imports "./dom"`},
		{"outside the app", func(a fstest.MapFS) {
			a["side.js"] = &fstest.MapFile{Data: []byte("import { h } from \"../dom.js\";\n")}
		}, `side.js imports "../dom.js"`},
		{"shell names a missing asset", func(a fstest.MapFS) {
			a["index.html"] = &fstest.MapFile{Data: []byte(`<script src="/assets/gone.js"></script>`)}
		}, "references /assets/gone.js"},
		{"no shell", func(a fstest.MapFS) { delete(a, "index.html") }, "no index.html"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := app()
			tc.edit(a)
			_, err := web.Load(a)
			if err == nil || !strings.Contains(err.Error(), tc.error) {
				t.Fatalf("Load: %v, want an error with %q", err, tc.error)
			}
		})
	}
}

// TestServe: hashed assets are immutable with their Content-Type; any
// other name under /assets/ (the unhashed one, an old hash) is 404
// problem+json; every other path is the shell, no-store, with the
// browser-safety headers.
func TestServe(t *testing.T) {
	s, err := web.Load(app())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	js, _ := s.Path("app.js")
	css, _ := s.Path("app.css")
	list, _ := s.Path("views/list.js")
	for _, tc := range []struct {
		method, path string
		status       int
		header       map[string]string
	}{
		{"GET", js, 200, map[string]string{"Content-Type": "text/javascript; charset=utf-8", "Cache-Control": web.AssetCacheControl, "X-Content-Type-Options": "nosniff"}},
		{"HEAD", js, 200, map[string]string{"Content-Type": "text/javascript; charset=utf-8", "Cache-Control": web.AssetCacheControl}},
		{"GET", css, 200, map[string]string{"Content-Type": "text/css; charset=utf-8", "Cache-Control": web.AssetCacheControl}},
		{"GET", list, 200, map[string]string{"Content-Type": "text/javascript; charset=utf-8", "Cache-Control": web.AssetCacheControl}},
		{"GET", "/assets/app.js", 404, map[string]string{"Content-Type": "application/problem+json", "Cache-Control": "no-store"}},
		{"GET", "/assets/app.000000000000.js", 404, map[string]string{"Content-Type": "application/problem+json"}},
		{"GET", "/assets/index.html", 404, map[string]string{"Content-Type": "application/problem+json"}},
		{"GET", "/", 200, map[string]string{"Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store",
			"Content-Security-Policy": web.ContentSecurityPolicy, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}},
		{"GET", "/c/some-conversation", 200, map[string]string{"Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store"}},
		{"HEAD", "/signin", 200, map[string]string{"Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store"}},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			for k, want := range tc.header {
				if got := resp.Header.Get(k); got != want {
					t.Errorf("%s: %q, want %q", k, got, want)
				}
			}
			switch {
			case tc.method == "HEAD":
				if len(body) != 0 {
					t.Errorf("HEAD answered a body of %d bytes", len(body))
				}
			case tc.status == 404:
				var p wire.Problem
				if err := json.Unmarshal(body, &p); err != nil || p.Code != parley.CodeNotFound || p.Status != 404 {
					t.Errorf("404 body %s (%v), want a NOT_FOUND problem", body, err)
				}
			case strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html"):
				if string(body) != string(s.Shell()) {
					t.Errorf("shell body:\n%s", body)
				}
			}
		})
	}
}

// TestConditional: the hash is the ETag; a revalidation answers 304.
func TestConditional(t *testing.T) {
	s, err := web.Load(app())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	js, _ := s.Path("app.js")
	resp, err := http.Get(srv.URL + js)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	etag := resp.Header.Get("ETag")
	if !strings.Contains(js, strings.Trim(etag, `"`)) || etag == "" {
		t.Fatalf("ETag %q does not carry the hash of %s", etag, js)
	}
	req, _ := http.NewRequest("GET", srv.URL+js, nil)
	req.Header.Set("If-None-Match", etag)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotModified {
		t.Fatalf("revalidation: %d, want 304", resp.StatusCode)
	}
}

// TestDynamicImport: a dynamic import's specifier is rewritten to the
// hashed name like a static one, and the module it names (with what only
// it imports) is left out of the first load.
func TestDynamicImport(t *testing.T) {
	fsys := app()
	fsys["app.js"] = &fstest.MapFile{Data: []byte("import { h } from \"./dom.js\";\nexport const later = () => import(\"./lazy.js\");\n")}
	fsys["lazy.js"] = &fstest.MapFile{Data: []byte("import \"./side.js\";\nimport { h } from \"./dom.js\";\nexport function x() {}\n")}
	s, err := web.Load(fsys)
	if err != nil {
		t.Fatal(err)
	}
	lazy, _ := s.Path("lazy.js")
	appPath, _ := s.Path("app.js")
	srv := httptest.NewServer(s)
	defer srv.Close()
	resp, err := http.Get(srv.URL + appPath)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `import("./` + path.Base(lazy) + `")`; !strings.Contains(string(b), want) {
		t.Errorf("app.js lacks %s:\n%s", want, b)
	}
	want := []string{"app.css", "app.js", "boot.js", "dom.js"}
	if got := s.FirstLoad(); !slices.Equal(got, want) {
		t.Errorf("FirstLoad = %v, want %v", got, want)
	}
	sizes := s.Sizes()
	n := sizes[web.ShellFile]
	for _, name := range want {
		n += sizes[name]
	}
	if s.Size() != n {
		t.Errorf("Size = %d, want %d (the shell and the first load only)", s.Size(), n)
	}
}

// swManifest reads the manifest the server wrote into a service worker.
func swManifest(t *testing.T, sw []byte) (m struct {
	Release string   `json:"release"`
	Shell   string   `json:"shell"`
	Refs    []string `json:"refs"`
	Assets  []string `json:"assets"`
}) {
	t.Helper()
	_, rest, ok := strings.Cut(string(sw), "const MANIFEST = ")
	line, _, _ := strings.Cut(rest, ";\n")
	if !ok || json.Unmarshal([]byte(line), &m) != nil {
		t.Fatalf("no manifest in the service worker: %.300q", rest)
	}
	return m
}

// TestServiceWorkerManifest: the embedded app's service worker names the
// release, the shell and every hashed asset (and nothing else), and the
// shell's references are among them.
func TestServiceWorkerManifest(t *testing.T) {
	s, err := web.New()
	if err != nil {
		t.Fatal(err)
	}
	sw := s.ServiceWorker()
	if strings.Contains(string(sw), "/*MANIFEST*/ {") {
		t.Fatalf("the placeholder is still in the service worker")
	}
	m := swManifest(t, sw)
	if m.Release != s.Release() || !regexp.MustCompile(`^[0-9a-f]{12}$`).MatchString(m.Release) || m.Shell != "/" {
		t.Errorf("release %q (site %q), shell %q", m.Release, s.Release(), m.Shell)
	}
	var want []string
	for _, name := range s.Assets() {
		p, _ := s.Path(name)
		want = append(want, p)
	}
	slices.Sort(want)
	if !slices.Equal(m.Assets, want) {
		t.Errorf("assets %q, want %q", m.Assets, want)
	}
	if len(m.Refs) < 3 {
		t.Errorf("refs %q: want the shell's app.css, boot.js, app.js", m.Refs)
	}
	for _, r := range m.Refs {
		if !slices.Contains(m.Assets, r) || !strings.Contains(string(s.Shell()), `"`+r+`"`) {
			t.Errorf("ref %s is not an asset the shell names", r)
		}
	}
}

// TestServiceWorkerRelease: the service worker's bytes are the same for
// the same app and change when any file changes, a module that loads on
// demand included, so the browser installs a new worker with each release.
func TestServiceWorkerRelease(t *testing.T) {
	load := func(fsys fstest.MapFS) *web.Site {
		t.Helper()
		s, err := web.Load(fsys)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	base := app()
	base["lazy.js"] = &fstest.MapFile{Data: []byte("export const x = 1;\n")}
	base["app.js"] = &fstest.MapFile{Data: []byte("import { h } from \"./dom.js\";\nexport const later = () => import(\"./lazy.js\");\n")}
	a, b := load(base), load(base)
	if string(a.ServiceWorker()) != string(b.ServiceWorker()) || a.Release() != b.Release() {
		t.Fatalf("the same app gave two service workers")
	}
	for name, body := range map[string]string{"app.css": "body{color:red}", "lazy.js": "export const x = 2;\n", "index.html": string(base["index.html"].Data) + "<p>"} {
		changed := app()
		maps.Copy(changed, base)
		changed[name] = &fstest.MapFile{Data: []byte(body)}
		c := load(changed)
		if c.Release() == a.Release() || string(c.ServiceWorker()) == string(a.ServiceWorker()) {
			t.Errorf("changing %s left the release %s", name, a.Release())
		}
	}
}

// TestServeServiceWorker: /sw.js is JavaScript, revalidated on every
// check (no-cache; the release's ETag answers 304), with the page's CSP.
func TestServeServiceWorker(t *testing.T) {
	s, err := web.Load(app())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	resp, err := http.Get(srv.URL + web.ServiceWorkerPath)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for k, want := range map[string]string{
		"Content-Type": "text/javascript; charset=utf-8", "Cache-Control": web.ServiceWorkerCacheControl,
		"X-Content-Type-Options": "nosniff", "Content-Security-Policy": web.ContentSecurityPolicy, "ETag": `"` + s.Release() + `"`,
	} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	if resp.StatusCode != 200 || string(body) != string(s.ServiceWorker()) {
		t.Fatalf("GET /sw.js: %d, %d bytes", resp.StatusCode, len(body))
	}
	js, _ := s.Path("app.js")
	if m := swManifest(t, body); !slices.Contains(m.Assets, js) || !slices.Contains(m.Refs, js) {
		t.Errorf("the served worker does not name %s: %+v", js, m)
	}
	req, _ := http.NewRequest("GET", srv.URL+web.ServiceWorkerPath, nil)
	req.Header.Set("If-None-Match", resp.Header.Get("ETag"))
	again, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	again.Body.Close()
	if again.StatusCode != http.StatusNotModified {
		t.Errorf("revalidation: %d, want 304", again.StatusCode)
	}
}
