package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/parleychat/parley"
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

func runUser(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout io.Writer) error {
	if len(args) == 0 {
		return usagef("user: want add or disable (see parley help)")
	}
	sub, args := args[0], args[1:]
	// The user id comes first (parley user add ID --flags); flags may also
	// come first.
	var id string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		id, args = args[0], args[1:]
	}
	var sf storeFlags
	fs := flag.NewFlagSet("user "+sub, flag.ContinueOnError)
	sf.register(fs)
	var email string
	var admin, passwordStdin bool
	switch sub {
	case "add":
		fs.StringVar(&email, "email", "", "email address (optional, unique)")
		fs.BoolVar(&admin, "admin", false, "give the admin role")
		fs.BoolVar(&passwordStdin, "password-stdin", false, "read the password from the first line of stdin (required)")
	case "disable":
	default:
		return usagef("user: unknown subcommand %q (want add or disable)", sub)
	}
	if err := parseFlags(fs, args, getenv); err != nil {
		return err
	}
	if id == "" && fs.NArg() > 0 {
		id = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return usagef("user %s: unexpected argument %q", sub, fs.Arg(0))
	}
	if id == "" {
		return usagef("user %s: a user id is required", sub)
	}
	var password string
	if sub == "add" {
		if !passwordStdin {
			return usagef("user add: --password-stdin is required (a password never goes on the command line)")
		}
		line, err := bufio.NewReader(stdin).ReadString('\n')
		if err != nil && err != io.EOF {
			return fmt.Errorf("reading the password: %w", err)
		}
		password = strings.TrimRight(line, "\r\n")
		if password == "" {
			return usagef("user add: the password read from stdin is empty")
		}
		if err := parley.ValidateNewPassword(password); err != nil {
			return err // before opening the store: nothing is created
		}
	}
	store, _, err := sf.open(ctx, parley.Options{})
	if err != nil {
		return err
	}
	defer store.Close()
	switch sub {
	case "add":
		role := parley.RoleUser
		if admin {
			role = parley.RoleAdmin
		}
		u, err := store.CreateUser(ctx, parley.NewUser{ID: id, Email: email, Password: password, Role: role})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "created user %s (%s)\n", u.ID, u.Role)
	case "disable":
		if err := store.SetUserDisabled(ctx, id, true); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "disabled user %s\n", id)
	}
	return nil
}
