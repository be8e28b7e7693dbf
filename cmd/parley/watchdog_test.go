package main

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"
)

// testHangLimit is the longest one end-to-end test may run before the
// watchdog stops the package. The longest test takes about 3 minutes
// alone under -race and about twice that beside the other packages in CI.
const testHangLimit = 15 * time.Minute

// started maps the name of each running test that started a server or a
// browser to its start.
var started sync.Map

// track records that t is running until it ends, for the watchdog. A
// benchmark is not tracked: its length is the caller's to choose
// (PARLEY_BENCH_SENDS), and -test.benchtime runs it more than once.
func track(t testing.TB) {
	t.Helper()
	if _, ok := t.(*testing.B); ok {
		return
	}
	if _, loaded := started.LoadOrStore(t.Name(), time.Now()); !loaded {
		t.Cleanup(func() { started.Delete(t.Name()) })
	}
}

// watchdog stops the test binary when a tracked test has run past limit.
// go test's own -timeout stops it too, but prints the goroutines after
// the name of the test, so a log cut to its end never names it; this
// prints the goroutines first and the test's name last.
func watchdog(limit time.Duration) {
	for range time.Tick(10 * time.Second) {
		started.Range(func(k, v any) bool {
			if d := time.Since(v.(time.Time)); d > limit {
				buf := make([]byte, 64<<20)
				os.Stderr.Write(buf[:runtime.Stack(buf, true)])
				fmt.Fprintf(os.Stderr, "\nwatchdog: %s has run %s, past %s; its goroutines are above\n", k, d.Round(time.Second), limit)
				os.Exit(2)
			}
			return true
		})
	}
}
