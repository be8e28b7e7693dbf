package web

import (
	"strings"
	"testing"
)

func TestStripComments(t *testing.T) {
	for _, c := range []struct {
		name, in, want string
		css            bool
	}{
		{name: "line comments", in: "// a\nlet x = 1; // kept\n  // b\n", want: "\nlet x = 1; // kept\n\n"},
		{name: "doc block", in: "/**\n * f does\n   things\n */\nfunction f() {}\n", want: "\n\n\n\nfunction f() {}\n"},
		{name: "block after code keeps its lines", in: "x(); /* a\nb */ y();\n", want: "x(); /* a\nb */ y();\n"},
		{name: "comment in a string", in: "const u = \"http://x/*y\";\n// gone\n", want: "const u = \"http://x/*y\";\n\n"},
		{name: "comment in a template", in: "const s = `a\n// kept\n${b /* in */}\n/* kept */`;\n", want: "const s = `a\n// kept\n${b /* in */}\n/* kept */`;\n"},
		{name: "nested template", in: "const s = `${f(`x${y}`)}\n// kept`;\n// gone\n", want: "const s = `${f(`x${y}`)}\n// kept`;\n\n"},
		{name: "regex with slashes", in: "const r = /\\/\\/*[/*]/g;\n// gone\n", want: "const r = /\\/\\/*[/*]/g;\n\n"},
		{name: "regex after return", in: "function f() {\n  return /'/.test(s);\n}\n// gone\n", want: "function f() {\n  return /'/.test(s);\n}\n\n"},
		{name: "division", in: "const h = a / 2 / b;\n// gone\n", want: "const h = a / 2 / b;\n\n"},
		{name: "no final newline", in: "x();\n// end", want: "x();\n"},
		{name: "css", css: true, in: "/* a\n   b */\nbody { background: url(http://x/y); }\n/* c */\n", want: "\n\nbody { background: url(http://x/y); }\n\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := stripComments([]byte(c.in), c.css)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Errorf("got\n%q\nwant\n%q", got, c.want)
			}
			if strings.Count(string(got), "\n") != strings.Count(c.in, "\n") {
				t.Errorf("line count changed")
			}
		})
	}
	for _, bad := range []string{"const s = \"open\n", "x = `open\n", "/* open\n", "x = a ? /open\n : b;\n", "f(`${a`);\n"} {
		if _, err := stripComments([]byte(bad), false); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// FuzzStripComments: whatever the source, stripping either refuses it or
// keeps every line count and every line that has no comment.
func FuzzStripComments(f *testing.F) {
	for _, s := range []string{"// a\nx();\n", "/**\n * a\n */\n", "s = `${a}`\n", "r = /a\\/b/;\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		got, err := stripComments([]byte(src), false)
		if err != nil {
			return
		}
		in, out := strings.Split(src, "\n"), strings.Split(string(got), "\n")
		if len(in) != len(out) {
			t.Fatalf("%d lines became %d", len(in), len(out))
		}
		for i := range in {
			if out[i] != in[i] && out[i] != "" {
				t.Fatalf("line %d changed: %q → %q", i+1, in[i], out[i])
			}
		}
	})
}
