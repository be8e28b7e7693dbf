package web_test

import (
	"encoding/json"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/parleychat/parley"
)

// catalogues are the app's languages; each is web/app/i18n/CODE.js.
var catalogues = []string{"en", "zh"}

// areas are the catalogue's parts loaded on demand (i18n.js loadArea):
// web/app/i18n/AREA.LANG.js, holding exactly the keys AREA.*.
var areas = []string{"manage"}

// readLanguage returns a language's whole catalogue: its core and its
// areas, each key in exactly one file, an area's keys in the area's file.
func readLanguage(t *testing.T, lang string) map[string]any {
	t.Helper()
	all := readCatalogue(t, lang+".js")
	for k := range all {
		for _, area := range areas {
			if strings.HasPrefix(k, area+".") {
				t.Errorf("%s.js: %q belongs in %s.%s.js (loaded with its screens)", lang, k, area, lang)
			}
		}
	}
	for _, area := range areas {
		name := area + "." + lang + ".js"
		for k, v := range readCatalogue(t, name) {
			if !strings.HasPrefix(k, area+".") {
				t.Errorf("%s: %q is not a key of the %s screens", name, k, area)
			}
			all[k] = v
		}
	}
	return all
}

// readCatalogue parses one catalogue module: `export default { … };`
// whose object is JSON once its comment lines and a trailing comma are
// taken out. A value is a string or a plural form {one?, other, …}.
func readCatalogue(t *testing.T, file string) map[string]any {
	t.Helper()
	lang := strings.TrimSuffix(file, ".js")
	b, err := os.ReadFile(filepath.Join("app", "i18n", file))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for l := range strings.Lines(string(b)) {
		if s := strings.TrimSpace(l); s == "" || strings.HasPrefix(s, "//") {
			continue
		}
		lines = append(lines, l)
	}
	src := strings.TrimSpace(strings.Join(lines, ""))
	body, ok := strings.CutPrefix(src, "export default ")
	if !ok {
		t.Fatalf("%s.js: does not start with `export default {`", lang)
	}
	body = strings.TrimSuffix(body, ";")
	body = regexp.MustCompile(`,\s*}\s*$`).ReplaceAllString(body, "}")
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("%s.js: not JSON with comment lines: %v", lang, err)
	}
	// encoding/json keeps the last of duplicate keys silently; a
	// duplicate is a merge gone wrong.
	seen := map[string]bool{}
	for _, k := range regexp.MustCompile(`(?m)^\s*"([^"]+)"\s*:`).FindAllStringSubmatch(body, -1) {
		if seen[k[1]] {
			t.Errorf("%s.js: key %q twice", lang, k[1])
		}
		seen[k[1]] = true
	}
	return m
}

// usedKey finds the keys the modules pass to t(…) and plural(…) as a
// literal; errorText's keys are the protocol's codes.
var usedKey = regexp.MustCompile(`\bt\(\s*"([^"]+)"`)

// TestCatalogues: every catalogue has the same keys, each a string or a
// plural form with "other"; every key a module uses and every error code
// of the protocol has a string in each; no placeholder is named in one
// language and not the other.
func TestCatalogues(t *testing.T) {
	cats := map[string]map[string]any{}
	for _, lang := range catalogues {
		cats[lang] = readLanguage(t, lang)
	}
	want := map[string]string{} // key → where it is needed
	for _, c := range parley.Codes {
		want["error."+string(c.Code)] = "the protocol's code table"
	}
	want["error.unknown"] = "i18n.js errorText"
	err := fs.WalkDir(os.DirFS("app"), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".js") || strings.HasPrefix(p, "i18n/") {
			return err
		}
		b, err := os.ReadFile(filepath.Join("app", p))
		if err != nil {
			return err
		}
		for _, m := range usedKey.FindAllStringSubmatch(string(b), -1) {
			want[m[1]] = p
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	placeholder := regexp.MustCompile(`\{\w+\}`)
	holes := func(v any) []string {
		var all []string
		switch v := v.(type) {
		case string:
			all = placeholder.FindAllString(v, -1)
		case map[string]any:
			for _, f := range v {
				s, _ := f.(string)
				all = append(all, placeholder.FindAllString(s, -1)...)
			}
		}
		slices.Sort(all)
		return slices.Compact(all)
	}
	for _, lang := range catalogues {
		for _, k := range slices.Sorted(maps.Keys(want)) {
			if _, ok := cats[lang][k]; !ok {
				t.Errorf("%s.js: no string for %q (used by %s)", lang, k, want[k])
			}
		}
		for k, v := range cats[lang] {
			switch v := v.(type) {
			case string:
			case map[string]any:
				if _, ok := v["other"].(string); !ok {
					t.Errorf("%s.js: plural %q has no \"other\" string", lang, k)
				}
			default:
				t.Errorf("%s.js: %q is %T, want a string or a plural form", lang, k, v)
			}
			for _, other := range catalogues {
				ov, ok := cats[other][k]
				if !ok {
					t.Errorf("%s.js has %q, %s.js does not", lang, k, other)
				} else if a, b := holes(v), holes(ov); lang < other && !slices.Equal(a, b) {
					t.Errorf("%q: placeholders %v in %s.js, %v in %s.js", k, a, lang, b, other)
				}
			}
		}
	}
}
