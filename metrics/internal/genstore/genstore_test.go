package genstore

import (
	"strings"
	"testing"
)

// The generator expands embedded interfaces, qualifies the root package's
// types, keeps other packages' names (and imports them as the contract
// does), spreads variadic arguments, writes the methods in name order, and
// leaves out a method that takes no context.
func TestGenerate(t *testing.T) {
	src, err := Generate("testdata/ok")
	if err != nil {
		t.Fatal(err)
	}
	got := string(src)
	if !strings.HasPrefix(got, Header+"\n") {
		t.Errorf("output does not start with the generated-code header:\n%s", got)
	}
	for _, want := range []string{
		`clock "time"`,
		"\n\t\"time\"\n",
		`"github.com/parleychat/parley"`,
		"var StoreOps = []string{\n\t\"Counts\",\n\t\"Multi\",\n\t\"Page\",\n\t\"Plain\",\n}",
		"func (s *store) Counts(ctx context.Context, a1 clock.Duration) (_ map[parley.State]int64, err error) {\n" +
			"\tdefer s.observe(\"Counts\", time.Now(), &err)\n\treturn s.Store.Counts(ctx, a1)\n}",
		"func (s *store) Page(ctx context.Context, a1 *parley.Query) (_ parley.Page[parley.Item], err error) {",
		"func (s *store) Multi(ctx context.Context) (_ string, _ []byte, err error) {",
		"func (s *store) Plain(ctx context.Context, a1 string, a2 string, a3 ...int) (err error) {\n" +
			"\tdefer s.observe(\"Plain\", time.Now(), &err)\n\treturn s.Store.Plain(ctx, a1, a2, a3...)\n}",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks\n%s\n--- output:\n%s", want, got)
		}
	}
	if strings.Contains(got, "Close(") {
		t.Errorf("Close takes no context but is measured:\n%s", got)
	}
	if i, j := strings.Index(got, ") Counts("), strings.Index(got, ") Plain("); i > j {
		t.Error("methods are not in name order")
	}
}

// A method whose failures could not be counted is refused, not skipped.
func TestGenerateRefusesMethodWithoutError(t *testing.T) {
	_, err := Generate("testdata/noerr")
	if err == nil || !strings.Contains(err.Error(), "Store.Count") {
		t.Errorf("Generate = %v, want an error naming Store.Count", err)
	}
}
