package metrics_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/metrics"
	"github.com/parleychat/parley/metrics/internal/genstore"
	"github.com/parleychat/parley/sqlite"
)

// store_gen.go is what genstore writes from the parley.Store interface
// today: a method added to (or changed in) the contract compiles, the
// wrapper embeds the store, but fails here until the file is generated
// again.
func TestStoreGenerated(t *testing.T) {
	want, err := genstore.Generate("..")
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("store_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("store_gen.go is stale: run go generate ./metrics\n%s", lineDiff(string(got), string(want)))
	}
}

// lineDiff names the first line where got and want differ.
func lineDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d:\n  committed: %q\n  generated: %q", i+1, gl, wl)
		}
	}
	return "(no line differs)"
}

// The store wrapper measures every method of parley.Store (Close aside),
// each under its own name, and StoreOps lists exactly those names: a check
// of the generator's output against the interface as the compiler sees it.
func TestStoreMeasuresEveryMethod(t *testing.T) {
	st := reflect.TypeFor[parley.Store]()
	var want []string
	for i := range st.NumMethod() {
		if name := st.Method(i).Name; name != "Close" {
			want = append(want, name)
		}
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "store_gen.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Recv == nil || !fd.Name.IsExported() {
			continue
		}
		if star, ok := fd.Recv.List[0].Type.(*ast.StarExpr); ok {
			if id, ok := star.X.(*ast.Ident); ok && id.Name == "store" {
				got = append(got, fd.Name.Name)
			}
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("measured methods %v\nwant every Store method %v", got, want)
	}
	ops := slices.Sorted(slices.Values(metrics.StoreOps))
	if !slices.Equal(ops, want) {
		t.Errorf("StoreOps %v\nwant %v", ops, want)
	}
}

// Every call is timed under its method; only calls the store could not
// answer count as errors: a protocol answer (NOT_FOUND) or a caller that
// gave up (context canceled) does not.
func TestStoreCalls(t *testing.T) {
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"), parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(metrics.Options{})
	s := m.Store(db)
	ctx := context.Background()
	if _, err := s.CreateUser(ctx, parley.NewUser{ID: "ana", Password: "password-ana"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.User(ctx, "nobody"); parley.ErrorCode(err) != parley.CodeNotFound {
		t.Fatalf("User(nobody) = %v, want NOT_FOUND", err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Ping(canceled); !errors.Is(err, context.Canceled) {
		t.Logf("Ping on a canceled context: %v", err)
	}
	if _, err := s.Sync(ctx, parley.Principal{User: "ana"}, parley.SyncRequest{Conv: "c-none", Limit: 1}); parley.ErrorCode(err) != parley.CodeNotMember {
		t.Fatalf("Sync of an unknown conversation = %v, want NOT_MEMBER", err)
	}
	db.Close()
	if err := s.Ping(ctx); err == nil {
		t.Fatal("Ping on a closed store succeeded")
	}
	fams := scrape(t, m)
	for _, c := range []struct {
		op            string
		calls, errors float64
	}{
		{"CreateUser", 1, 0},
		{"User", 1, 0},
		{"Ping", 2, 1},
		{"Sync", 1, 0},
		{"Send", 0, 0}, // present from the start
	} {
		calls, ok := sample(fams, metrics.NameStoreDuration, map[string]string{"op": c.op})
		if !ok || calls != c.calls {
			t.Errorf("%s{op=%q} = %v (present %v), want %v", metrics.NameStoreDuration, c.op, calls, ok, c.calls)
		}
		errs, ok := sample(fams, metrics.NameStoreErrors, map[string]string{"op": c.op})
		if !ok || errs != c.errors {
			t.Errorf("%s{op=%q} = %v (present %v), want %v", metrics.NameStoreErrors, c.op, errs, ok, c.errors)
		}
	}
	if m := (*metrics.Metrics)(nil); m.Store(db) != db {
		t.Error("a nil Metrics wraps the store; want it returned as it is")
	}
}

func TestExportAndRetention(t *testing.T) {
	m := metrics.New(metrics.Options{})
	fams := scrape(t, m)
	for _, out := range metrics.ExportOutcomes {
		if v, ok := sample(fams, metrics.NameExportAttempts, map[string]string{"outcome": out}); !ok || v != 0 {
			t.Errorf("%s{outcome=%q} = %v, %v at start; want 0, present", metrics.NameExportAttempts, out, v, ok)
		}
	}
	for _, name := range []string{metrics.NameRetentionPurges, metrics.NameRetentionPurged} {
		if v, ok := sample(fams, name, nil); !ok || v != 0 {
			t.Errorf("%s = %v, %v at start; want 0, present", name, v, ok)
		}
	}
	m.ExportAttempt("done", 2*time.Second)
	m.ExportAttempt("retry", time.Second)
	m.ExportAttempt("bogus", time.Second) // skipped
	m.RetentionPurge(5)
	m.RetentionPurge(0)
	var nilM *metrics.Metrics
	nilM.RetentionPurge(3) // nil-safe
	fams = scrape(t, m)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{metrics.NameExportAttempts, map[string]string{"outcome": "done"}, 1},
		{metrics.NameExportAttempts, map[string]string{"outcome": "retry"}, 1},
		{metrics.NameExportDuration, map[string]string{"outcome": "done"}, 1},
		{metrics.NameRetentionPurges, nil, 2},
		{metrics.NameRetentionPurged, nil, 5},
	} {
		if v, _ := sample(fams, c.name, c.labels); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	if errorCount(fams, metrics.NameExportAttempts, "invalid") != 1 {
		t.Error("an unknown export outcome was not skipped and counted")
	}
}
