package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the repository's root, seen from this package's directory.
const repoRoot = "../.."

// The documents the repository publishes: the README and docs/*.md.
func publishedDocs(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append([]string{filepath.Join(repoRoot, "README.md")}, docs...)
	if len(docs) < 5 {
		t.Fatalf("only %d documents found: %q", len(docs), docs)
	}
	return docs
}

// sourceFiles returns the files under root whose names end in one of exts,
// skipping hidden directories.
func sourceFiles(t *testing.T, root string, exts ...string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if slices.Contains(exts, filepath.Ext(path)) {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// The documents the project's comments used to cite live outside the
// repository, so a citation of them leads nowhere: a reference must be a
// link that resolves here. (The patterns are spelt so that this file does
// not match them.)
var outsideCitation = []*regexp.Regexp{
	regexp.MustCompile(`SPEC\s+§`),
	regexp.MustCompile(`\bseed\s+[0-9]{3}\b`),
}

// TestDocCitations: no Go, JavaScript or markdown file cites a section of a
// document the repository does not hold.
func TestDocCitations(t *testing.T) {
	files := sourceFiles(t, repoRoot, ".go", ".js", ".md")
	if len(files) < 100 {
		t.Fatalf("only %d files found under %s", len(files), repoRoot)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range citationProblems(string(b)) {
			t.Errorf("%s:%s", rel(f), p)
		}
	}
}

// citationProblems returns "line: text" for each outside citation in text.
func citationProblems(text string) []string {
	var out []string
	for i, line := range strings.Split(text, "\n") {
		for _, re := range outsideCitation {
			if m := re.FindString(line); m != "" {
				out = append(out, fmt.Sprintf("%d: cites %q, which is not in the repository: link into docs/ instead", i+1, m))
			}
		}
	}
	return out
}

// mdLink is a markdown link or image: [text](target "title").
var mdLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// TestDocLinks: every relative link of the README and docs/*.md leads to a
// file of the repository, and every #anchor to a heading of its document.
func TestDocLinks(t *testing.T) {
	anchors := map[string]map[string]bool{} // cleaned path → its anchors
	n := 0
	for _, doc := range publishedDocs(t) {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range docLinks(string(text)) {
			n++
			if p := checkTarget(doc, l.target, anchors); p != "" {
				t.Errorf("%s:%d: link %s: %s", rel(doc), l.line, l.target, p)
			}
		}
	}
	if n < 50 {
		t.Errorf("only %d links found in the documents", n)
	}
}

// docRef is a reference to a document of docs/ by its path from the
// repository's root, with or without an anchor (docs/*.md#anchor).
var docRef = regexp.MustCompile(`\bdocs/([A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md)(#[A-Za-z0-9_-]+)?`)

// TestDocRefs: every docs/*.md file or anchor named in the
// code, the scripts, the configuration examples and the documents exists,
// anchor included.
func TestDocRefs(t *testing.T) {
	anchors := map[string]map[string]bool{}
	files := sourceFiles(t, repoRoot, ".go", ".js", ".md", ".sh", ".sql", ".yaml", ".cfg", ".service", ".example", ".html", ".css")
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range docRef.FindAllStringSubmatch(line, -1) {
				n++
				target := "docs/" + m[1] + m[2]
				if p := checkTarget(filepath.Join(repoRoot, "README.md"), target, anchors); p != "" {
					t.Errorf("%s:%d: %s: %s", rel(f), i+1, target, p)
				}
			}
		}
	}
	if n < 30 {
		t.Errorf("only %d references to docs/ found", n)
	}
}

// checkTarget checks a link target written in the document from: "" when
// it resolves, else what is wrong. Links with a scheme are not followed.
func checkTarget(from, target string, anchors map[string]map[string]bool) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return ""
	}
	path, anchor, _ := strings.Cut(target, "#")
	file := from
	if path != "" {
		file = filepath.Clean(filepath.Join(filepath.Dir(from), path))
		if _, err := os.Stat(file); err != nil {
			return "no such file"
		}
	}
	if anchor == "" {
		return ""
	}
	if !strings.HasSuffix(file, ".md") {
		return "an anchor into a file that is not markdown"
	}
	set, ok := anchors[file]
	if !ok {
		b, err := os.ReadFile(file)
		if err != nil {
			return err.Error()
		}
		set = headingAnchors(string(b))
		anchors[file] = set
	}
	if !set[anchor] {
		return fmt.Sprintf("%s has no heading with the anchor #%s", rel(file), anchor)
	}
	return ""
}

type link struct {
	line   int
	target string
}

// docLinks returns the links of a markdown text outside code: fenced
// blocks and inline code spans are skipped.
func docLinks(text string) []link {
	var out []link
	for i, line := range proseLines(text) {
		if line == "" {
			continue
		}
		line = inlineCode.ReplaceAllString(line, "")
		for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
			out = append(out, link{i + 1, m[1]})
		}
	}
	return out
}

var inlineCode = regexp.MustCompile("`[^`]*`")

// proseLines returns the lines of a markdown text with those of fenced
// code blocks (and the fences) blanked, so line numbers stay.
func proseLines(text string) []string {
	lines := strings.Split(text, "\n")
	fence := ""
	for i, l := range lines {
		trimmed := strings.TrimSpace(l)
		switch {
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			lines[i] = ""
		case strings.HasPrefix(trimmed, "```"), strings.HasPrefix(trimmed, "~~~"):
			fence = trimmed[:3]
			lines[i] = ""
		}
	}
	return lines
}

var (
	heading     = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	headingLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	htmlAnchor  = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
)

// headingAnchors returns the anchors GitHub gives the headings of a
// markdown text (and any <a id> in it).
func headingAnchors(text string) map[string]bool {
	set := map[string]bool{}
	seen := map[string]int{}
	for _, line := range proseLines(text) {
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			set[m[1]] = true
		}
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		slug := slugify(m[1])
		if n := seen[slug]; n > 0 {
			set[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			set[slug] = true
		}
		seen[slug]++
	}
	return set
}

// slugify is GitHub's anchor of a heading's text: the rendered text in
// lower case, without characters other than letters, marks, digits, "_",
// "-" and spaces, each space a "-".
func slugify(h string) string {
	h = headingLink.ReplaceAllString(h, "$1")
	h = strings.NewReplacer("`", "", "*", "").Replace(h)
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func rel(path string) string {
	if r, err := filepath.Rel(repoRoot, path); err == nil {
		return r
	}
	return path
}

// TestDocLinkChecks pins how the link checks read markdown.
func TestDocLinkChecks(t *testing.T) {
	for h, want := range map[string]string{
		"HTTP API: exports":                       "http-api-exports",
		"Store outages: never a terminal code":    "store-outages-never-a-terminal-code",
		"Load and acceptance: `parley bench`":     "load-and-acceptance-parley-bench",
		"A floor under the heap, 2026-12-05":      "a-floor-under-the-heap-2026-12-05",
		"JSON replies keep `&`, `<` and `>`":      "json-replies-keep---and-",
		"Three gateways — one machine":            "three-gateways--one-machine",
		"Flags of `parley serve`":                 "flags-of-parley-serve",
		"Request ids and [access logs](#x) (new)": "request-ids-and-access-logs-new",
	} {
		if got := slugify(h); got != want {
			t.Errorf("slugify(%q) = %q, want %q", h, got, want)
		}
	}
	doc := "# T\n\n## Same\n\n```sh\n# not a heading\n```\n\n## Same\n\nsee [x](#same-1) and `[y](#nowhere)`\n"
	a := headingAnchors(doc)
	if !a["t"] || !a["same"] || !a["same-1"] || a["not-a-heading"] {
		t.Errorf("headingAnchors = %v", a)
	}
	if got := docLinks(doc); len(got) != 1 || got[0].target != "#same-1" || got[0].line != 11 {
		t.Errorf("docLinks = %+v, want the one link outside code, on line 11", got)
	}
	if p := citationProblems("// Bounds (SPEC" + " §3).\n// as seed" + " 004 says"); len(p) != 2 {
		t.Errorf("citationProblems found %d citations, want 2: %q", len(p), p)
	}
	if p := citationProblems("// Bounds (docs/design.md#input-bounds); seeds 4"); len(p) != 0 {
		t.Errorf("citationProblems flags a link: %q", p)
	}
}

// TestDocFlags: docs/configuration.md has a row for every flag `parley
// serve --help` prints, with its environment variable beside it.
func TestDocFlags(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := runIn(t, nil, "", "serve", "--help")
	if err != nil {
		t.Fatal(err)
	}
	flags := regexp.MustCompile(`(?m)^  (--[a-z][a-z-]*)\b`).FindAllStringSubmatch(out, -1)
	if len(flags) < 20 {
		t.Fatalf("serve --help lists %d flags:\n%s", len(flags), out)
	}
	for _, m := range flags {
		env := "`PARLEY_" + strings.ReplaceAll(strings.ToUpper(strings.TrimPrefix(m[1], "--")), "-", "_") + "`"
		if flagOnly[strings.TrimPrefix(m[1], "--")] {
			env = "(flag only)"
			if strings.Contains(string(doc), "`PARLEY_"+strings.ToUpper(strings.TrimPrefix(m[1], "--"))+"`") {
				t.Errorf("docs/configuration.md names an environment variable for the flag-only %s", m[1])
			}
		}
		if row := "| `" + m[1] + "` | " + env + " |"; !strings.Contains(string(doc), row) {
			t.Errorf("docs/configuration.md has no row starting %q", row)
		}
	}
}
