package main

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/postgres/pgtest"
)

// runIn runs the real run() in-process as a shell would and returns its
// stdout and error.
func runIn(t *testing.T, env map[string]string, stdin string, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	getenv := func(k string) string {
		if v, ok := env[k]; ok || k != "PARLEY_SECRET_KEY_FILE" {
			return v
		}
		return testKeyFile() // the servers' key (serveEnv)
	}
	err := run(context.Background(), append([]string{"parley"}, args...), getenv, strings.NewReader(stdin), &out, &errOut)
	return out.String(), err
}

// flagEntry matches one flag of a command's help: its name line, then its
// meaning with its default and environment variable.
var flagEntry = regexp.MustCompile(`(?m)^  --([a-z0-9-]+)( [a-z0-9]+)?\n        (.+) \(default (.*); (?:env (PARLEY_[A-Z0-9_]+)|flag only)\)$`)

// TestHelp: every command's --help (and -h, and parley help COMMAND)
// exits 0 and prints to stdout its usage and every flag with its
// meaning, default and environment variable; the defaults are the real
// ones. Before, --help was "flag: help requested" with exit status 2.
func TestHelp(t *testing.T) {
	tests := []struct {
		args     []string
		usage    string            // the first line starts with it
		defaults map[string]string // some flags and their shown defaults
		env      string            // the environment variable of the first default's flag
	}{
		{[]string{"serve", "--help"}, "usage: parley serve", map[string]string{"addr": `"127.0.0.1:8080"`, "data-dir": `"./parley-data"`, "demo": "false", "drain-timeout": "15s", "db": `""`, "token-idle": parley.DefaultTokenIdle.String()}, "PARLEY_ADDR"},
		{[]string{"serve", "-h"}, "usage: parley serve", map[string]string{"addr": `"127.0.0.1:8080"`}, "PARLEY_ADDR"},
		{[]string{"help", "serve"}, "usage: parley serve", map[string]string{"addr": `"127.0.0.1:8080"`}, "PARLEY_ADDR"},
		{[]string{"migrate", "--help"}, "usage: parley migrate", map[string]string{"db": `""`}, "PARLEY_DB"},
		{[]string{"export", "--help"}, "usage: parley export", map[string]string{"scope": `"all"`, "retries": "8", "poll": "500ms"}, "PARLEY_SCOPE"},
		{[]string{"bench", "--help"}, "usage: parley bench", map[string]string{"users": "100", "groups": `"10,100,1000"`, "directs": "true", "rate": "50"}, "PARLEY_BENCH_USERS"},
		{[]string{"bench", "help"}, "usage: parley bench", map[string]string{"users": "100"}, "PARLEY_BENCH_USERS"},
		{[]string{"user", "add", "--help"}, "usage: parley user add ID", map[string]string{"email": `""`, "admin": "false", "password-stdin": "false"}, "PARLEY_EMAIL"},
		{[]string{"user", "add", "dan", "--help"}, "usage: parley user add ID", map[string]string{"admin": "false"}, "PARLEY_ADMIN"},
		{[]string{"user", "disable", "--help"}, "usage: parley user disable ID", map[string]string{"db": `""`}, "PARLEY_DB"},
		{[]string{"user", "enable", "--help"}, "usage: parley user enable ID", map[string]string{"db": `""`}, "PARLEY_DB"},
		{[]string{"user", "passwd", "--help"}, "usage: parley user passwd ID", map[string]string{"password-stdin": "false"}, "PARLEY_PASSWORD_STDIN"},
		{[]string{"user", "list", "--help"}, "usage: parley user list", map[string]string{"data-dir": `"./parley-data"`}, "PARLEY_DATA_DIR"},
		{[]string{"conv", "list", "--help"}, "usage: parley conv list", map[string]string{"db": `""`}, "PARLEY_DB"},
		{[]string{"conv", "show", "--help"}, "usage: parley conv show ID", map[string]string{"db": `""`}, "PARLEY_DB"},
		{[]string{"help", "conv", "show"}, "usage: parley conv show ID", map[string]string{"db": `""`}, "PARLEY_DB"},
		{[]string{"search", "rebuild", "--help"}, "usage: parley search rebuild", map[string]string{"conv": `""`, "db": `""`}, "PARLEY_CONV"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, "_"), func(t *testing.T) {
			out, err := runIn(t, nil, "", tc.args...)
			if err != nil {
				t.Fatalf("parley %q: %v, want exit status 0", tc.args, err)
			}
			if !strings.HasPrefix(out, tc.usage) {
				t.Fatalf("parley %q printed:\n%s\nwant it to start with %q", tc.args, out, tc.usage)
			}
			// Every "--flag" line of the help is a complete entry: the
			// count of flag lines equals the count of well-formed entries.
			entries := flagEntry.FindAllStringSubmatch(out, -1)
			if lines := regexp.MustCompile(`(?m)^  --`).FindAllString(out, -1); len(entries) == 0 || len(entries) != len(lines) {
				t.Fatalf("%d flag lines, %d well-formed entries (name, meaning, default, env) in:\n%s", len(lines), len(entries), out)
			}
			prefix := "PARLEY_"
			if strings.HasPrefix(tc.env, "PARLEY_BENCH_") {
				prefix = "PARLEY_BENCH_"
			}
			shown := map[string][]string{}
			for _, e := range entries {
				if strings.TrimSpace(e[3]) == "" {
					t.Errorf("--%s has no meaning", e[1])
				}
				if want := prefix + strings.ToUpper(strings.ReplaceAll(e[1], "-", "_")); e[5] != want && !(flagOnly[e[1]] && e[5] == "") {
					t.Errorf("--%s: env %s, want %s", e[1], e[5], want)
				}
				shown[e[1]] = e[1:]
			}
			for name, def := range tc.defaults {
				e, ok := shown[name]
				if !ok {
					t.Errorf("--%s missing from:\n%s", name, out)
					continue
				}
				if e[3] != def {
					t.Errorf("--%s: default %s, want %s", name, e[3], def)
				}
			}
			if !strings.Contains(out, "env "+tc.env+")") {
				t.Errorf("no env %s in:\n%s", tc.env, out)
			}
		})
	}

	// The groups and the whole program: their commands, exit status 0.
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"usage:", "parley serve", "parley user passwd", "parley conv show", "parley version", "Exit status"}},
		{[]string{"-h"}, []string{"parley serve"}},
		{[]string{"help"}, []string{"parley serve"}},
		{[]string{"user", "--help"}, []string{"usage: parley user", "add ID", "disable ID", "enable ID", "passwd ID", "list", "cli:"}},
		{[]string{"user", "help"}, []string{"usage: parley user"}},
		{[]string{"conv", "--help"}, []string{"usage: parley conv", "list", "show ID"}},
		{[]string{"search", "--help"}, []string{"usage: parley search", "rebuild [--conv ID]", "cli:"}},
		{[]string{"--help"}, []string{"parley search rebuild"}},
		{[]string{"version", "--help"}, []string{"usage: parley version"}},
	} {
		out, err := runIn(t, nil, "", tc.args...)
		if err != nil {
			t.Errorf("parley %q: %v, want exit status 0", tc.args, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("parley %q: no %q in:\n%s", tc.args, w, out)
			}
		}
	}
}

// TestHelpProcess: as a process, --help exits 0 with the help on stdout
// and nothing on stderr; an unknown command or flag exits 2 with one line
// on stderr and nothing on stdout.
func TestHelpProcess(t *testing.T) {
	tests := []struct {
		args       []string
		code       int
		stdoutHas  string
		stderrLine string // a substring of the one stderr line; "" for no stderr
	}{
		{[]string{"serve", "--help"}, 0, "--addr string", ""},
		{[]string{"user", "passwd", "-h"}, 0, "--password-stdin", ""},
		{[]string{"--help"}, 0, "parley conv list", ""},
		{[]string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{[]string{"serve", "--no-such-flag"}, 2, "", "flag provided but not defined: -no-such-flag (see parley serve --help)"},
		{[]string{"user", "passwd"}, 2, "", "a user id is required"},
		{[]string{"conv", "show"}, 2, "", "a conversation id is required"},
		{[]string{"conv", "drop", "x"}, 2, "", `unknown command "drop"`},
		{[]string{"version", "extra"}, 2, "", `unexpected argument "extra"`},
	}
	for _, tc := range tests {
		cmd := exec.Command(os.Args[0], tc.args...)
		cmd.Dir = t.TempDir()
		cmd.Env = append(os.Environ(), "PARLEY_E2E_CHILD=1")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.code {
			t.Errorf("parley %q: exit status %d, want %d; stderr %q", tc.args, code, tc.code, stderr.String())
		}
		if tc.stdoutHas == "" && stdout.Len() > 0 || !strings.Contains(stdout.String(), tc.stdoutHas) {
			t.Errorf("parley %q: stdout %q, want it to hold %q", tc.args, stdout.String(), tc.stdoutHas)
		}
		switch lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n"); {
		case tc.stderrLine == "" && stderr.Len() > 0:
			t.Errorf("parley %q: stderr %q, want none", tc.args, stderr.String())
		case tc.stderrLine != "" && (len(lines) != 1 || !strings.Contains(lines[0], tc.stderrLine)):
			t.Errorf("parley %q: stderr %q, want one line with %q", tc.args, stderr.String(), tc.stderrLine)
		}
	}
}

// TestVersion: parley version prints the module, its version and the Go
// version (the test binary records no VCS revision and says so).
func TestVersion(t *testing.T) {
	out, err := runIn(t, nil, "", "version")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"parley ", "module github.com/parleychat/parley\n", "revision ", "go " + runtime.Version() + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("version: no %q in:\n%s", want, out)
		}
	}
}

// TestVersionBuilt: a binary built by go build in a git checkout prints
// the commit it was built from and whether the tree was modified. (The
// machine's GOFLAGS may say -buildvcs=false; the build asks for it.)
// Skipped in a git worktree, where the go command records no revision.
func TestVersionBuilt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the binary with")
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skip("not a git checkout")
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skip("not a git checkout")
	}
	if fi, err := os.Stat(filepath.Join(strings.TrimSpace(string(top)), ".git")); err != nil || !fi.IsDir() {
		t.Skip("a git worktree (.git is a file): go build records VCS information only in a checkout with a .git directory")
	}
	bin := filepath.Join(t.TempDir(), "parley")
	build := exec.Command(goBin, "build", "-buildvcs=true", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("parley version: %v", err)
	}
	for _, want := range []string{
		"revision " + strings.TrimSpace(string(head)) + "\n",
		"go " + runtime.Version() + "\n",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("parley version: no %q in:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`(?m)^modified (true|false)$`).Match(out) {
		t.Errorf("parley version: no modified line in:\n%s", out)
	}
}

// TestUserConvCommands: parley user add/disable/enable/passwd change the
// store and each writes an audit entry, pending before and finished
// after, with the operator "cli:" + the OS user and the password
// redacted; user list and conv list/show read the store; refusals are
// audited with their code; bad input is exit status 2 and changes
// nothing. Both stores.
func TestUserConvCommands(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		env := map[string]string{"PARLEY_DB": b.db, "PARLEY_DATA_DIR": b.dir, "SUDO_USER": "alice"}
		cli := func(stdin string, args ...string) string {
			t.Helper()
			out, err := runIn(t, env, stdin, args...)
			if err != nil {
				t.Fatalf("parley %q: %v", args, err)
			}
			return out
		}
		cli("first-password\n", "user", "add", "dan", "--email", "dan@example.com", "--password-stdin")
		cli("", "user", "disable", "dan")
		cli("", "user", "enable", "dan")
		if out := cli("second-password\n", "user", "passwd", "dan", "--password-stdin"); !strings.Contains(out, "set the password of user dan") {
			t.Errorf("passwd said %q", out)
		}
		if _, err := runIn(t, env, "", "user", "enable", "ghost"); parley.ErrorCode(err) != parley.CodeNotFound {
			t.Errorf("enable ghost: %v, want NOT_FOUND", err)
		}
		// Bad input: a usage error or a refused password, nothing audited.
		for _, bad := range []struct {
			stdin string
			args  []string
		}{
			{"short7!\n", []string{"user", "passwd", "dan", "--password-stdin"}},
			{"long-enough-pw\n", []string{"user", "passwd", "dan"}},
			{"", []string{"user", "list", "extra"}},
		} {
			if _, err := runIn(t, env, bad.stdin, bad.args...); err == nil {
				t.Errorf("parley %q: no error", bad.args)
			}
		}

		s := b.store(t)
		if _, err := s.Login(ctx, parley.LoginRequest{Login: "dan", Password: "first-password", DeviceID: "d", InstallID: "i"}); parley.ErrorCode(err) != parley.CodeUnauthenticated {
			t.Errorf("login with the old password: %v, want UNAUTHENTICATED", err)
		}
		if _, err := s.Login(ctx, parley.LoginRequest{Login: "dan", Password: "second-password", DeviceID: "d", InstallID: "i"}); err != nil {
			t.Errorf("login with the new password: %v", err)
		}

		entries, err := s.Audit(ctx, parley.AuditQuery{})
		if err != nil {
			t.Fatal(err)
		}
		op := cliOperator(func(k string) string { return os.Getenv(k) })
		if !strings.HasPrefix(op, "cli:") || op == "cli:" {
			t.Fatalf("operator %q", op)
		}
		type entry struct{ Operator, Action, Target, Outcome string }
		var got []entry
		for i := len(entries) - 1; i >= 0; i-- { // oldest first
			e := entries[i]
			got = append(got, entry{e.Operator, e.Action, e.Target, e.Outcome})
			if strings.Contains(e.Params, "password\"") && !strings.Contains(e.Params, `"password":"[REDACTED]"`) || strings.Contains(e.Params, "-password") {
				t.Errorf("entry %d params %s: the password is not redacted", e.ID, e.Params)
			}
			if !strings.Contains(e.Params, `"sudo_user":"alice"`) {
				t.Errorf("entry %d params %s: no sudo_user", e.ID, e.Params)
			}
		}
		want := []entry{
			{op, "user.create", "dan", "ok"},
			{op, "user.disable", "dan", "ok"},
			{op, "user.enable", "dan", "ok"},
			{op, "user.passwd", "dan", "ok"},
			{op, "user.enable", "ghost", "NOT_FOUND"},
		}
		if len(got) != len(want) {
			t.Fatalf("audit log %+v, want %+v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("audit entry %d: %+v, want %+v", i, got[i], want[i])
			}
		}

		// The listings read the store.
		if _, err := s.CreateUser(ctx, parley.NewUser{ID: "eve", Role: parley.RoleAdmin}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateConversation(ctx, parley.Principal{User: "eve"}, parley.NewConversation{ID: "ops", Kind: parley.KindGroup, Title: "Ops room", Members: []string{"dan"}}); err != nil {
			t.Fatal(err)
		}
		if err := s.SetRetention(ctx, "ops", parley.Retention{MaxAge: 720 * time.Hour, KeepLast: 100}); err != nil {
			t.Fatal(err)
		}
		if err := s.SetUserDisabled(ctx, "eve", true); err != nil {
			t.Fatal(err)
		}
		rows := func(out string) [][]string {
			var r [][]string
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				r = append(r, strings.Fields(l))
			}
			return r
		}
		users := rows(cli("", "user", "list"))
		if len(users) != 3 || strings.Join(users[0], " ") != "ID ROLE DISABLED EMAIL CREATED" ||
			strings.Join(users[1][:4], " ") != "dan user no dan@example.com" || strings.Join(users[2][:4], " ") != "eve admin yes -" {
			t.Errorf("user list:\n%v", users)
		}
		convs := rows(cli("", "conv", "list"))
		if len(convs) != 2 || strings.Join(convs[0], " ") != "ID KIND MEMBERS HEAD RETENTION TITLE" ||
			strings.Join(convs[1], " ") != "ops group 2 2 max_age 720h0m0s, keep_last 100 Ops room" {
			t.Errorf("conv list:\n%v", convs)
		}
		show := cli("", "conv", "show", "ops")
		for _, want := range []string{"kind       group\n", "title      Ops room\n", "owner      eve\n", "members    2: dan, eve\n", "head       2\n", "retention  max_age 720h0m0s, keep_last 100\n"} {
			if !strings.Contains(show, want) {
				t.Errorf("conv show: no %q in:\n%s", want, show)
			}
		}
		if _, err := runIn(t, env, "", "conv", "show", "nothing"); parley.ErrorCode(err) != parley.CodeNotFound {
			t.Errorf("conv show of a missing conversation: %v, want NOT_FOUND", err)
		}
		if after, _ := s.Audit(ctx, parley.AuditQuery{}); len(after) != len(entries) {
			t.Errorf("the reads wrote %d audit entries", len(after)-len(entries))
		}
	})
}

// lockedBuffer is a bytes.Buffer that run's goroutine writes while the
// test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// serveOnce runs serve in-process until it prints its address, stops it
// (as SIGTERM would) and returns what it printed on stdout.
func serveOnce(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"parley", "serve", "--addr", "127.0.0.1:0"}, args...), func(string) string { return "" }, strings.NewReader(""), &stdout, &stderr)
	}()
	deadline := time.After(60 * time.Second)
	for !strings.Contains(stdout.String(), "listening on http://") {
		select {
		case err := <-done:
			t.Fatalf("serve stopped: %v\n%s", err, stderr.String())
		case <-deadline:
			t.Fatalf("serve printed no address\n%s", stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v\n%s", err, stderr.String())
	}
	return stdout.String()
}

// TestServeDemoOutput: serve --demo says what it created (users, password,
// group) and where the data lives, and a second start says it is already
// there; the "listening on" line is unchanged.
func TestServeDemoOutput(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	listening := regexp.MustCompile(`(?m)^listening on http://127\.0\.0\.1:[0-9]+$`)
	for round, state := range []string{"created", "already there, left as it is"} {
		out := serveOnce(t, "--demo", "--data-dir", dir)
		want := strings.Join([]string{
			"demo: user ana (password parley-demo, admin): " + state,
			"demo: user ben (password parley-demo): " + state,
			"demo: user cy (password parley-demo): " + state,
			`demo: group c-team "C team" of ana, ben, cy: ` + state,
			"demo: data in sqlite:" + filepath.Join(dir, "parley.db") + " (store), " + dir + " (data directory)",
		}, "\n") + "\n"
		if !strings.HasPrefix(out, want) || !listening.MatchString(out) {
			t.Errorf("round %d: serve --demo printed:\n%s\nwant:\n%slistening on http://127.0.0.1:PORT", round, out, want)
		}
	}
	// Without --demo, nothing about it.
	if out := serveOnce(t, "--data-dir", dir); strings.Contains(out, "demo") {
		t.Errorf("serve without --demo printed:\n%s", out)
	}
}

// TestServeDemoPostgresNoErrors: a second start with --demo on PostgreSQL
// makes the database roll back no more transactions than a start without
// it: the seeding looks before it inserts, so no duplicate-key ERROR
// reaches the server's log (each such error is a rolled-back transaction
// in pg_stat_database). The DSN's
// password is redacted in what serve prints.
func TestServeDemoPostgresNoErrors(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := context.Background()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Del("pool_max_conns")
	u.RawQuery = q.Encode()
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// rollbacks waits until only this connection is left on the database
	// (a backend reports its statistics as it exits) and returns the
	// database's count of rolled-back transactions.
	rollbacks := func() int64 {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			var n, backends int64
			if err := conn.QueryRow(ctx, `SELECT xact_rollback, numbackends FROM pg_stat_database WHERE datname = current_database()`).Scan(&n, &backends); err != nil {
				t.Fatal(err)
			}
			if backends == 1 {
				return n
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d connections still open on the test database", backends)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	args := []string{"--db", dsn, "--data-dir", t.TempDir(), "--export-dir", t.TempDir(), "--files-dir", t.TempDir()}
	if out := serveOnce(t, append(args, "--demo")...); !strings.Contains(out, "demo: user ben (password parley-demo): created") {
		t.Fatalf("first start printed:\n%s", out)
	}
	// A start and stop of the server on its own rolls back transactions
	// of its own (none an error of the seeding): the baseline.
	before := rollbacks()
	serveOnce(t, args...)
	base := rollbacks() - before
	before = rollbacks()
	out := serveOnce(t, append(args, "--demo")...)
	if got := rollbacks() - before; got > base {
		t.Errorf("the second start with --demo rolled back %d transactions, a start without it %d: the seeding's inserts failed (duplicate-key errors in the PostgreSQL log)", got, base)
	}
	if !strings.Contains(out, `demo: group c-team "C team" of ana, ben, cy: already there, left as it is`) {
		t.Errorf("second start printed:\n%s", out)
	}
	if pw, ok := u.User.Password(); ok && pw != "" && strings.Contains(out, pw) {
		t.Errorf("serve printed the DSN's password:\n%s", out)
	}
}

// TestReadmeServeHelp: the tour (docs/tour.md), which the README's quick
// start leads to, shows the start of the real `parley serve --help`, right
// after its first two commands (serve --demo and the login).
func TestReadmeServeHelp(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "docs", "tour.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	const marker = "<!-- the start of the real output; cmd/parley TestReadmeServeHelp checks it -->\n```text\n"
	i := strings.Index(text, marker)
	if i < 0 {
		t.Fatal("docs/tour.md has no serve --help block")
	}
	// Nothing but prose between the quick start's login and the block.
	login := strings.Index(text, "/api/login")
	if login < 0 || login > i || strings.Count(text[login:i], "```") != 1 {
		t.Errorf("the serve --help block is not the first block after the tour's login command")
	}
	block := text[i+len(marker):]
	block = block[:strings.Index(block, "```")]
	shown := strings.Split(strings.TrimSuffix(block, "\n"), "\n")
	if shown[len(shown)-1] == "  …" {
		shown = shown[:len(shown)-1]
	}
	out, err := runIn(t, nil, "", "serve", "--help")
	if err != nil {
		t.Fatal(err)
	}
	real := strings.Split(out, "\n")
	if len(shown) < 10 || len(shown) > len(real) {
		t.Fatalf("docs/tour.md shows %d lines of serve --help, which has %d", len(shown), len(real))
	}
	for n, line := range shown {
		if line != real[n] {
			t.Errorf("docs/tour.md serve --help line %d:\n  %q\nthe real output:\n  %q", n+1, line, real[n])
		}
	}
}
