package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/parleychat/parley"
)

// runConv is `parley conv list|show`: reads of the store, for operators on
// the server's host. Reads are not audited (the command line changes
// nothing here).
func runConv(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) == 0 {
		return usagef("conv: want list or show (see parley conv --help)")
	}
	if wantsHelp(args) {
		return helpRequest{groupHelp["conv"]}
	}
	sub, args := args[0], args[1:]
	if sub != "list" && sub != "show" {
		return usagef("conv: unknown command %q (want list or show)", sub)
	}
	var id string
	if sub == "show" && len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		id, args = args[0], args[1:]
	}
	var sf storeFlags
	fs := flag.NewFlagSet("conv "+sub, flag.ContinueOnError)
	sf.register(fs)
	if err := parseFlags(fs, args, getenv); err != nil {
		return err
	}
	if sub == "show" && id == "" && fs.NArg() > 0 {
		id = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return usagef("conv %s: unexpected argument %q", sub, fs.Arg(0))
	}
	if sub == "show" && id == "" {
		return usagef("conv show: a conversation id is required")
	}
	store, _, err := sf.open(ctx, parley.Options{})
	if err != nil {
		return err
	}
	defer store.Close()
	if sub == "show" {
		return showConv(ctx, store, id, stdout)
	}
	return listConvs(ctx, store, stdout)
}

// convStore is what `parley conv` reads of the store.
type convStore interface {
	Conversation(ctx context.Context, id string) (parley.Conversation, error)
	ConvMembers(ctx context.Context, conv string) ([]string, error)
	AdminConvs(ctx context.Context, q parley.AdminQuery) (parley.AdminPage[parley.AdminConv], error)
}

// showConv is `parley conv show ID`.
func showConv(ctx context.Context, store convStore, id string, stdout io.Writer) error {
	c, err := store.Conversation(ctx, id)
	if err != nil {
		return err
	}
	members, err := store.ConvMembers(ctx, id)
	if err != nil {
		return err
	}
	owner := c.Owner
	if owner == "" {
		owner = "-"
	}
	tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
	for _, row := range [][2]string{
		{"id", c.ID},
		{"kind", string(c.Kind)},
		{"title", c.Title},
		{"owner", owner},
		{"members", fmt.Sprintf("%d: %s", len(members), strings.Join(members, ", "))},
		{"head", fmt.Sprint(c.Head)},
		{"min_seq", fmt.Sprint(c.MinSeq)},
		{"epoch", fmt.Sprint(c.Epoch)},
		{"retention", retentionText(c.Retention)},
		{"created", c.CreatedAt.UTC().Format(time.RFC3339)},
	} {
		fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
	}
	return tw.Flush()
}

// listConvs is `parley conv list`.
func listConvs(ctx context.Context, store convStore, stdout io.Writer) error {
	tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tMEMBERS\tHEAD\tRETENTION\tTITLE")
	err := walkAdmin(ctx, store.AdminConvs, func(c parley.AdminConv) {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", c.ID, c.Kind, c.Members, c.Head, retentionText(c.Retention), c.Title)
	})
	if err != nil {
		return err
	}
	return tw.Flush()
}

// walkAdmin calls each for every item of an admin listing (the same paged
// reads as GET /api/admin/users and /convs), page by page in id order.
func walkAdmin[T any](ctx context.Context, list func(context.Context, parley.AdminQuery) (parley.AdminPage[T], error), each func(T)) error {
	q := parley.AdminQuery{Limit: parley.MaxAdminPage}
	for {
		page, err := list(ctx, q)
		if err != nil {
			return err
		}
		for _, it := range page.Items {
			each(it)
		}
		if !page.HasMore {
			return nil
		}
		q.After = page.Next
	}
}

// retentionText says a retention policy in the words of the operations
// API's fields: "keep all", or max_age and keep_last.
func retentionText(r parley.Retention) string {
	var parts []string
	if r.MaxAge > 0 {
		parts = append(parts, "max_age "+r.MaxAge.String())
	}
	if r.KeepLast > 0 {
		parts = append(parts, fmt.Sprintf("keep_last %d", r.KeepLast))
	}
	if len(parts) == 0 {
		return "keep all"
	}
	return strings.Join(parts, ", ")
}
