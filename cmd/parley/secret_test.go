package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/secretkey"
)

// TestSecretKeyFile: serve creates DATA-DIR/secret.key (mode 0600) when no
// key file is named, seals with it, and a later start with that data
// directory opens the store again; a gateway with another key refuses to
// start, naming --secret-key-file, on both stores — a real process exiting
// 1 and run() returning ErrSecretKey; the tools (`parley user`) with no
// key on a sealed database are refused the same way, never creating a key.
func TestSecretKeyFile(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		dir := t.TempDir()
		args := []string{"--db", b.db, "--data-dir", dir, "--export-dir", filepath.Join(dir, "exports"), "--files-dir", filepath.Join(dir, "files")}
		serveOnce(t, args...) // no PARLEY_SECRET_KEY_FILE: in-process getenv returns ""
		key := filepath.Join(dir, "secret.key")
		fi, err := os.Stat(key)
		if err != nil {
			t.Fatalf("serve created no DATA-DIR/secret.key: %v", err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("secret.key mode %o, want 600", fi.Mode().Perm())
		}
		serveOnce(t, args...) // the same key opens it again

		other := filepath.Join(t.TempDir(), "other.key")
		if err := os.WriteFile(other, secretkey.Generate(), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var out lockedBuffer
		err = run(ctx, append([]string{"parley", "serve", "--addr", "127.0.0.1:0", "--secret-key-file", other}, args...),
			func(string) string { return "" }, strings.NewReader(""), &out, &out)
		if !errors.Is(err, parley.ErrSecretKey) || !strings.Contains(err.Error(), "--secret-key-file") {
			t.Errorf("run serve with another key: %v; want ErrSecretKey naming --secret-key-file\n%s", err, out.String())
		}
		if strings.Contains(out.String(), "listening on") {
			t.Error("the gateway with another key listened")
		}

		cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
		cmd.Dir = t.TempDir()
		cmd.Env = append(os.Environ(), "PARLEY_E2E_CHILD=1", "PARLEY_FAULTS=", "PARLEY_SECRET_KEY_FILE="+other)
		got, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(got), "--secret-key-file") || strings.Contains(string(got), "listening on") {
			t.Errorf("parley serve with another key: %v, output %q; want exit 1 naming --secret-key-file before listening", err, got)
		}

		// A tool with no key file (none at its data directory's path) is
		// refused too, and makes none.
		toolDir := t.TempDir()
		_, err = runIn(t, map[string]string{"PARLEY_SECRET_KEY_FILE": ""}, "", "user", "list", "--db", b.db, "--data-dir", toolDir)
		if !errors.Is(err, parley.ErrSecretKey) || !strings.Contains(err.Error(), "--secret-key-file") {
			t.Errorf("user list without the key: %v; want ErrSecretKey naming --secret-key-file", err)
		}
		if _, err := os.Stat(filepath.Join(toolDir, "secret.key")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("user list made a key file: %v", err)
		}
		_, err = runIn(t, map[string]string{"PARLEY_SECRET_KEY_FILE": key}, "", "user", "list", "--db", b.db)
		if err != nil {
			t.Errorf("user list with the key: %v", err)
		}
	})
}
