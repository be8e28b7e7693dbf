package cpucap_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley/cpucap"
)

// newGroup makes a group for the test, or skips where this machine lets
// no process create one (not root, no cpu controller).
func newGroup(t *testing.T, cores float64) *cpucap.Group {
	t.Helper()
	name := fmt.Sprintf("parley-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	g, err := cpucap.New(name, cores)
	if err != nil {
		if os.Geteuid() != 0 {
			t.Skipf("not root: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Remove(); err != nil {
			t.Error(err)
		}
	})
	return g
}

// TestGroup: a process moved into a group is in it (the kernel says so in
// /proc/PID/cgroup), the quota is the one asked for, a busy process in a
// quarter-core group is throttled, and the group goes away once its
// process ended.
func TestGroup(t *testing.T) {
	g := newGroup(t, 0.25)
	quota := readQuota(t, g)
	if quota != "25000 100000" {
		t.Errorf("quota %q, want 25000 µs per 100000 µs", quota)
	}
	// A busy loop: the shell's own, no other program needed.
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "/"+filepath.Base(g.Dir())+"\n") {
		t.Fatalf("/proc/PID/cgroup does not name the group:\n%s", b)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		periods, throttled, err := g.Throttled()
		if err != nil {
			t.Fatal(err)
		}
		if throttled > 0 && periods >= throttled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a busy loop under a quarter core was never throttled (%d periods)", periods)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
}

// readQuota returns the group's quota as "QUOTA PERIOD" in µs, on either
// cgroup version.
func readQuota(t *testing.T, g *cpucap.Group) string {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(g.Dir(), "cpu.max")); err == nil {
		return strings.TrimSpace(string(b))
	}
	q, err1 := os.ReadFile(filepath.Join(g.Dir(), "cpu.cfs_quota_us"))
	p, err2 := os.ReadFile(filepath.Join(g.Dir(), "cpu.cfs_period_us"))
	if err1 != nil || err2 != nil {
		t.Fatalf("no quota files in %s: %v %v", g.Dir(), err1, err2)
	}
	return strings.TrimSpace(string(q)) + " " + strings.TrimSpace(string(p))
}

// TestNewRefuses: bad names and quotas are refused before anything is
// created.
func TestNewRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cores float64
	}{
		{"", 1},
		{"a/b", 1},
		{"..", 1},
		{".hidden", 1},
		{"ok", 0},
		{"ok", 0.001},
		{"ok", -1},
	} {
		if g, err := cpucap.New(tc.name, tc.cores); err == nil {
			g.Remove()
			t.Errorf("New(%q, %g) accepted", tc.name, tc.cores)
		}
	}
}
