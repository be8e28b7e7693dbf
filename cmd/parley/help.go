package main

import (
	"flag"
	"fmt"
	"strings"
)

// helpRequest is -h, -help or --help: run prints text to stdout and the
// program exits 0 (a request for help is not a usage mistake).
type helpRequest struct{ text string }

func (h helpRequest) Error() string { return "help requested" }

// commandHelp is what `parley CMD --help` says above the flags.
type commandHelp struct {
	synopsis string // after "usage: parley "
	about    string // one paragraph or a few lines
}

// helps holds the help of every flag set, by flag set name (the command
// line that selects it, without "parley").
var helps = map[string]commandHelp{
	"serve": {"serve [flags]", `Serve the HTTP API, the WebSocket gateway and the web client. Migrates the
store first, then prints "listening on http://HOST:PORT" (--addr with port 0
picks a free port). SIGTERM or SIGINT drains and exits 0.`},
	"migrate": {"migrate [--db DSN | --data-dir DIR]", `Apply the store's pending migrations and exit.`},
	"user add": {"user add ID [--email E] [--admin] --password-stdin [--db DSN]", `Create an account. The password is the first line of stdin (at least 8
characters); it never goes on the command line. Audited as user.create.`},
	"user disable": {"user disable ID [--db DSN]", `Disable an account: its tokens stop working and it cannot log in.
Audited as user.disable.`},
	"user enable": {"user enable ID [--db DSN]", `Enable a disabled account again (it logs in anew). Audited as user.enable.`},
	"user passwd": {"user passwd ID --password-stdin [--db DSN]", `Set an account's password from the first line of stdin (at least 8
characters). Every token of the user is revoked. Audited as user.passwd.`},
	"user list": {"user list [--db DSN]", `List every account: id, role, disabled, email, created.`},
	"conv list": {"conv list [--db DSN]", `List every conversation: id, kind, members now, head, retention, title.`},
	"conv show": {"conv show ID [--db DSN]", `Show one conversation: kind, title, owner, members now, head, min_seq,
epoch, retention, created.`},
	"search rebuild": {"search rebuild [--conv ID] [--db DSN]", `Rebuild the search index from the log: of one conversation (--conv) or of
every one, each in one transaction that holds the conversation's lock, so
the server may keep running. Progress on stderr (conversations done/total,
index rows written), the total on stdout. Audited as search.rebuild.
"parley serve" builds the conversations not built yet (after an upgrade) by
itself at start; this command is for doing it ahead of time, or again.`},
	"export": {"export --server URL --login LOGIN [--scope all|conv:ID] --out FILE [--password-stdin]", `Export what a user can see as gzipped JSON lines: create the job
(idempotent), follow its progress, download with resume and check its
sha256. The password is read from stdin (--password-stdin) or
PARLEY_PASSWORD.`},
	"bench": {"bench --server URL[,URL...] | --spawn N --db DSN --admin LOGIN:PASSWORD [flags]", `The load generator and acceptance checker. Exit status: 0 the acceptance
check held, 1 it did not (or the run failed), 2 bad usage.`},
	"version": {"version", `Print the module version, the VCS revision it was built from (and whether
the tree was modified) and the Go version.`},
}

// groupHelp is the help of the commands that only hold subcommands.
var groupHelp = map[string]string{
	"user": `usage: parley user COMMAND ID [flags]   (parley user COMMAND --help: its flags)

Accounts, read and changed directly in the store (--db, as serve's). Every
change is written to the audit log with the operator "cli:" + the OS user.

commands:
  add ID --password-stdin [--email E] [--admin]   create an account
  disable ID                                      disable an account (its tokens stop)
  enable ID                                       enable it again
  passwd ID --password-stdin                      set a new password (its tokens stop)
  list                                            list every account
`,
	"search": `usage: parley search rebuild [--conv ID] [flags]   (parley search rebuild --help: its flags)

The search index, changed directly in the store (--db, as serve's). Every
rebuild is written to the audit log with the operator "cli:" + the OS user.

commands:
  rebuild [--conv ID]   rebuild the index of one conversation, or of every one
`,
	"conv": `usage: parley conv COMMAND [ID] [flags]   (parley conv COMMAND --help: its flags)

Conversations, read directly from the store (--db, as serve's).

commands:
  list      list every conversation
  show ID   show one conversation and its members
`,
}

// usage is `parley --help`.
const usage = `Parley: a self-hosted chat server and its tools.

usage:
  parley serve [--addr HOST:PORT] [--db sqlite:FILE|postgres://...] [--data-dir DIR] [--demo] [flags]
  parley migrate [--db ...]
  parley user add ID [--email E] [--admin] --password-stdin [--db ...]
  parley user disable|enable ID [--db ...]
  parley user passwd ID --password-stdin [--db ...]
  parley user list [--db ...]
  parley conv list [--db ...]
  parley conv show ID [--db ...]
  parley search rebuild [--conv ID] [--db ...]
  parley export --server URL --login LOGIN [--scope all|conv:ID] --out FILE [--password-stdin]
  parley bench --server URL[,URL...] | --spawn N --db DSN --admin LOGIN:PASSWORD [flags]
  parley version
  parley help [COMMAND]

commands:
  serve     serve the HTTP API, the WebSocket gateway and the web client
  migrate   apply the store's migrations and exit
  user      add, disable, enable, list accounts; set a password (audited)
  conv      list conversations; show one
  search    rebuild the search index (audited)
  export    export what a user can see into a file
  bench     load generator and acceptance check
  version   print the version, VCS revision and Go version

Run "parley COMMAND --help" (or "parley help COMMAND") for a command's flags,
each with its default. Every flag also reads PARLEY_<FLAG> from the
environment (--data-dir: PARLEY_DATA_DIR; bench's: PARLEY_BENCH_<FLAG>).
Exit status: 0 success, 1 failure, 2 bad usage; errors go to stderr on one line.
`

// flagHelp is the help of one flag set: its synopsis, what it does, and
// every flag with its type, meaning, default and environment variable.
func flagHelp(fs *flag.FlagSet, prefix string) string {
	h := helps[fs.Name()]
	if h.synopsis == "" {
		h.synopsis = fs.Name() + " [flags]"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "usage: parley %s\n\n%s\n", h.synopsis, h.about)
	first := true
	fs.VisitAll(func(f *flag.Flag) {
		if first {
			fmt.Fprintf(&b, "\nflags (each also read from %sNAME, NAME in capitals with _ for -, unless flag only):\n", prefix)
			first = false
		}
		typ, meaning := flag.UnquoteUsage(f)
		def := f.DefValue
		if typ == "string" || def == "" {
			def = fmt.Sprintf("%q", def)
		}
		name := "--" + f.Name
		if typ != "" {
			name += " " + typ
		}
		env := "env " + envName(prefix, f.Name)
		if flagOnly[f.Name] {
			env = "flag only"
		}
		fmt.Fprintf(&b, "  %s\n        %s (default %s; %s)\n", name, meaning, def, env)
	})
	return b.String()
}

// flagOnly are the flags no environment variable sets: a setting that
// must never be on by accident (an environment file copied from a laptop
// to a server).
var flagOnly = map[string]bool{"demo": true}

// envName is the environment variable that sets a flag.
func envName(prefix, flagName string) string {
	return prefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// wantsHelp reports whether args ask for help and nothing else.
func wantsHelp(args []string) bool {
	return len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help")
}
