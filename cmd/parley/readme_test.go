package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// walkthrough lists the sections (a file from the repository's root and
// a ## heading in it) whose ```sh blocks TestREADME runs, in order, against
// one fresh `parley serve --demo`: each continues from the state the
// previous one left. The README's quick start starts the server; the tour
// (docs/tour.md) continues from it, and the README's HTTP API walkthrough
// (in a direct conversation of its own) ends it.
var walkthrough = []struct{ file, section string }{
	{"README.md", "Quick start"},
	{"docs/tour.md", "First steps"},
	{"docs/tour.md", "Operations API"},
	{"docs/tour.md", "Incoming webhooks"},
	{"docs/tour.md", "Exports"},
	{"README.md", "HTTP API"},
}

// TestREADME runs the walkthrough of the README and the tour as a reader
// would, against a real server, and compares every output with the `# …`
// lines under its command: JSON by shape (the keys, and every value the
// document states; "…" stands for any value, a bare … in an object for more
// keys), other text as a pattern where … matches anything. So the
// documents' numbers must chain: a seq, a count or a name that does not
// follow from the
// previous step fails the test.
//
// How the commands run: `go run ./cmd/parley serve` is the server the test
// started (on port 0, with a temporary data directory); `go run
// ./cmd/parley` is this binary; `go run ./examples/hello` is built once and
// gets -server and -dir; a hello that only listens (-body "") runs in the
// background and its "# terminal N:" lines are checked at the end of its
// block. `NAME=…   # the "field" above` sets NAME from that field of the
// latest output that has it. 127.0.0.1:8080 becomes the real address. A
// GET that does not match yet (an export still running) is retried for up
// to 30 s.
func TestREADME(t *testing.T) {
	for _, tool := range []string{"bash", "curl", "openssl", "zcat", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the walkthrough's commands need %s: %v", tool, err)
		}
	}
	var blocks []readmeBlock
	for _, w := range walkthrough {
		text, err := os.ReadFile(filepath.Join("..", "..", w.file))
		if err != nil {
			t.Fatal(err)
		}
		bs := readmeBlocks(string(text), []string{w.section})
		if len(bs) == 0 {
			t.Fatalf("%s: no sh blocks found in the section %q", w.file, w.section)
		}
		for i := range bs {
			bs[i].file = w.file
		}
		blocks = append(blocks, bs...)
	}

	p := serveArgs(t, "--demo")
	work := t.TempDir()
	hello := filepath.Join(t.TempDir(), "hello")
	if out, err := exec.Command("go", "build", "-o", hello, "../../examples/hello").CombinedOutput(); err != nil {
		t.Fatalf("go build examples/hello: %v\n%s", err, out)
	}
	r := &readmeRun{t: t, url: p.http, dir: work, hello: hello, helloDir: t.TempDir(), vars: map[string]string{}}
	for _, b := range blocks {
		r.block(b)
	}
}

// readmeCmd is one shell command of a block and the output lines under it.
type readmeCmd struct {
	line    int    // in its file
	cmd     string // continuation lines joined
	comment string // its inline comment
	want    []string
}

type readmeBlock struct {
	file    string // from the repository's root
	section string
	cmds    []readmeCmd
}

// readmeBlocks returns the ```sh blocks of the named ## sections.
func readmeBlocks(text string, sections []string) []readmeBlock {
	var out []readmeBlock
	var section string
	var cur *readmeBlock
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case cur == nil && strings.HasPrefix(l, "## "):
			section = strings.TrimPrefix(l, "## ")
		case cur == nil && l == "```sh" && slices.Contains(sections, section):
			cur = &readmeBlock{section: section}
		case cur != nil && l == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil && strings.HasPrefix(strings.TrimSpace(l), "#"):
			if n := len(cur.cmds); n > 0 {
				w := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "#"))
				cur.cmds[n-1].want = append(cur.cmds[n-1].want, w)
			}
		case cur != nil && strings.TrimSpace(l) != "":
			c := readmeCmd{line: i + 1}
			cmd := l
			for (strings.HasSuffix(cmd, `\`) || strings.HasSuffix(cmd, "|")) && i+1 < len(lines) {
				i++
				cmd += "\n" + lines[i]
			}
			if at := commentAt(cmd); at >= 0 {
				c.comment = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(cmd[at:]), "#"))
				cmd = cmd[:at]
			}
			c.cmd = strings.TrimSpace(cmd)
			cur.cmds = append(cur.cmds, c)
		}
	}
	return out
}

// commentAt is where the inline comment of cmd starts (a # after a
// space, outside quotes), or -1.
func commentAt(cmd string) int {
	var quote byte
	for i := 0; i < len(cmd); i++ {
		c := cmd[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else if c == '\\' && quote == '"' {
				i++
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '#' && i > 0 && (cmd[i-1] == ' ' || cmd[i-1] == '\t'):
			return i
		}
	}
	return -1
}

var (
	terminalRe = regexp.MustCompile(`^terminal (\d+):\s*`)
	fieldRe    = regexp.MustCompile(`the "(\w+)" above`)
	assignRe   = regexp.MustCompile(`^([A-Z_]+)=…$`)
	shellVarRe = regexp.MustCompile(`^([A-Za-z_]+)=\S`)
)

type readmeRun struct {
	t        *testing.T
	url      string
	dir      string
	hello    string
	helloDir string
	vars     map[string]string
	outputs  []string // every command's output, oldest first
}

// listener is a hello that only listens, running in the background.
type listener struct {
	terminal string
	cmd      *exec.Cmd
	out      *lockedBuffer
}

func (r *readmeRun) block(b readmeBlock) {
	t := r.t
	t.Helper()
	var listeners []*listener
	pending := map[string][]string{} // terminal → wanted lines of a listener
	for _, c := range b.cmds {
		where := fmt.Sprintf("%s:%d (%s)", b.file, c.line, b.section)
		if m := assignRe.FindStringSubmatch(c.cmd); m != nil {
			f := fieldRe.FindStringSubmatch(c.comment)
			if f == nil {
				t.Fatalf("%s: %s needs a comment naming its field (the \"field\" above)", where, c.cmd)
			}
			v, ok := r.field(f[1])
			if !ok {
				t.Fatalf("%s: no earlier output has %q", where, f[1])
			}
			r.vars[m[1]] = v
			continue
		}
		if m := shellVarRe.FindStringSubmatch(c.cmd); m != nil && !strings.Contains(c.cmd, "\n") || m != nil && strings.HasPrefix(c.cmd, m[0][:len(m[0])-1]+"$(") {
			// A shell variable: its value carries over to later commands.
			cmd := strings.ReplaceAll(c.cmd, "http://127.0.0.1:8080", r.url)
			out, err := r.command(cmd + "\nprintf %s \"$" + m[1] + "\"").Output()
			if err != nil {
				t.Fatalf("%s: %s: %v", where, c.cmd, err)
			}
			r.vars[m[1]] = string(out)
			continue
		}
		if strings.HasPrefix(c.cmd, "go run ./cmd/parley serve") {
			continue // the server this test started
		}
		cmd := strings.ReplaceAll(c.cmd, "http://127.0.0.1:8080", r.url)
		cmd = strings.ReplaceAll(cmd, "go run ./cmd/parley ", `"$PARLEY_BIN" `)
		isHello := strings.HasPrefix(cmd, "go run ./examples/hello")
		if isHello {
			cmd = strings.Replace(cmd, "go run ./examples/hello", `"$HELLO_BIN"`, 1) + ` -server "$PARLEY_URL" -dir "$HELLO_DIR"`
		}
		// Lines for a background terminal wait until the block's end.
		var want []string
		for _, w := range c.want {
			if m := terminalRe.FindStringSubmatch(w); m != nil && !strings.HasPrefix(c.comment, "terminal "+m[1]) {
				pending[m[1]] = append(pending[m[1]], strings.TrimSpace(w[len(m[0]):]))
				continue
			}
			want = append(want, strings.TrimSpace(terminalRe.ReplaceAllString(w, "")))
		}
		if isHello && strings.Contains(c.cmd, `-body ""`) {
			l := &listener{out: &lockedBuffer{}}
			if m := regexp.MustCompile(`terminal (\d+)`).FindStringSubmatch(c.comment); m != nil {
				l.terminal = m[1]
			}
			l.cmd = r.command(cmd)
			l.cmd.Stdout, l.cmd.Stderr = l.out, l.out
			if err := l.cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				l.cmd.Process.Kill()
				l.cmd.Wait()
			})
			listeners = append(listeners, l)
			time.Sleep(time.Second) // it logs in and subscribes before the next terminal sends
			continue
		}
		retry := strings.HasPrefix(c.cmd, "curl ") && !strings.Contains(c.cmd, " -X ") && !strings.Contains(c.cmd, " -d ")
		deadline := time.Now().Add(30 * time.Second)
		for {
			out, err := r.command(cmd).CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %s\n%v\n%s", where, c.cmd, err, out)
			}
			problem := matchWant(want, string(out))
			if problem == "" {
				r.outputs = append(r.outputs, string(out))
				break
			}
			if !retry || time.Now().After(deadline) {
				t.Fatalf("%s: %s\n%s\noutput:\n%s", where, c.cmd, problem, out)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	for _, l := range listeners {
		want := pending[l.terminal]
		delete(pending, l.terminal)
		deadline := time.Now().Add(30 * time.Second)
		for {
			problem := matchWant(want, l.out.String())
			if problem == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: terminal %s (a listening hello): %s\noutput:\n%s", b.section, l.terminal, problem, l.out.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
		l.cmd.Process.Kill()
		l.cmd.Wait()
	}
	for term, w := range pending {
		t.Errorf("%s: lines for terminal %s, which no command opens: %q", b.section, term, w)
	}
}

// command is a bash running cmd in the work directory with the
// walkthrough's variables.
func (r *readmeRun) command(cmd string) *exec.Cmd {
	c := exec.CommandContext(context.Background(), "bash", "-c", "set -o pipefail\n"+cmd)
	c.Dir = r.dir
	c.Env = append(os.Environ(), "PARLEY_E2E_CHILD=1", "PARLEY_FAULTS=",
		"PARLEY_BIN="+os.Args[0], "HELLO_BIN="+r.hello, "HELLO_DIR="+r.helloDir, "PARLEY_URL="+r.url)
	for k, v := range r.vars {
		c.Env = append(c.Env, k+"="+v)
	}
	return c
}

// field is the string value of key in the latest JSON output that has it.
func (r *readmeRun) field(key string) (string, bool) {
	for i := len(r.outputs) - 1; i >= 0; i-- {
		var m map[string]any
		if json.Unmarshal([]byte(r.outputs[i]), &m) != nil {
			continue
		}
		if s, ok := m[key].(string); ok {
			return s, true
		}
	}
	return "", false
}

// matchWant checks out against the wanted lines: one JSON value (its
// lines joined) when the first starts with '{', else each line a pattern
// found in out, in order. It returns what does not match, or "".
func matchWant(want []string, out string) string {
	if len(want) == 0 {
		return ""
	}
	if strings.HasPrefix(want[0], "{") {
		text := strings.Join(want, "")
		exp, err := wantJSON(text)
		if err != nil {
			return fmt.Sprintf("the document's line %q: %v", text, err)
		}
		var got any
		if err := json.NewDecoder(strings.NewReader(out)).Decode(&got); err != nil {
			return fmt.Sprintf("want JSON like %s, output is not JSON: %v", text, err)
		}
		if p := matchJSON("", exp, got); p != "" {
			return "want " + text + ": " + p
		}
		return ""
	}
	rest := out
	for _, w := range want {
		re := textPattern(w)
		loc := re.FindStringIndex(rest)
		if loc == nil {
			return fmt.Sprintf("no output matches %q", w)
		}
		rest = rest[loc[1]:]
	}
	return ""
}

// textPattern is a documented output line as a regexp: … matches anything
// (newlines included), and a run of spaces any run of white space.
func textPattern(w string) *regexp.Regexp {
	parts := strings.Split(w, "…")
	for i, p := range parts {
		parts[i] = spaces.ReplaceAllString(regexp.QuoteMeta(strings.TrimSpace(p)), `\s+`)
	}
	return regexp.MustCompile(`(?s)` + strings.Join(parts, `.*?`))
}

var spaces = regexp.MustCompile(` +`)

// wantJSON turns a documented output line into JSON: the first balanced value
// (what follows it is commentary); a bare … in an object becomes the key
// "…" (more keys allowed), in a list the element "…" (any list).
func wantJSON(text string) (any, error) {
	var b strings.Builder
	var stack []byte
	inStr, esc := false, false
	lastSig := func() byte {
		s := strings.TrimRight(b.String(), " ")
		if s == "" {
			return 0
		}
		return s[len(s)-1]
	}
	rs := []rune(text)
	for i := 0; i < len(rs); i++ {
		c := rs[i]
		if inStr {
			b.WriteRune(c)
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
			continue
		}
		switch c {
		case '"':
			inStr = true
		case '{', '[':
			stack = append(stack, byte(c))
		case '}', ']':
			if len(stack) == 0 {
				return nil, fmt.Errorf("unbalanced %c", c)
			}
			stack = stack[:len(stack)-1]
		case '…':
			if lastSig() == ':' { // a value: any value
				b.WriteString(`"…"`)
				continue
			}
			if l := lastSig(); l != '{' && l != '[' && l != ',' {
				b.WriteByte(',')
			}
			if len(stack) > 0 && stack[len(stack)-1] == '{' {
				b.WriteString(`"…":0,`)
			} else {
				b.WriteString(`"…",`)
			}
			continue
		}
		if (c == '}' || c == ']') && lastSig() == ',' {
			s := strings.TrimRight(b.String(), " ")
			b.Reset()
			b.WriteString(s[:len(s)-1])
		}
		b.WriteRune(c)
		if len(stack) == 0 && (c == '}' || c == ']') {
			break
		}
	}
	var v any
	dec := json.NewDecoder(strings.NewReader(b.String()))
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%s: %v", b.String(), err)
	}
	return v, nil
}

// matchJSON compares got with the document's want at path.
func matchJSON(path string, want, got any) string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: want an object, got %v", orRoot(path), got)
		}
		_, open := w["…"]
		for k, wv := range w {
			if k == "…" {
				continue
			}
			gv, ok := g[k]
			if !ok {
				return fmt.Sprintf("%s: missing", path+"."+k)
			}
			if p := matchJSON(path+"."+k, wv, gv); p != "" {
				return p
			}
		}
		if !open {
			for k := range g {
				if _, ok := w[k]; !ok {
					return fmt.Sprintf("%s: not in the document (add it, or … for more keys)", path+"."+k)
				}
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok {
			return fmt.Sprintf("%s: want a list, got %v", orRoot(path), got)
		}
		if len(w) == 1 && w[0] == "…" {
			return ""
		}
		if len(w) != len(g) {
			return fmt.Sprintf("%s: %d elements, the document shows %d", orRoot(path), len(g), len(w))
		}
		for i := range w {
			if p := matchJSON(fmt.Sprintf("%s[%d]", path, i), w[i], g[i]); p != "" {
				return p
			}
		}
	case string:
		if w == "…" {
			return "" // any value
		}
		g, ok := got.(string)
		if !ok {
			return fmt.Sprintf("%s: want a string like %q, got %v", orRoot(path), w, got)
		}
		if !strings.Contains(w, "…") {
			if g != w {
				return fmt.Sprintf("%s: %q, the document says %q", orRoot(path), g, w)
			}
			return ""
		}
		re := regexp.MustCompile(`(?s)^` + strings.ReplaceAll(regexp.QuoteMeta(w), "…", ".*") + `$`)
		if !re.MatchString(g) {
			return fmt.Sprintf("%s: %q does not match the document's %q", orRoot(path), g, w)
		}
	default:
		if fmt.Sprint(want) != fmt.Sprint(got) {
			return fmt.Sprintf("%s: %v, the document says %v", orRoot(path), got, want)
		}
	}
	return ""
}

func orRoot(path string) string {
	if path == "" {
		return "the reply"
	}
	return path
}

// TestREADMEMatcher pins how TestREADME reads the documents' output lines.
func TestREADMEMatcher(t *testing.T) {
	tests := []struct {
		want []string
		out  string
		ok   bool
	}{
		{[]string{`{"conv":"c-team","seq":5,"mid":"…","dup":false,"epoch":1}       (201; again: 200, "dup":true)`}, `{"conv":"c-team","seq":5,"mid":"x","dup":false,"epoch":1}`, true},
		{[]string{`{"conv":"c-team","seq":4,"mid":"…","dup":false,"epoch":1}`}, `{"conv":"c-team","seq":5,"mid":"x","dup":false,"epoch":1}`, false}, // a seq that does not chain
		{[]string{`{"conv":"c-team","seq":5,"mid":"…"}`}, `{"conv":"c-team","seq":5,"mid":"x","dup":false}`, false},                                 // a key the document leaves out
		{[]string{`{"conv":"c-team","seq":5,…}`}, `{"conv":"c-team","seq":5,"mid":"x","dup":false}`, true},                                          // … allows more keys
		{[]string{`{"job_id":"…","url":"/download/…?u=ben&exp=…"}`}, `{"job_id":"j","url":"/download/j?u=ben&exp=1"}`, true},
		{[]string{`{"job_id":"…","url":"/download/…?u=ben&exp=…"}`}, `{"job_id":"j","url":"/download/j?u=ben\u0026exp=1"}`, true}, // decoded JSON: same string
		{[]string{`{"events":[{… "seq":5 …}],"head":5}`}, `{"events":[{"seq":5,"body":"b"}],"head":5}`, true},
		{[]string{`{"events":[{… "seq":5 …}],"head":5}`}, `{"events":[{"seq":4},{"seq":5}],"head":5}`, false},
		{[]string{`{"entries":[{"id":…,"at":"…"}]}`}, `{"entries":[{"id":2,"at":"t"}]}`, true},
		{[]string{`{"a":1,`, `  "b":2}`}, `{"a":1,"b":2}`, true}, // a value over two lines
		{[]string{`sent c-team #4 (dup=false)`}, "sent c-team #4 (dup=false)\n", true},
		{[]string{`c-team #1 ana joined … c-team #4 ben: hi ana`}, "c-team #1 ana joined\nc-team #2 ben joined\nc-team #4 ben: hi ana\n", true},
		{[]string{`c-team #1 ana joined … c-team #4 ben: hi ana`}, "c-team #1 ana joined\nc-team #5 ben: hi ana\n", false},
		{[]string{`export   [===] 100% 1/1 shards`, `wrote x (… bytes, sha256 …)`}, "\rexport   [===] 100% 1/1 shards\nwrote x (12 bytes, sha256 ab)\n", true},
	}
	for _, tt := range tests {
		p := matchWant(tt.want, tt.out)
		if (p == "") != tt.ok {
			t.Errorf("matchWant(%q, %q) = %q, want ok=%v", tt.want, tt.out, p, tt.ok)
		}
	}
}
