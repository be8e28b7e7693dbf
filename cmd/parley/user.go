package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os/user"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/httpapi"
)

func runMigrate(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	var sf storeFlags
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	sf.register(fs)
	if err := parseFlags(fs, args, getenv); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("migrate: unexpected argument %q", fs.Arg(0))
	}
	store, _, err := sf.open(ctx, parley.Options{}) // Open applies pending migrations
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "migrated %s\n", redact(sf.dsn()))
	return store.Close()
}

// userCommands are the subcommands of `parley user`; those that take a
// user id say so.
var userCommands = map[string]bool{"add": true, "disable": true, "enable": true, "passwd": true, "list": false}

// userCmd is one `parley user` command as parsed.
type userCmd struct {
	sub      string // add, disable, enable, passwd or list
	id       string // of the user, for the commands that take one
	email    string // add --email
	admin    bool   // add --admin
	password string // read from stdin by add and passwd
	store    storeFlags
}

func runUser(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout io.Writer) error {
	c, err := parseUser(args, getenv, stdin)
	if err != nil {
		return err
	}
	store, _, err := c.store.open(ctx, parley.Options{})
	if err != nil {
		return err
	}
	defer store.Close()
	op := cliOperator(getenv)
	change := func(action string, params map[string]any, do func() error) error {
		if su := getenv("SUDO_USER"); su != "" {
			params["sudo_user"] = su // who was root
		}
		return audited(ctx, store, op, action, c.id, params, do)
	}
	return c.run(ctx, store, change, stdout)
}

// parseUser reads a `parley user` command line and, for add and passwd,
// the password on stdin; nothing is opened yet.
func parseUser(args []string, getenv func(string) string, stdin io.Reader) (*userCmd, error) {
	if len(args) == 0 {
		return nil, usagef("user: want add, disable, enable, passwd or list (see parley user --help)")
	}
	if wantsHelp(args) {
		return nil, helpRequest{groupHelp["user"]}
	}
	c := &userCmd{sub: args[0]}
	args = args[1:]
	takesID, known := userCommands[c.sub]
	if !known {
		return nil, usagef("user: unknown command %q (want add, disable, enable, passwd or list)", c.sub)
	}
	// The user id comes first (parley user add ID --flags); flags may also
	// come first.
	if takesID && len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		c.id, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("user "+c.sub, flag.ContinueOnError)
	c.store.register(fs)
	var passwordStdin bool
	switch c.sub {
	case "add":
		fs.StringVar(&c.email, "email", "", "email address (optional, unique)")
		fs.BoolVar(&c.admin, "admin", false, "give the admin role")
	}
	if c.sub == "add" || c.sub == "passwd" {
		fs.BoolVar(&passwordStdin, "password-stdin", false, "read the password from the first line of stdin (required)")
	}
	if err := parseFlags(fs, args, getenv); err != nil {
		return nil, err
	}
	if takesID && c.id == "" && fs.NArg() > 0 {
		c.id = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return nil, usagef("user %s: unexpected argument %q", c.sub, fs.Arg(0))
	}
	if takesID && c.id == "" {
		return nil, usagef("user %s: a user id is required", c.sub)
	}
	if c.sub == "add" || c.sub == "passwd" {
		if !passwordStdin {
			return nil, usagef("user %s: --password-stdin is required (a password never goes on the command line)", c.sub)
		}
		var err error
		if c.password, err = readNewPassword(stdin, c.sub); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// readNewPassword reads the password of user add or passwd from the first
// line of stdin and checks it before the store is opened: a refused one
// changes nothing.
func readNewPassword(stdin io.Reader, sub string) (string, error) {
	line, err := bufio.NewReader(stdin).ReadString('\n')
	if err != nil && err != io.EOF {
		return "", fmt.Errorf("reading the password: %w", err)
	}
	password := strings.TrimRight(line, "\r\n")
	if password == "" {
		return "", usagef("user %s: the password read from stdin is empty", sub)
	}
	if err := parley.ValidateNewPassword(password); err != nil {
		return "", err // before opening the store: nothing is changed
	}
	return password, nil
}

// run carries the command out on store, each change through change (the
// audit log).
func (c *userCmd) run(ctx context.Context, store parley.Store, change func(action string, params map[string]any, do func() error) error, stdout io.Writer) error {
	id := c.id
	switch c.sub {
	case "add":
		role := parley.RoleUser
		if c.admin {
			role = parley.RoleAdmin
		}
		params := map[string]any{"id": id, "role": string(role), "password": c.password}
		if c.email != "" {
			params["email"] = c.email
		}
		var u parley.User
		err := change("user.create", params, func() (err error) {
			u, err = store.CreateUser(ctx, parley.NewUser{ID: id, Email: c.email, Password: c.password, Role: role})
			return err
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "created user %s (%s)\n", u.ID, u.Role)
	case "disable", "enable":
		err := change("user."+c.sub, map[string]any{"id": id}, func() error {
			return store.SetUserDisabled(ctx, id, c.sub == "disable")
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%sd user %s\n", c.sub, id)
	case "passwd":
		err := change("user.passwd", map[string]any{"id": id, "password": c.password}, func() error {
			return store.SetPassword(ctx, id, c.password)
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "set the password of user %s; its tokens are revoked\n", id)
	case "list":
		return listUsers(ctx, store, stdout)
	}
	return nil
}

// listUsers is `parley user list`: every user, one line each.
func listUsers(ctx context.Context, store parley.Store, stdout io.Writer) error {
	tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tROLE\tDISABLED\tEMAIL\tCREATED")
	err := walkAdmin(ctx, store.AdminUsers, func(u parley.AdminUser) {
		email := u.Email
		if email == "" {
			email = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", u.ID, u.Role, yesNo(u.Disabled), email, u.CreatedAt.UTC().Format(time.RFC3339))
	})
	if err != nil {
		return err
	}
	return tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// cliOperatorPrefix marks an audit entry's operator as the command line:
// "cli:" + the OS user. A Parley user id cannot hold a colon, so such an
// operator is never mistaken for an account of the operations API.
const cliOperatorPrefix = "cli:"

// cliOperator is the audit operator of a change made from the command
// line: the OS user running parley (os/user, else $USER, else "unknown").
func cliOperator(getenv func(string) string) string {
	name := ""
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	if name == "" {
		name = getenv("USER")
	}
	if name == "" || !utf8.ValidString(name) || strings.ContainsRune(name, 0) {
		name = "unknown"
	}
	op := cliOperatorPrefix + name
	for len(op) > parley.MaxAuditAction {
		_, size := utf8.DecodeLastRuneInString(op)
		op = op[:len(op)-size]
	}
	return op
}

// auditTimeout bounds the audit writes of a command-line change.
const auditTimeout = 10 * time.Second

// audited makes one change from the command line the way the operations
// API makes its own (httpapi adminCall): the audit entry is written as
// pending before do runs (when it cannot be written, nothing is done) and
// finished with the outcome, ok or the error's code, after. Params are
// redacted as the API's are (a password never reaches the log).
func audited(ctx context.Context, store parley.Operations, operator, action, target string, params map[string]any, do func() error) error {
	e := parley.AuditEntry{
		Operator: operator, Action: action, Target: target,
		Params: httpapi.RedactParams(params), Outcome: parley.AuditPending,
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
	defer cancel()
	pending, err := store.AppendAudit(actx, e)
	if err != nil {
		return fmt.Errorf("audit log: %w (nothing was changed)", err)
	}
	err = do()
	outcome := "ok"
	if err != nil {
		outcome = string(parley.ErrorCode(err))
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
	defer cancel()
	if ferr := store.FinishAudit(fctx, pending.ID, outcome); ferr != nil && err == nil {
		return fmt.Errorf("%s %s was done, but its audit entry %d stays pending: %w", action, target, pending.ID, ferr)
	}
	return err
}
