package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parleychat/parley"
)

// TestExportStateFile: `parley export` keeps OUT.parley-export only while
// a rerun could resume with it. A terminal failure (login refused, a scope
// the server refuses, a job revoked while it waits) leaves no state file
// and no partial file; an interrupted run keeps its state.
func TestExportStateFile(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		s := b.store(t)
		seed(t, s)
		fill(t, s, "g1", 3)
		// No workers: jobs stay queued until the test acts on them.
		p := serveEnv(t, nil, "--db", b.db, "--data-dir", b.dir, "--export-workers", "0")
		dir := t.TempDir()
		out := filepath.Join(dir, "ben.jsonl.gz")
		state := out + ".parley-export"
		args := func(scope string) []string {
			return []string{"export", "--server", p.http, "--login", "ben", "--scope", scope, "--out", out, "--password-stdin", "--poll", "50ms"}
		}
		gone := func(what string) {
			t.Helper()
			for _, f := range []string{state, out + ".part", state + ".tmp"} {
				if _, err := os.Stat(f); !os.IsNotExist(err) {
					t.Errorf("%s: %s left behind (%v)", what, filepath.Base(f), err)
				}
			}
		}

		// Refused login.
		if _, stderr, err := cliRun(t, "wrong-password\n", args("all")...); err == nil || !strings.Contains(stderr, "UNAUTHENTICATED") {
			t.Errorf("wrong password: %v %q", err, stderr)
		}
		gone("refused login")

		// A scope the server refuses (NOT_MEMBER).
		if _, stderr, err := cliRun(t, "password-ben\n", args("conv:nope")...); err == nil || !strings.Contains(stderr, "NOT_MEMBER") {
			t.Errorf("unknown conversation: %v %q", err, stderr)
		}
		gone("refused scope")

		// Interrupted while the job is queued: the state stays, with the job.
		cmd := cliStart(t, "password-ben\n", args("all")...)
		job := waitStateJob(t, state)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		if got := readState(t, state); got.Job != job {
			t.Fatalf("after an interruption the state holds job %q, want %q", got.Job, job)
		}

		// The rerun finds the same job; an operator revokes it while the
		// client waits: nothing to resume, nothing left behind.
		var stderr bytes.Buffer
		cmd = cliCommand("password-ben\n", args("all")...)
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitStateJob(t, state)
		if _, err := s.RevokeExport(context.Background(), job); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err == nil {
				t.Fatalf("export of a revoked job exited 0: %s", stderr.String())
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Fatal("parley export still waiting 30s after the revoke")
		}
		gone("revoked job")
		if j, err := s.ExportJob(context.Background(), job); err != nil || j.State != parley.ExportRevoked {
			t.Fatalf("job %s: %+v %v (the rerun made another job?)", job, j, err)
		}
	})
}

// cliRun runs this binary as the parley command and returns its output and
// exit error.
func cliRun(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := cliCommand(stdin, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// cliStart starts this binary as the parley command; the test owns it.
func cliStart(t *testing.T, stdin string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := cliCommand(stdin, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd
}

func cliCommand(stdin string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "PARLEY_E2E_CHILD=1", "PARLEY_FAULTS=")
	cmd.Stdin = strings.NewReader(stdin)
	return cmd
}

func readState(t *testing.T, name string) exportState {
	t.Helper()
	var st exportState
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return st
}

// waitStateJob waits until the state file names a job.
func waitStateJob(t *testing.T, name string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var st exportState
		if b, err := os.ReadFile(name); err == nil && json.Unmarshal(b, &st) == nil && st.Job != "" {
			return st.Job
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s names no job after 30s", name)
	return ""
}
