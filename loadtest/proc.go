package loadtest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/parleychat/parley/cpucap"
)

// gateway is one `parley serve` process the run started itself. A kill
// restarts it on the same address, so clients find it again.
type gateway struct {
	n    int
	exe  string
	args []string // after "serve"; --addr is added
	env  []string
	logf string
	cap  *cpucap.Group // the gateway's CPU quota (nil: none)

	mu   sync.Mutex
	addr string // host:port, fixed after the first start
	cmd  *exec.Cmd
	done chan struct{}
}

// start runs the process and waits until it prints its address and
// answers /healthz.
func (g *gateway) start(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	addr := g.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	args := append([]string{"serve", "--addr", addr}, g.args...)
	cmd := exec.Command(g.exe, args...)
	cmd.Env = append(os.Environ(), g.env...)
	logFile, err := os.OpenFile(g.logf, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd.Stderr = logFile
	out, err := cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start gateway %d: %w", g.n, err)
	}
	if g.cap != nil {
		// Moved in before it accepts: every request it serves runs capped.
		if err := g.cap.Add(cmd.Process.Pid); err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			logFile.Close()
			return fmt.Errorf("gateway %d: %w", g.n, err)
		}
	}
	done := make(chan struct{})
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "listening on http://"); ok {
				select {
				case listening <- a:
				default:
				}
			}
		}
		io.Copy(io.Discard, out)
	}()
	go func() {
		cmd.Wait()
		logFile.Close()
		close(done)
	}()
	g.cmd, g.done = cmd, done
	select {
	case a := <-listening:
		g.addr = a
	case <-done:
		return fmt.Errorf("gateway %d exited at start; see %s", g.n, g.logf)
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		return fmt.Errorf("gateway %d did not print its address; see %s", g.n, g.logf)
	case <-ctx.Done():
		cmd.Process.Kill()
		return ctx.Err()
	}
	a := newAPI(g.url())
	for deadline := time.Now().Add(30 * time.Second); ; {
		if err := a.call(ctx, "GET", "/healthz", "", nil, nil); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("gateway %d: /healthz: %w", g.n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (g *gateway) url() string { return "http://" + g.addr }

// kill sends SIGKILL and waits for the process to end.
func (g *gateway) kill() {
	g.mu.Lock()
	cmd, done := g.cmd, g.done
	g.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// stop asks the process to drain (SIGTERM), kills it after d, and
// removes its CPU cap: a stopped gateway is not started again.
func (g *gateway) stop(d time.Duration) {
	g.mu.Lock()
	cmd, done := g.cmd, g.done
	g.mu.Unlock()
	if cmd != nil {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(d):
			g.kill()
		}
	}
	if g.cap != nil {
		g.cap.Remove()
	}
}

// throttled is the share of the gateway's CPU periods in which it used up
// its quota and waited (0 without a cap).
func (g *gateway) throttled() float64 {
	if g.cap == nil {
		return 0
	}
	periods, throttled, err := g.cap.Throttled()
	if err != nil || periods == 0 {
		return 0
	}
	return float64(throttled) / float64(periods)
}

// spawn starts n gateways on the store dsn, first creating the admin user
// with `parley user add` when it is missing.
func spawn(ctx context.Context, cfg Config, dir string) ([]*gateway, error) {
	exe := cfg.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	env := append([]string{}, cfg.ServeEnv...)
	env = append(env, "PARLEY_FAULTS="+cfg.Faults)
	// The admin: created on the store directly, as an operator would.
	// --data-dir: the gateways' own, so that the tool reads their secret key
	// file (DATA-DIR/secret.key) when a run before made one, never the
	// current directory's.
	add := exec.CommandContext(ctx, exe, "user", "add", cfg.Admin, "--admin", "--password-stdin", "--db", cfg.DB, "--data-dir", dir)
	add.Env = append(os.Environ(), env...)
	add.Stdin = strings.NewReader(cfg.AdminPassword + "\n")
	if out, err := add.CombinedOutput(); err != nil && !strings.Contains(strings.ToLower(string(out)), "exists") {
		return nil, fmt.Errorf("create admin %s: %v: %s", cfg.Admin, err, strings.TrimSpace(string(out)))
	}
	// No load balancer stands in front of the run's own gateways: a
	// drained one need not stay listening (stop waits only 5s).
	base := []string{"--db", cfg.DB, "--data-dir", dir, "--drain-window", "0s"}
	if !slices.Contains(cfg.ServeArgs, "--export-dir") {
		// The gateways share dir: it is their shared export directory
		// (which serve requires on PostgreSQL).
		base = append(base, "--export-dir", filepath.Join(dir, "exports"))
	}
	if !slices.Contains(cfg.ServeArgs, "--files-dir") {
		// Likewise their shared files directory.
		base = append(base, "--files-dir", filepath.Join(dir, "files"))
	}
	if !slices.Contains(cfg.ServeArgs, "--config") {
		// A load test measures the gateways, not their limiter: every
		// rate limit off, said explicitly (no file would mean the
		// built-in limits).
		path := filepath.Join(dir, "parley.yaml")
		if err := os.WriteFile(path, []byte("rate_limits: {}\n"), 0o600); err != nil {
			return nil, err
		}
		base = append(base, "--config", path)
	}
	var gws []*gateway
	for i := range cfg.Spawn {
		g := &gateway{
			n: i, exe: exe, env: env,
			args: append(slices.Clone(base), cfg.ServeArgs...),
			logf: filepath.Join(dir, fmt.Sprintf("gateway-%d.log", i)),
		}
		err := error(nil)
		if cfg.GatewayCPU > 0 {
			g.cap, err = cpucap.New(fmt.Sprintf("parley-bench-%d-gw%d", os.Getpid(), i), cfg.GatewayCPU)
		}
		if err == nil {
			err = g.start(ctx)
		}
		if err != nil {
			for _, g := range append(gws, g) {
				g.stop(0)
			}
			return nil, err
		}
		gws = append(gws, g)
	}
	return gws, nil
}
