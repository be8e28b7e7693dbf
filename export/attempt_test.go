package export

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley"
)

// attempts records what Options.Attempt hears.
type attempts struct {
	mu       sync.Mutex
	outcomes []string
}

func (a *attempts) hear(outcome string, d time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if d >= 0 {
		a.outcomes = append(a.outcomes, outcome)
	}
}

func (a *attempts) got() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.outcomes)
}

// Every attempt reports its outcome once (for the export metrics): a full
// disk is "retry" until the retries run out, then "failed"; a clean run is
// "done".
func TestAttemptOutcomes(t *testing.T) {
	backends(t, false, func(t *testing.T, open opener) {
		w := seed(t, open(t))
		conf := cfg(t, "export: {retries: 1, backoff: 1ms}\n")
		rec := &attempts{}
		worker := func() *Worker {
			wk := newWorker(t, w.st, t.TempDir(), conf)
			wk.o.Attempt = rec.hear
			return wk
		}
		arm(t, "export.write=unavailable")
		job := w.create(t, w.ana, "k1", "all")
		run(t, worker(), job.ID, isState(parley.ExportFailed))
		arm(t, "")
		job = w.create(t, w.ana, "k2", "all")
		run(t, worker(), job.ID, isDone)
		if got, want := rec.got(), []string{"retry", "failed", "done"}; !slices.Equal(got, want) {
			t.Errorf("outcomes %v, want %v", got, want)
		}
	})
}
