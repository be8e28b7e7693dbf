package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/parleychat/parley/loadtest"
)

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// errCheckFailed is the acceptance check's failure: exit status 1.
type errCheckFailed struct{ n int }

func (e errCheckFailed) Error() string {
	return fmt.Sprintf("bench: the acceptance check failed with %d violation(s)", e.n)
}

// benchFlags are bench's flags: the run's loadtest.Config and what is
// parsed into it.
type benchFlags struct {
	cfg                   loadtest.Config
	servers, admin, grps  string
	report, plot, workDir string
	serveArgs, serveEnv   listFlag
	quiet, hot            bool
	senders               int
	warmup                time.Duration
	seed                  uint64
}

func runBench(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	f := &benchFlags{}
	fs := f.flagSet()
	if err := parseFlagsPrefix(fs, args, getenv, "PARLEY_BENCH_"); err != nil {
		return err
	}
	if err := f.check(fs); err != nil {
		return err
	}
	cfg := f.cfg
	if !f.quiet {
		cfg.Log = stderr
	}
	if f.senders < 0 || (f.hot && f.senders == 0) {
		return usagef("bench: --senders must be at least 1 with --hot")
	}
	if f.senders > 0 {
		return benchSends(ctx, cfg, loadtest.SendsConfig{Senders: f.senders, Hot: f.hot, Duration: cfg.Duration, Warmup: f.warmup}, f.report, stdout)
	}
	return benchLoad(ctx, cfg, f.report, f.plot, stdout)
}

func (f *benchFlags) flagSet() *flag.FlagSet {
	cfg := &f.cfg
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.StringVar(&f.servers, "server", "", "comma-separated gateway URLs (http://HOST:PORT)")
	fs.StringVar(&f.admin, "admin", "", "admin login as LOGIN:PASSWORD (creates the run's users)")
	fs.StringVar(&cfg.LoginPrefix, "login-prefix", "bench", "prefix of the user ids the run creates")
	fs.IntVar(&cfg.Users, "users", 100, "simulated users")
	fs.IntVar(&cfg.DevicesPerUser, "devices-per-user", 1, "devices per user (each a client with its own outbox and socket)")
	fs.DurationVar(&cfg.Duration, "duration", 30*time.Second, "length of the load phase")
	fs.Float64Var(&cfg.Rate, "rate", 50, "target sends per second over all devices (open loop); 0: closed loop")
	fs.DurationVar(&cfg.DisconnectEvery, "disconnect-every", 0, "how often a random device disconnects and comes back (0: never)")
	fs.DurationVar(&cfg.ChurnEvery, "churn-every", time.Second, "how often a group member is removed or re-added (0: never)")
	fs.DurationVar(&cfg.KillEvery, "kill-every", 0, "how often a spawned gateway is killed (SIGKILL) and restarted (0: never)")
	fs.StringVar(&f.grps, "groups", "10,100,1000", "group sizes (each size --users can fill)")
	fs.BoolVar(&cfg.Directs, "directs", true, "a direct chat between each user and the next")
	fs.Float64Var(&cfg.RecallRatio, "recall-ratio", 0.02, "share of sent messages that are recalled")
	fs.Float64Var(&cfg.ReadRatio, "read-ratio", 0.1, "share of sends followed by a read-cursor move")
	fs.DurationVar(&cfg.Settle, "settle", time.Minute, "after the load, how long outboxes may not drain and devices not catch up before the check runs (progress restarts it; at most 5x in all)")
	fs.IntVar(&cfg.Spawn, "spawn", 0, "start N \"parley serve\" processes on --db instead of --server")
	fs.StringVar(&cfg.DB, "db", "", "store of the spawned gateways (sqlite:FILE or postgres://...)")
	fs.StringVar(&cfg.Faults, "faults", "", "PARLEY_FAULTS of the spawned gateways (lab: a deliberately broken server)")
	fs.Float64Var(&cfg.GatewayCPU, "gateway-cpu", 0, "CPU cores each spawned gateway may use, in a control group of its own (e.g. 0.25; needs root; 0: no cap)")
	fs.Var(&f.serveArgs, "serve-arg", "extra argument of the spawned gateways (repeatable)")
	fs.Var(&f.serveEnv, "serve-env", "extra K=V environment of the spawned gateways (repeatable)")
	fs.StringVar(&f.report, "report", "", "write the JSON report to FILE")
	fs.StringVar(&f.plot, "plot", "", "write the SVG latency plot to FILE")
	fs.StringVar(&f.workDir, "work-dir", "", "directory for outboxes and gateway logs (empty: a temporary one, removed at the end)")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress lines on stderr")
	fs.IntVar(&f.senders, "senders", 0, "instead of the simulated users: N raw WebSocket senders in a closed loop, each to its own group (no outbox, no acceptance check); reports sends/s, send→sent latency and server CPU per send")
	fs.BoolVar(&f.hot, "hot", false, "with --senders: every sender sends to one shared group")
	fs.DurationVar(&f.warmup, "warmup", 2*time.Second, "with --senders: sending before the measured --duration")
	fs.Uint64Var(&f.seed, "seed", 0, "random seed (0: random)")
	return fs
}

// check refuses what bench cannot run with and completes f.cfg from the
// other flags.
func (f *benchFlags) check(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return usagef("bench: unexpected argument %q", fs.Arg(0))
	}
	cfg := &f.cfg
	login, password, ok := strings.Cut(f.admin, ":")
	if !ok || login == "" {
		return usagef("bench: --admin LOGIN:PASSWORD (or PARLEY_BENCH_ADMIN) is required")
	}
	cfg.Admin, cfg.AdminPassword = login, password
	for s := range strings.SplitSeq(f.servers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.Servers = append(cfg.Servers, s)
		}
	}
	switch {
	case cfg.Spawn < 0:
		return usagef("bench: --spawn must be at least 0")
	case cfg.Spawn > 0 && cfg.DB == "":
		return usagef("bench: --spawn needs --db")
	case cfg.Spawn == 0 && len(cfg.Servers) == 0:
		return usagef("bench: --server URL[,URL...] or --spawn N --db DSN is required")
	case cfg.GatewayCPU < 0 || (cfg.GatewayCPU > 0 && cfg.Spawn == 0):
		return usagef("bench: --gateway-cpu needs gateways the run started itself (--spawn) and is not negative")
	case cfg.KillEvery > 0 && cfg.Spawn == 0:
		return usagef("bench: --kill-every needs gateways the run started itself (--spawn)")
	case cfg.Users < 2 || cfg.DevicesPerUser < 1:
		return usagef("bench: --users must be at least 2 and --devices-per-user at least 1")
	case cfg.Duration <= 0 || cfg.Rate < 0:
		return usagef("bench: --duration must be positive and --rate not negative")
	}
	for g := range strings.SplitSeq(f.grps, ",") {
		if g = strings.TrimSpace(g); g == "" {
			continue
		}
		n, err := strconv.Atoi(g)
		if err != nil || n < 2 {
			return usagef("bench: --groups %q: want sizes of at least 2", f.grps)
		}
		cfg.Groups = append(cfg.Groups, n)
	}
	cfg.ServeArgs, cfg.ServeEnv, cfg.WorkDir, cfg.Seed = f.serveArgs, f.serveEnv, f.workDir, f.seed
	return nil
}

// benchLoad is `parley bench` with simulated users: the load run and its
// acceptance check (a failed check is errCheckFailed).
func benchLoad(ctx context.Context, cfg loadtest.Config, report, plot string, stdout io.Writer) error {
	rep, err := loadtest.Run(ctx, cfg)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	rep.Text(stdout)
	if err := writeReport(report, rep); err != nil {
		return err
	}
	if plot != "" {
		f, err := os.Create(plot)
		if err != nil {
			return fmt.Errorf("bench: --plot: %w", err)
		}
		err = rep.SVG(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("bench: --plot: %w", err)
		}
	}
	if !rep.Pass {
		return errCheckFailed{rep.ViolationCount}
	}
	return nil
}

// benchSends is `parley bench --senders N`: the send-throughput run.
func benchSends(ctx context.Context, cfg loadtest.Config, sc loadtest.SendsConfig, report string, stdout io.Writer) error {
	if cfg.Spawn > 1 {
		return usagef("bench: --senders spawns at most one gateway")
	}
	sc.Servers, sc.Spawn, sc.DB, sc.Exe = cfg.Servers, cfg.Spawn, cfg.DB, cfg.Exe
	sc.ServeArgs, sc.ServeEnv, sc.WorkDir, sc.Log = cfg.ServeArgs, cfg.ServeEnv, cfg.WorkDir, cfg.Log
	sc.Admin, sc.AdminPassword, sc.LoginPrefix = cfg.Admin, cfg.AdminPassword, cfg.LoginPrefix
	rep, err := loadtest.RunSends(ctx, sc)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	rep.Text(stdout)
	if err := writeReport(report, rep); err != nil {
		return err
	}
	return nil
}

// writeReport writes rep as indented JSON to path (--report; empty: none).
func writeReport(path string, rep any) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("bench: --report: %w", err)
	}
	return nil
}
