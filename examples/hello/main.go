// Command hello is the smallest Parley client: it logs in over HTTP, opens
// the Go client library on a local outbox file, sends one message, and
// prints every event it receives until -wait has passed.
//
//	go run ./cmd/parley serve --demo                        # terminal 1
//	go run ./examples/hello -login ana -body "" -wait 1m    # terminal 2: listen
//	go run ./examples/hello -login ben -body "hi ana"       # terminal 3: send
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/wire"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "hello:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("hello", flag.ContinueOnError)
	server := fs.String("server", "http://127.0.0.1:8080", "Parley server")
	login := fs.String("login", "ben", "user id or email")
	password := fs.String("password", "parley-demo", "password")
	conv := fs.String("conv", "c-team", "conversation to send to")
	body := fs.String("body", "hello from Go", "message to send (empty: only listen)")
	wait := fs.Duration("wait", 3*time.Second, "how long to print incoming events")
	dir := fs.String("dir", filepath.Join(os.TempDir(), "parley-hello"), "where the outbox file lives")
	if err := fs.Parse(args); err != nil {
		return err
	}

	// 1. Log in: one device per login on this machine, a new install per run.
	install := make([]byte, 8)
	rand.Read(install)
	token, err := client.Login(ctx, nil, *server, parley.LoginRequest{Login: *login, Password: *password, DeviceID: "hello-" + *login, InstallID: hex.EncodeToString(install)})
	if err != nil {
		return err
	}

	// 2. Open the client: the outbox and the cursors live in one local file.
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return err
	}
	p := &printer{w: stdout}
	c, err := client.Open(ctx, client.Options{
		URLs:    []string{"ws" + strings.TrimPrefix(*server, "http") + "/ws"},
		Token:   token,
		Outbox:  filepath.Join(*dir, *login+".outbox"),
		Handler: p,
	})
	if err != nil {
		return err
	}
	defer c.Close()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(runCtx) }()

	// 3. Send: on disk first, then on the wire; Send returns its outcome.
	if *body != "" {
		sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
		it, err := c.Send(sctx, *conv, *body)
		scancel()
		if err != nil {
			return err
		}
		if it.Code != "" {
			return fmt.Errorf("send refused: %s: %s", it.Code, it.Msg)
		}
		p.printf("sent %s #%d (dup=%v)\n", *conv, it.Seq, it.Dup)
	}

	// 4. Print what arrives.
	select {
	case <-time.After(*wait):
	case <-ctx.Done():
	case err := <-runErr:
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
	return nil
}

// printer prints every message event the client applies, in order.
type printer struct {
	client.NopHandler
	mu sync.Mutex
	w  io.Writer
}

func (p *printer) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format, args...)
}

func (p *printer) Events(conv string, _ int64, evs []wire.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ev := range evs {
		switch ev.Kind {
		case "message":
			if ev.Recalled {
				fmt.Fprintf(p.w, "%s #%d %s: (recalled)\n", conv, ev.Seq, ev.Sender)
			} else {
				fmt.Fprintf(p.w, "%s #%d %s: %s\n", conv, ev.Seq, ev.Sender, ev.Body)
			}
		case "member_joined", "member_left":
			fmt.Fprintf(p.w, "%s #%d %s %s\n", conv, ev.Seq, ev.User, strings.TrimPrefix(ev.Kind, "member_"))
		}
	}
}
