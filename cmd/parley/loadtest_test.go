package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/cpucap"
	"github.com/parleychat/parley/loadtest"
	"github.com/parleychat/parley/postgres/pgtest"
)

// benchRun runs `parley bench` in this process; the gateways it spawns are
// this test binary re-executed as `parley serve` (see TestMain).
func benchRun(t *testing.T, args ...string) (stdout string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	work := t.TempDir()
	base := []string{"parley", "bench", "--admin", "root:root-password", "--quiet",
		"--serve-env", "PARLEY_E2E_CHILD=1", "--serve-arg=--backstop=200ms", "--work-dir", work}
	err = run(ctx, append(base, args...), func(string) string { return "" }, nil, &out, &errb)
	t.Logf("parley bench %s:\n%s%s", strings.Join(args, " "), out.String(), errb.String())
	t.Cleanup(func() {
		if t.Failed() {
			dumpDeviceLogs(t, work, out.String())
		}
	})
	return out.String(), err
}

// dumpDeviceLogs prints the client logs of the devices the check named
// (OUTBOX.log in the work directory) and the gateways' warnings.
func dumpDeviceLogs(t *testing.T, work, summary string) {
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`device=([^/\s]+)/(\S+)`).FindAllStringSubmatch(summary, 5) {
		name := m[1] + "-" + m[2] + ".outbox.log"
		if seen[name] {
			continue
		}
		seen[name] = true
		b, _ := os.ReadFile(filepath.Join(work, name))
		t.Logf("client log of %s/%s:\n%s", m[1], m[2], lastLines(string(b), 60))
	}
	logs, _ := filepath.Glob(filepath.Join(work, "gateway-*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		t.Logf("%s (warnings and errors):\n%s", filepath.Base(l), lastLines(grepLines(string(b), "WARN"), 40)+lastLines(grepLines(string(b), "ERROR"), 40))
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n") + "\n"
}

// ciSize is the CI-sized run: a few hundred devices for about a minute,
// fewer under the race detector (which slows every client and server).
func ciSize() (users, devices int, dur time.Duration, rate int) {
	if raceEnabled {
		return 100, 2, 40 * time.Second, 10
	}
	return 150, 2, 30 * time.Second, 30
}

// TestBenchLoad is the CI-sized acceptance run on both stores: a few
// hundred devices with random disconnects, membership churn and recalls;
// on PostgreSQL over two gateways, one of them killed (SIGKILL) and
// restarted mid-run. The acceptance check must hold: exit status 0.
func TestBenchLoad(t *testing.T) {
	users, devices, dur, rate := ciSize()
	common := []string{
		"--users", strconv.Itoa(users), "--devices-per-user", strconv.Itoa(devices),
		"--duration", dur.String(), "--rate", strconv.Itoa(rate), "--groups", "10,100",
		"--disconnect-every", "300ms", "--churn-every", "500ms", "--recall-ratio", "0.05", "--settle", "60s",
	}
	tests := []struct {
		name  string
		store func(t *testing.T) (db string)
		extra []string
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "parley.db") }, []string{"--spawn", "1"}},
		{"postgres", func(t *testing.T) string { return pgtest.Libpq(pgtest.DSN(t)) }, []string{"--spawn", "2", "--kill-every", strconv.Itoa(int(dur.Seconds()/2)) + "s"}},
	}
	if cpucapOK() {
		// The SQLite run's gateway runs under a cap of a whole core: the
		// cap is in place for the run and reported, without binding.
		tests[0].extra = append(tests[0].extra, "--gateway-cpu", "1")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := tt.store(t)
			report := filepath.Join(t.TempDir(), "report.json")
			plot := filepath.Join(t.TempDir(), "plot.svg")
			args := append(append([]string{"--db", db, "--report", report, "--plot", plot}, common...), tt.extra...)
			if _, err := benchRun(t, args...); err != nil {
				t.Fatalf("bench: %v, want the acceptance check to hold", err)
			}
			var rep loadtest.Report
			b, err := os.ReadFile(report)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &rep); err != nil {
				t.Fatal(err)
			}
			if !rep.Pass || rep.Devices != users*devices || rep.Committed == 0 || rep.Reconnects == 0 || rep.MembershipChanges == 0 {
				t.Fatalf("report: pass %v, %d devices, %d committed, %d reconnects, %d membership changes", rep.Pass, rep.Devices, rep.Committed, rep.Reconnects, rep.MembershipChanges)
			}
			if slices.Contains(tt.extra, "--gateway-cpu") && (rep.GatewayCPU != 1 || len(rep.GatewayThrottled) != 1) {
				t.Fatalf("report: gateway cap %g, throttled %v; want 1 core, one gateway", rep.GatewayCPU, rep.GatewayThrottled)
			}
			if tt.name == "postgres" && rep.Kills == 0 {
				t.Fatal("no gateway was killed")
			}
			if svg, err := os.ReadFile(plot); err != nil || !bytes.HasPrefix(svg, []byte("<svg")) {
				t.Fatalf("plot: %v, %.40q", err, svg)
			}
		})
	}
}

// TestBenchSenders: `parley bench --senders` against a spawned gateway on
// both stores, own conversations and one hot conversation: every send is
// answered, and the report holds the rate, the latency percentiles and the
// server's CPU per send.
func TestBenchSenders(t *testing.T) {
	stores := []struct {
		name  string
		store func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "parley.db") }},
		{"postgres", func(t *testing.T) string { return pgtest.Libpq(pgtest.DSN(t)) }},
	}
	for _, st := range stores {
		for _, hot := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/hot=%v", st.name, hot), func(t *testing.T) {
				report := filepath.Join(t.TempDir(), "sends.json")
				args := []string{"--spawn", "1", "--db", st.store(t), "--senders", "4", "--duration", "1s", "--warmup", "200ms", "--report", report}
				if hot {
					args = append(args, "--hot")
				}
				out, err := benchRun(t, args...)
				if err != nil {
					t.Fatalf("bench --senders: %v", err)
				}
				var rep loadtest.SendsReport
				b, err := os.ReadFile(report)
				if err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(b, &rep); err != nil {
					t.Fatal(err)
				}
				if rep.Senders != 4 || rep.Hot != hot || rep.Sends == 0 || rep.Errors != 0 || rep.Rate <= 0 ||
					rep.Latency.N != int(rep.Sends) || rep.Latency.P99 < rep.Latency.P50 || rep.CPUPerSendMicros <= 0 {
					t.Fatalf("report %+v", rep)
				}
				if !strings.Contains(out, "sends/s") || !strings.Contains(out, "p99") {
					t.Fatalf("text report %q", out)
				}
			})
		}
	}
}

// TestBenchBrokenServer: a server broken on purpose must fail the
// acceptance check (exit status 1): a sync page that skips an event, and a
// send committed twice.
func TestBenchBrokenServer(t *testing.T) {
	tests := []struct {
		fault string
		want  string // a violation kind the check must report
	}{
		{"gateway.sync=drop", loadtest.VLog},
		{"gateway.send=dup", loadtest.VOrphan},
		{"gateway.push=drop,gateway.sync=drop", loadtest.VLog},
	}
	for _, tt := range tests {
		t.Run(tt.fault, func(t *testing.T) {
			db := "sqlite:" + filepath.Join(t.TempDir(), "parley.db")
			out, err := benchRun(t, "--spawn", "1", "--db", db, "--faults", tt.fault,
				"--users", "20", "--duration", "4s", "--rate", "20", "--settle", "6s", "--disconnect-every", "500ms")
			var failed errCheckFailed
			if !errors.As(err, &failed) {
				t.Fatalf("bench: %v, want the acceptance check to fail", err)
			}
			if !strings.Contains(out, "acceptance     FAIL") || !strings.Contains(out, "  "+tt.want+" ") {
				t.Fatalf("summary does not show a %s violation:\n%s", tt.want, out)
			}
		})
	}
}

// TestBenchUsage: command-line mistakes are exit status 2 (usageError).
func TestBenchUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"no server", []string{"--admin", "a:b"}, nil},
		{"no admin", []string{"--server", "http://127.0.0.1:1"}, nil},
		{"spawn without db", []string{"--admin", "a:b", "--spawn", "1"}, nil},
		{"kill without spawn", []string{"--admin", "a:b", "--server", "http://127.0.0.1:1", "--kill-every", "1s"}, nil},
		{"bad groups", []string{"--admin", "a:b", "--server", "http://127.0.0.1:1", "--groups", "ten"}, nil},
		{"one user", []string{"--admin", "a:b", "--server", "http://127.0.0.1:1", "--users", "1"}, nil},
		{"unknown flag", []string{"--admin", "a:b", "--server", "http://127.0.0.1:1", "--nope"}, nil},
		{"hot without senders", []string{"--admin", "a:b", "--server", "http://127.0.0.1:1", "--hot"}, nil},
		{"negative senders", []string{"--admin", "a:b", "--server", "http://127.0.0.1:1", "--senders", "-1"}, nil},
		{"cpu cap without spawn", []string{"--admin", "a:b", "--server", "http://127.0.0.1:1", "--gateway-cpu", "0.5"}, nil},
		{"negative cpu cap", []string{"--admin", "a:b", "--spawn", "1", "--db", "sqlite:x.db", "--gateway-cpu", "-1"}, nil},
		{"senders on two gateways", []string{"--admin", "a:b", "--spawn", "2", "--db", "sqlite:x.db", "--senders", "2"}, nil},
		{"bad env", []string{"--server", "http://127.0.0.1:1"}, map[string]string{"PARLEY_BENCH_ADMIN": "a:b", "PARLEY_BENCH_USERS": "many"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := run(context.Background(), append([]string{"parley", "bench"}, tt.args...), func(k string) string { return tt.env[k] }, nil, &out, &errb)
			var ue usageError
			if !errors.As(err, &ue) {
				t.Fatalf("err = %v, want a usage error (exit 2)", err)
			}
		})
	}
}

// TestBenchServerDown: a server that does not answer is a failed run
// (exit 1), not a usage error.
func TestBenchServerDown(t *testing.T) {
	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"parley", "bench", "--quiet", "--server", "http://127.0.0.1:1", "--admin", "a:b", "--users", "2"},
		func(string) string { return "" }, nil, &out, &errb)
	var ue usageError
	if err == nil || errors.As(err, &ue) || parley.ErrorCode(err) == parley.CodeInvalidArgument {
		t.Fatalf("err = %v, want a run failure", err)
	}
}

// cpucapOK reports whether this process may make control groups with a
// CPU quota (root, with a cpu controller): the capped runs need it.
func cpucapOK() bool {
	g, err := cpucap.New(fmt.Sprintf("parley-probe-%d", os.Getpid()), 1)
	if err != nil {
		return false
	}
	return g.Remove() == nil
}
