package parley_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/parleychat/parley"

// importsOf returns the imports of the non-test Go files in dir, whatever
// their build constraints, each with the file that imports it.
func importsOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	imports := map[string]string{}
	files := 0
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, name), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		files++
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				t.Fatalf("%s: import %s: %v", name, imp.Path.Value, err)
			}
			imports[path] = filepath.Join(dir, name)
		}
	}
	if files == 0 {
		t.Fatalf("no non-test Go files in %s", dir)
	}
	return imports
}

// The root package says what the system is and imports only the standard
// library: adapters import it, never the other way round. A
// standard-library path has no dot in its first element.
func TestImportsOnlyStandardLibrary(t *testing.T) {
	for path, file := range importsOf(t, ".") {
		if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") {
			t.Errorf("%s imports %s, outside the standard library", file, path)
		}
	}
}

// TestLayers keeps imports pointing down (docs/architecture.md#layers):
// the application layer knows no transport and no database, a transport
// knows no database and not the other transport's chain, and no adapter
// imports the command.
func TestLayers(t *testing.T) {
	forbidden := map[string][]string{
		"app":      {"gateway", "httpapi", "middleware", "web", "sqlite", "postgres", "nats", "inmem", "cmd/parley"},
		"gateway":  {"middleware", "httpapi", "sqlite", "postgres", "cmd/parley"},
		"httpapi":  {"sqlite", "postgres", "nats", "cmd/parley"},
		"export":   {"middleware", "httpapi", "gateway", "sqlite", "postgres"},
		"sqlite":   {"postgres", "app", "gateway", "httpapi", "middleware", "secretkey"},
		"postgres": {"sqlite", "app", "gateway", "httpapi", "middleware", "secretkey"},
		// The blob stores are adapters like the stores; the contract suite
		// knows none of them (their tests import it).
		"blobdir":  {"s3", "sqlite", "postgres", "app", "gateway", "httpapi", "middleware", "export", "cmd/parley"},
		"s3":       {"blobdir", "sqlite", "postgres", "app", "gateway", "httpapi", "middleware", "export", "cmd/parley"},
		"blobtest": {"blobdir", "s3", "sqlite", "postgres", "app", "gateway", "httpapi", "cmd/parley"},
		// The thumbnail jobs see a parley.BlobStore, never which one.
		"thumb": {"blobdir", "s3", "sqlite", "postgres", "app", "gateway", "httpapi", "middleware", "export", "cmd/parley"},
		// The stores see a parley.Sealer, never the key file.
		"upload":    {"gateway", "httpapi", "middleware", "web", "sqlite", "postgres", "blobdir", "s3", "cmd/parley"},
		"secretkey": {"sqlite", "postgres", "app", "gateway", "httpapi", "middleware", "export", "cmd/parley"},
		// A benchmark's tool: nothing of the product depends on it.
		"cpucap": {"app", "gateway", "httpapi", "sqlite", "postgres", "loadtest", "cmd/parley"},
		// Web Push sees the store through webpush.Targets, never which one.
		"webpush": {"sqlite", "postgres", "app", "gateway", "httpapi", "middleware", "web", "cmd/parley"},
	}
	for dir, banned := range forbidden {
		imports := importsOf(t, dir)
		for _, b := range banned {
			if file, ok := imports[module+"/"+b]; ok {
				t.Errorf("%s imports %s: imports point down only", file, b)
			}
		}
	}
}
