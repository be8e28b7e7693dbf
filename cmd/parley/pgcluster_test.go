package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/parleychat/parley/postgres/pgtest"
)

// cluster is a PostgreSQL server of the test's own, in a temporary
// directory, that the test stops and starts (pg_ctl): the outage tests
// cannot take down the shared server of PARLEY_TEST_POSTGRES.
type cluster struct {
	t    *testing.T
	bin  string // directory of initdb, pg_ctl
	data string
	log  string
	port int
	cred *syscall.Credential // run as the postgres user (nil: as ourselves)
	DSN  string
}

// newCluster initialises a cluster (not started). It skips the test with a
// message when the PostgreSQL server binaries are missing, or when running
// as root without a postgres user (PostgreSQL refuses to run as root);
// with PARLEY_TEST_POSTGRES set it fails instead, as CI must run it.
func newCluster(t *testing.T) *cluster {
	t.Helper()
	skip := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if os.Getenv(pgtest.Env) != "" {
			t.Fatalf("%s (required: %s is set)", msg, pgtest.Env)
		}
		t.Skip(msg)
	}
	ctls, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(ctls) == 0 {
		skip("outage tests need the PostgreSQL server binaries (initdb, pg_ctl) under /usr/lib/postgresql/*/bin")
	}
	sort.Slice(ctls, func(i, j int) bool { return version(ctls[i]) < version(ctls[j]) })
	c := &cluster{t: t, bin: filepath.Dir(ctls[len(ctls)-1])}

	dir := t.TempDir()
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			skip("running as root, and PostgreSQL refuses root: outage tests need a postgres user (%v)", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		// The postgres user must reach the directory: the test's temp root
		// is private to us.
		if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	c.data = filepath.Join(dir, "data")
	c.log = filepath.Join(dir, "postgres.log")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	c.DSN = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", c.port)
	c.run("initdb", "-D", c.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
	t.Cleanup(func() {
		cmd := c.cmd("pg_ctl", "-D", c.data, "-m", "immediate", "-w", "stop")
		cmd.Run() // may already be stopped
		if t.Failed() {
			if b, err := os.ReadFile(c.log); err == nil {
				t.Logf("postgres log:\n%s", b)
			}
		}
	})
	return c
}

// version orders /usr/lib/postgresql/N/bin/pg_ctl by N.
func version(ctl string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(ctl))))
	return n
}

func (c *cluster) cmd(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(c.bin, name), args...)
	cmd.Dir = filepath.Dir(c.data)
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	return cmd
}

func (c *cluster) run(name string, args ...string) {
	c.t.Helper()
	if out, err := c.cmd(name, args...).CombinedOutput(); err != nil {
		c.t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// Start starts the server and waits until it accepts connections.
func (c *cluster) Start() {
	c.t.Helper()
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories= -c fsync=off -c max_connections=200", c.port)
	began := time.Now()
	c.run("pg_ctl", "-D", c.data, "-l", c.log, "-o", opts, "-w", "-t", "30", "start")
	c.t.Logf("postgres started in %v", time.Since(began).Round(time.Millisecond))
}

// Crash stops the server at once, as a crash or a kill does: no checkpoint,
// every connection cut.
func (c *cluster) Crash() {
	c.t.Helper()
	c.run("pg_ctl", "-D", c.data, "-m", "immediate", "-w", "stop")
}
