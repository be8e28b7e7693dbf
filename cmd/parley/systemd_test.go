package main

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// unitFile is the systemd unit the deployment guide installs.
const unitFile = "../../docs/parley.service"

// TestSystemdUnit: docs/parley.service passes `systemd-analyze verify` with
// no warning at all, keeps the sandboxing docs/deploy.md promises (and
// `systemd-analyze security` rates it at most 2.0), and gives the drain
// time to finish before systemd kills it. The same checks fail on broken
// copies of the unit, so they can fail. Without systemd-analyze the test
// skips, except under PARLEY_TEST_SYSTEMD=1 (CI), where it must run.
func TestSystemdUnit(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("PARLEY_TEST_SYSTEMD") != "" {
			t.Fatalf("PARLEY_TEST_SYSTEMD is set but systemd-analyze is missing: %v (apt-get install systemd)", err)
		}
		t.Skip("systemd-analyze is not installed (apt-get install systemd); CI runs this test with PARLEY_TEST_SYSTEMD=1")
	}
	b, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	// verify needs ExecStart's program to exist and be executable: a stub
	// stands in for /usr/local/bin/parley.
	stub := filepath.Join(t.TempDir(), "parley")
	if err := os.WriteFile(stub, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	const exe = "ExecStart=/usr/local/bin/parley serve "
	if !strings.Contains(unit, "\n"+exe) {
		t.Fatalf("%s: no line starting %q", unitFile, exe)
	}
	local := strings.Replace(unit, exe, "ExecStart="+stub+" serve ", 1)

	t.Run("verify", func(t *testing.T) {
		if out, err := verifyUnit(t, sa, local); err != nil || out != "" {
			t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
		}
	})
	t.Run("sandboxing", func(t *testing.T) {
		for _, want := range []string{
			"DynamicUser=yes", "StateDirectory=parley", "ProtectSystem=strict", "ProtectHome=yes",
			"NoNewPrivileges=yes", "PrivateTmp=yes", "PrivateDevices=yes", "ProtectKernelTunables=yes",
			"ProtectKernelModules=yes", "ProtectKernelLogs=yes", "ProtectControlGroups=yes",
			"RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX", "RestrictNamespaces=yes", "LockPersonality=yes",
			"MemoryDenyWriteExecute=yes", "SystemCallFilter=@system-service", "CapabilityBoundingSet=",
			"Restart=on-failure", "KillSignal=SIGTERM", "EnvironmentFile=-/etc/parley/parley.env",
			"ExecStart=/usr/local/bin/parley serve --data-dir ${STATE_DIRECTORY}",
		} {
			if !hasLine(unit, want) {
				t.Errorf("%s: no line %q", unitFile, want)
			}
		}
		if out, err := securityScore(t, sa, local); err != nil {
			t.Errorf("systemd-analyze security rates the unit above 2.0: %v\n%s", err, out)
		}
	})
	t.Run("stop timeout above the drain", func(t *testing.T) {
		m := regexp.MustCompile(`(?m)^TimeoutStopSec=(\S+)$`).FindStringSubmatch(unit)
		if m == nil {
			t.Fatalf("%s: no TimeoutStopSec", unitFile)
		}
		d, err := time.ParseDuration(m[1])
		if err != nil {
			t.Fatalf("TimeoutStopSec=%s: %v (write it as a Go duration, e.g. 30s)", m[1], err)
		}
		if drain := DefaultDrainWindow + DefaultDrainTimeout; d <= drain {
			t.Errorf("TimeoutStopSec=%s: systemd would SIGKILL a drain that may take %s", m[1], drain)
		}
	})
	// The checks above fail on a broken unit.
	for _, c := range []struct{ name, old, new string }{
		{"unknown key", "DynamicUser=yes", "DynamicUsr=yes"},
		{"bad value", "ProtectSystem=strict", "ProtectSystem=sometimes"},
		{"missing program", "ExecStart=" + stub, "ExecStart=" + stub + "-missing"},
		{"unknown section", "[Service]", "[Servce]"},
	} {
		t.Run("broken/"+c.name, func(t *testing.T) {
			broken := strings.Replace(local, c.old, c.new, 1)
			if broken == local {
				t.Fatalf("%q is not in the unit", c.old)
			}
			if out, err := verifyUnit(t, sa, broken); err == nil && out == "" {
				t.Errorf("systemd-analyze verify accepts a unit with %s", c.name)
			}
		})
	}
	t.Run("broken/no sandbox", func(t *testing.T) {
		if _, err := securityScore(t, sa, local); err != nil {
			t.Skip("the unit itself does not pass (see sandboxing)")
		}
		var kept []string
		for _, l := range strings.Split(local, "\n") {
			if !strings.HasPrefix(l, "Protect") && !strings.HasPrefix(l, "Private") && !strings.HasPrefix(l, "SystemCall") {
				kept = append(kept, l)
			}
		}
		if _, err := securityScore(t, sa, strings.Join(kept, "\n")); err == nil {
			t.Error("systemd-analyze security accepts a unit without Protect*, Private* and SystemCall* lines")
		}
	})
}

// verifyUnit writes unit as parley.service in a temporary directory and
// runs `systemd-analyze verify` on it: its output (warnings included) and
// its error.
func verifyUnit(t *testing.T, sa, unit string) (string, error) {
	t.Helper()
	return analyze(t, sa, unit, "verify")
}

// securityScore runs `systemd-analyze security --offline` on unit: an error
// when the overall exposure is above 2.0 (20 tenths).
func securityScore(t *testing.T, sa, unit string) (string, error) {
	t.Helper()
	out, err := analyze(t, sa, unit, "security", "--offline=yes", "--threshold=20")
	if err != nil && strings.Contains(out, "unrecognized option") {
		t.Skipf("this systemd-analyze has no security --offline/--threshold (systemd 250 and later): %s", out)
	}
	return out, err
}

func analyze(t *testing.T, sa, unit string, args ...string) (string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "parley.service")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sa, append(append([]string{"--no-pager"}, args...), path)...)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_COLOR=0", "SYSTEMD_COLORS=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if args[0] == "verify" {
		out = append(out, stderr.Bytes()...)
	} else if err != nil {
		out = append(out, stderr.Bytes()...)
	}
	return strings.TrimSpace(string(out)), err
}

// hasLine reports whether s holds line as a whole line.
func hasLine(s, line string) bool {
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) == line {
			return true
		}
	}
	return false
}

// TestEnvExample: every variable docs/parley.env.example sets or suggests
// names a flag of the flag table of docs/configuration.md, and `parley serve`
// starts with their
// values (all but those naming another host or a path of the target
// machine).
func TestEnvExample(t *testing.T) {
	b, err := os.ReadFile("../../docs/parley.env.example")
	if err != nil {
		t.Fatal(err)
	}
	flagDoc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := map[string]bool{"PARLEY_DB": true, "PARLEY_EXPORT_DIR": true, "PARLEY_CONFIG": true, "PARLEY_ADDR": true,
		"PARLEY_FILES_DIR": true, "PARLEY_FILES": true}
	// Credentials read from the environment only (never a flag, so never
	// in ps): the table names them in the row of the flag that uses them.
	credentials := map[string]bool{"PARLEY_S3_ACCESS_KEY": true, "PARLEY_S3_SECRET_KEY": true}
	var env []string
	for _, m := range regexp.MustCompile(`(?m)^#?(PARLEY_[A-Z0-9_]+)=(\S*)$`).FindAllStringSubmatch(string(b), -1) {
		if credentials[m[1]] {
			if !strings.Contains(string(flagDoc), "`"+m[1]+"`") {
				t.Errorf("%s: docs/configuration.md does not name it", m[1])
			}
			continue
		}
		flag := "--" + strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(m[1], "PARLEY_")), "_", "-")
		if !strings.Contains(string(flagDoc), "| `"+flag+"` |") {
			t.Errorf("%s: the flag table of docs/configuration.md has no %s", m[1], flag)
		}
		if !elsewhere[m[1]] {
			env = append(env, m[1]+"="+m[2])
		}
	}
	if len(env) < 5 {
		t.Fatalf("only %d variables found: %q", len(env), env)
	}
	p := serveEnv(t, env) // its own --addr and --data-dir win over the file's
	resp, err := http.Get(p.http + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz with the example's settings: %d", resp.StatusCode)
	}
}

// TestDeployDoc: docs/deploy.md names only flags docs/configuration.md
// documents (as `--flag` or PARLEY_FLAG), and the files it links exist.
func TestDeployDoc(t *testing.T) {
	b, err := os.ReadFile("../../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	flagDoc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile("`(--[a-z][a-z-]*)`").FindAllStringSubmatch(doc, -1) {
		flags[m[1]] = true
	}
	for _, m := range regexp.MustCompile(`\bPARLEY_([A-Z][A-Z_]*)\b`).FindAllStringSubmatch(doc, -1) {
		flags["--"+strings.ReplaceAll(strings.ToLower(m[1]), "_", "-")] = true
	}
	if len(flags) < 10 {
		t.Fatalf("only %d flags found in deploy.md", len(flags))
	}
	for f := range flags {
		if !strings.Contains(string(flagDoc), "| `"+f+"` |") {
			t.Errorf("deploy.md names %s, which the flag table of docs/configuration.md does not document", f)
		}
	}
	for _, m := range regexp.MustCompile(`\]\(([^)#:]+)(#[^)]*)?\)`).FindAllStringSubmatch(doc, -1) {
		if _, err := os.Stat(filepath.Join("../../docs", m[1])); err != nil {
			t.Errorf("deploy.md links %s: %v", m[1], err)
		}
	}
}
