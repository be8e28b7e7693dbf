package parley_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxFuncLines is the longest a function or method of the module's code
// may be, from `func` to its closing brace: past it a function does too
// many things for a reader to hold at once, and its steps want names.
const maxFuncLines = 80

// TestFuncLength holds every function of the module's non-test files to
// maxFuncLines. The contract suites (storetest, bustest) are test code in
// non-test files: a function that takes a *testing.T or a testing.TB is
// not held to it.
func TestFuncLength(t *testing.T) {
	fset := token.NewFileSet()
	lengths := map[string]int{} // of every function checked
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil || takesTesting(fn) {
				continue
			}
			n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			key := funcKey(filepath.ToSlash(filepath.Dir(path)), fn)
			lengths[key] = max(lengths[key], n) // one name in files of different build tags
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var long []string
	for key, n := range lengths {
		if n > maxFuncLines {
			long = append(long, fmt.Sprintf("%s: %d lines", key, n))
		}
	}
	slices.Sort(long)
	for _, l := range long {
		t.Errorf("%s, want at most %d: give its steps names", l, maxFuncLines)
	}
}

// funcKey names fn as go doc would, after the directory of its package:
// "gateway.(*conn).handle", "cmd/parley.runServe".
func funcKey(dir string, fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return dir + "." + fn.Name.Name
	}
	recv := fn.Recv.List[0].Type
	star := ""
	if s, ok := recv.(*ast.StarExpr); ok {
		star, recv = "*", s.X
	}
	switch r := recv.(type) { // a generic type's parameters are left out
	case *ast.IndexExpr:
		recv = r.X
	case *ast.IndexListExpr:
		recv = r.X
	}
	name := fmt.Sprint(recv)
	if star != "" {
		return fmt.Sprintf("%s.(*%s).%s", dir, name, fn.Name.Name)
	}
	return fmt.Sprintf("%s.%s.%s", dir, name, fn.Name.Name)
}

// takesTesting reports whether fn has a *testing.T or testing.TB
// parameter: the code of a contract suite, run by tests only.
func takesTesting(fn *ast.FuncDecl) bool {
	for _, p := range fn.Type.Params.List {
		typ, star := p.Type, false
		if s, ok := typ.(*ast.StarExpr); ok {
			typ, star = s.X, true
		}
		sel, ok := typ.(*ast.SelectorExpr)
		if !ok {
			continue
		}
		pkg, ok := sel.X.(*ast.Ident)
		if ok && pkg.Name == "testing" && (star && sel.Sel.Name == "T" || !star && sel.Sel.Name == "TB") {
			return true
		}
	}
	return false
}
