package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeBusRefused: a --bus that cannot work with the store is refused
// before anything opens, with exit status 2 and one line saying why.
func TestServeBusRefused(t *testing.T) {
	pg := "postgres://postgres@127.0.0.1:1/none?sslmode=disable" // never reached: the check comes first
	for _, c := range []struct {
		name, db, bus, stderr string
	}{
		{"nats with sqlite", "", "nats://127.0.0.1:4222", "a NATS bus joins the gateways of one PostgreSQL store"},
		{"listen/notify with sqlite", "", "postgres", "LISTEN/NOTIFY needs a PostgreSQL store"},
		{"unknown scheme", pg, "redis://127.0.0.1:6379", `want empty, inprocess, postgres or nats://HOST:PORT`},
		{"second server not nats", pg, "nats://127.0.0.1:4222,tls://127.0.0.1:4223", "want nats://HOST:PORT"},
		{"nats prefix with a dot", pg, "nats://127.0.0.1:4222?prefix=a.b", `prefix "a.b" must match`},
		{"nats unknown parameter", pg, "nats://127.0.0.1:4222?shards=4", `unknown parameter "shards"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"serve", "--addr", "127.0.0.1:0", "--data-dir", dir, "--bus", c.bus}
			if c.db != "" {
				args = append(args, "--db", c.db, "--export-dir", filepath.Join(dir, "exports"), "--files-dir", filepath.Join(dir, "files"))
			}
			cmd := exec.Command(os.Args[0], args...)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "PARLEY_E2E_CHILD=1")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Fatalf("parley %q: %v, want exit status 2; stderr %q", args, err, stderr.String())
			}
			if !strings.Contains(stderr.String(), c.stderr) || strings.Count(strings.TrimSpace(stderr.String()), "\n") > 0 {
				t.Errorf("stderr %q, want one line holding %q", stderr.String(), c.stderr)
			}
			if stdout.Len() > 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
		})
	}
}
