package main

import (
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

func runVersion(args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := parseFlags(fs, args, getenv); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("version: unexpected argument %q", fs.Arg(0))
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return fmt.Errorf("version: the binary carries no build information")
	}
	fmt.Fprint(stdout, versionText(bi))
	return nil
}

// versionText is `parley version`: the module and its version ("(devel)"
// for a build from a work tree), the VCS revision, its time and whether
// the tree had uncommitted changes (when the build recorded them: go
// build in a git checkout does, go test and go run do not), and the Go
// version. One "key value" pair a line, for people and scripts.
func versionText(bi *debug.BuildInfo) string {
	version := bi.Main.Version
	if version == "" {
		version = "(unknown)"
	}
	path := bi.Main.Path
	if path == "" {
		path = "github.com/parleychat/parley"
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	var b strings.Builder
	fmt.Fprintf(&b, "parley %s\n", version)
	fmt.Fprintf(&b, "module %s\n", path)
	if rev := settings["vcs.revision"]; rev != "" {
		fmt.Fprintf(&b, "revision %s\n", rev)
		if t := settings["vcs.time"]; t != "" {
			fmt.Fprintf(&b, "committed %s\n", t)
		}
		fmt.Fprintf(&b, "modified %s\n", orDefault(settings["vcs.modified"], "unknown"))
	} else {
		fmt.Fprintf(&b, "revision unknown (not recorded in this build)\n")
	}
	fmt.Fprintf(&b, "go %s\n", bi.GoVersion)
	return b.String()
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
