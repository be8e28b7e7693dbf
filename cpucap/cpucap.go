// Package cpucap confines processes to a share of the CPU, each group in
// a Linux control group of its own with a CPU quota, so a benchmark can
// make the processes it measures (gateways) the bottleneck instead of
// what they share a machine with (the database, the bus, the load).
//
// It writes the kernel's cgroup files directly: cgroup v1's cpu
// controller (cpu.cfs_quota_us over cpu.cfs_period_us) where it is
// mounted, else cgroup v2's cpu.max. It needs the rights to create a
// group there (root, or a delegated subtree); New says so when it cannot.
package cpucap

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Roots are where the cpu controller is looked for: cgroup v1's cpu
// hierarchy first, then the v2 unified hierarchy.
var (
	rootV1 = "/sys/fs/cgroup/cpu"
	rootV2 = "/sys/fs/cgroup"
)

// period is the quota's accounting period: 100 ms, the kernel's default.
const period = 100_000 // µs

// Group is a control group with a CPU quota.
type Group struct {
	dir string
	v2  bool
}

// New creates the group name (a single path element) allowed cores CPUs
// (0.25 is a quarter of one core per 100 ms period; at least 0.01). A
// group of that name left by an earlier run is reused with the new quota.
func New(name string, cores float64) (*Group, error) {
	if name == "" || name != filepath.Base(name) || strings.HasPrefix(name, ".") {
		return nil, fmt.Errorf("cpucap: group name %q: want one path element", name)
	}
	if cores < 0.01 {
		return nil, fmt.Errorf("cpucap: %g cores: want at least 0.01", cores)
	}
	quota := int64(cores * period)
	if _, err := os.Stat(filepath.Join(rootV1, "cpu.cfs_quota_us")); err == nil {
		g := &Group{dir: filepath.Join(rootV1, name)}
		return g, g.setup(map[string]string{
			"cpu.cfs_period_us": strconv.Itoa(period),
			"cpu.cfs_quota_us":  strconv.FormatInt(quota, 10),
		})
	}
	controllers, err := os.ReadFile(filepath.Join(rootV2, "cgroup.controllers"))
	if err != nil || !hasWord(string(controllers), "cpu") {
		return nil, errors.New("cpucap: no cgroup cpu controller: neither cgroup v1's " + rootV1 + " nor cgroup v2 with cpu at " + rootV2)
	}
	// v2: the parent must hand the cpu controller down to its children.
	if err := os.WriteFile(filepath.Join(rootV2, "cgroup.subtree_control"), []byte("+cpu"), 0); err != nil {
		return nil, fmt.Errorf("cpucap: enable cpu for child groups: %w", err)
	}
	g := &Group{dir: filepath.Join(rootV2, name), v2: true}
	return g, g.setup(map[string]string{"cpu.max": fmt.Sprintf("%d %d", quota, period)})
}

func (g *Group) setup(files map[string]string) error {
	if err := os.Mkdir(g.dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("cpucap: create %s (needs root or a delegated cgroup): %w", g.dir, err)
	}
	// v1 refuses a period under which the current quota would not fit,
	// so the period is written first; the quota follows.
	for _, name := range []string{"cpu.cfs_period_us", "cpu.cfs_quota_us", "cpu.max"} {
		v, ok := files[name]
		if !ok {
			continue
		}
		if err := os.WriteFile(filepath.Join(g.dir, name), []byte(v), 0); err != nil {
			return fmt.Errorf("cpucap: %s: %w", name, err)
		}
	}
	return nil
}

// Dir is the group's directory in the cgroup file system.
func (g *Group) Dir() string { return g.dir }

// Add moves the process pid (all its threads) into the group. Threads it
// starts later are born there.
func (g *Group) Add(pid int) error {
	if err := os.WriteFile(filepath.Join(g.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("cpucap: move %d into %s: %w", pid, g.dir, err)
	}
	return nil
}

// Throttled reads how many of the group's accounting periods have
// passed while it had runnable work, and in how many of those it used up
// its quota and waited: a benchmark's proof that the cap was what bound.
func (g *Group) Throttled() (periods, throttled int64, err error) {
	b, err := os.ReadFile(filepath.Join(g.dir, "cpu.stat"))
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.Lines(string(b)) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), " ")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "nr_periods":
			periods = n
		case "nr_throttled":
			throttled = n
		}
	}
	return periods, throttled, nil
}

// Remove deletes the group. The kernel refuses while a process is in it:
// end them first.
func (g *Group) Remove() error {
	if err := os.Remove(g.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cpucap: remove %s: %w", g.dir, err)
	}
	return nil
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}
