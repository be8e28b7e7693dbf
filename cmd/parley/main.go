// Command parley is the Parley chat server and its tools:
//
//	parley serve [--addr 127.0.0.1:8080] [--db sqlite:FILE | postgres://…] [--data-dir DIR] [--demo]
//	parley migrate [--db …]
//	parley user add ID [--email E] [--admin] --password-stdin [--db …]
//	parley user disable|enable ID [--db …]
//	parley user passwd ID --password-stdin [--db …]
//	parley user list [--db …]
//	parley conv list|show [ID] [--db …]
//	parley search rebuild [--conv ID] [--db …]
//	parley version
//	parley bench --server URL[,URL…] | --spawn N --db DSN [--admin LOGIN:PASSWORD] […]
//	parley export --server URL --login LOGIN [--scope all|conv:ID] --out FILE [--password-stdin]
//
// Every flag can also be set by an environment variable: --data-dir is
// PARLEY_DATA_DIR, and so on. `parley COMMAND --help` lists a command's
// flags with their defaults (exit status 0). Exit status: 0 success, 1 failure, 2 bad usage;
// errors go to stderr on one line.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args, os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "parley: "+oneLine(err.Error()))
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageError is a command-line mistake: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// run is the whole program; main only wires it to the process. ctx ends on
// SIGINT or SIGTERM. A request for help (-h, --help, parley help) prints
// to stdout and returns nil: exit status 0.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	err := dispatch(ctx, args, getenv, stdin, stdout, stderr)
	var h helpRequest
	if errors.As(err, &h) {
		fmt.Fprint(stdout, h.text)
		return nil
	}
	return err
}

func dispatch(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) < 2 {
		return usagef("no command (see parley --help)")
	}
	cmd, rest := args[1], args[2:]
	if cmd != "user" && cmd != "conv" && cmd != "search" && wantsHelp(rest) {
		rest = []string{"--help"} // parley bench help, as before
	}
	switch cmd {
	case "serve":
		return runServe(ctx, rest, getenv, stdout, stderr)
	case "migrate":
		return runMigrate(ctx, rest, getenv, stdout)
	case "user":
		return runUser(ctx, rest, getenv, stdin, stdout)
	case "conv":
		return runConv(ctx, rest, getenv, stdout)
	case "search":
		return runSearch(ctx, rest, getenv, stdout, stderr)
	case "bench":
		return runBench(ctx, rest, getenv, stdout, stderr)
	case "export":
		return runExport(ctx, rest, getenv, stdin, stdout, stderr)
	case "version":
		return runVersion(rest, getenv, stdout)
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 {
			return helpRequest{usage}
		}
		// parley help COMMAND [SUB]: the command's own --help.
		return dispatch(ctx, append(append([]string{args[0]}, rest...), "--help"), getenv, stdin, stdout, stderr)
	default:
		return usagef("unknown command %q (see parley --help)", cmd)
	}
}

// parseFlags parses args, then fills every flag not given on the command
// line from PARLEY_<NAME> (dashes become underscores).
func parseFlags(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	return parseFlagsPrefix(fs, args, getenv, "PARLEY_")
}

// parseFlagsPrefix is parseFlags with the environment variables named
// prefix + NAME (`parley bench` reads PARLEY_BENCH_<NAME>, so its --users
// never picks up a server's setting).
func parseFlagsPrefix(fs *flag.FlagSet, args []string, getenv func(string) string, prefix string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return helpRequest{flagHelp(fs, prefix)}
		}
		return usagef("%s: %v (see parley %s --help)", fs.Name(), err, fs.Name())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil || flagOnly[f.Name] {
			return
		}
		env := prefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(env); v != "" {
			if e := fs.Set(f.Name, v); e != nil {
				err = usagef("%s=%q: %v", env, v, e)
			}
		}
	})
	return err
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
