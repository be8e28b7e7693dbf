// Command searchbench seeds a store with a chat history for the search
// benchmarks and measures search on it (docs/benchmarks.md):
//
//	go run ./bench/searchbench seed  --db sqlite:/tmp/s.db | postgres://…   1,000,000 messages, 1,000 conversations
//	go run ./bench/searchbench query --db …                                  one-word and two-character Chinese queries: p50/p95/p99
//	go run ./bench/searchbench size  --db …                                  the index's size per message
//	go run ./bench/searchbench sample [-n 20]                                what the messages look like
//
// seed writes through the Store (batches of sends, as the gateway's group
// commit does), so the index is written as a server writes it. The
// history: --users senders, --convs group conversations of 3–8 of them,
// --messages messages spread at random over the conversations (English,
// Chinese, mixed, some emoji: corpus.go), and one user, --reader, a
// member of --member-convs of the conversations from their start. query
// searches as that user, over all their conversations, and reports the
// latency of the first page. The same --seed writes the same history.
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

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/sqlite"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "searchbench: "+err.Error())
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("want seed, query, size or sample (searchbench COMMAND --help)")
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := fs.String("db", "", "the store: sqlite:FILE or postgres://… (required)")
	reader := fs.String("reader", "reader", "the user who searches (seed: the member of --member-convs conversations)")
	var do func(context.Context, parley.Store) error
	switch cmd {
	case "seed":
		f := seedFlags{reader: reader, out: stderr}
		f.register(fs)
		do = f.run
	case "query":
		f := queryFlags{reader: reader, out: stdout, log: stderr}
		f.register(fs)
		do = f.query
	case "size":
		return sizeCommand(ctx, fs, args, db, stdout)
	case "sample":
		n := fs.Int("n", 20, "messages to print")
		seed := fs.Uint64("seed", 1, "random seed, as seed's")
		if err := fs.Parse(args); err != nil {
			return err
		}
		c := newCorpus(*seed)
		for range *n {
			fmt.Fprintln(stdout, c.body())
		}
		return nil
	default:
		return fmt.Errorf("unknown command %q: want seed, query, size or sample", cmd)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *db == "" {
		return errors.New("--db is required")
	}
	store, err := openStore(ctx, *db)
	if err != nil {
		return err
	}
	defer store.Close()
	return do(ctx, store)
}

// openStore opens (and migrates) the store a DSN names, as parley serve
// does, without a secret key (the benchmark keeps no secrets).
func openStore(ctx context.Context, dsn string) (parley.Store, error) {
	if file, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		db, err := sqlite.Open(ctx, file, parley.Options{})
		if err != nil {
			return nil, err
		}
		return db, nil
	}
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		db, err := postgres.Open(ctx, dsn, parley.Options{})
		if err != nil {
			return nil, err
		}
		return db, nil
	}
	return nil, fmt.Errorf("--db %q: want sqlite:FILE or postgres://…", dsn)
}
