package loadtest

import (
	"context"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestDeviceHaltRun: the fault loops halt and resume a device from many
// goroutines at once (two disconnects of one device overlap). However
// they interleave, the client's connection loop is never started while
// the previous one is still ending — which the client refuses, leaving
// the device offline for the rest of the run.
func TestDeviceHaltRun(t *testing.T) {
	// A port nobody listens on: Run keeps dialing and backing off.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "ws://" + ln.Addr().String() + "/ws"
	ln.Close()

	dir := t.TempDir()
	d := &device{r: &runner{}, user: "ana", name: "d1", token: "t", outbox: dir + "/ana-d1.outbox"}
	if err := d.open(context.Background(), []string{url}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.halt()
		d.c.Close()
		d.logFile.Close()
	})
	d.run()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 40 {
				d.halt()
				time.Sleep(time.Duration((g+i)%3) * time.Millisecond)
				d.run()
			}
		})
	}
	wg.Wait()
	b, err := os.ReadFile(d.outbox + ".log")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "client stopped") {
		t.Fatalf("a resume found the client still running:\n%s", b)
	}
}
