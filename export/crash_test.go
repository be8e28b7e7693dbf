package export

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/fault"
	"github.com/parleychat/parley/sqlite"
)

// TestCrashAfterShard: a worker process killed (SIGKILL, as by a power
// cut) at export.after_shard=crash@2 leaves a running job; after its lease
// runs out another worker takes it over, skips the two shards, and the
// artifact has the bytes of an uninterrupted run. SQLite only: the child
// process needs the database file.
func TestCrashAfterShard(t *testing.T) {
	if db := os.Getenv("PARLEY_EXPORT_CRASH_DB"); db != "" {
		crashChild(t, db, os.Getenv("PARLEY_EXPORT_CRASH_DIR"))
		return
	}
	t.Parallel()
	file := filepath.Join(t.TempDir(), "parley.db")
	st, err := sqlite.Open(context.Background(), file, parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	w := seed(t, st)
	job := w.create(t, w.ana, "k1", "all")
	dir := t.TempDir()

	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashAfterShard$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PARLEY_EXPORT_CRASH_DB="+file, "PARLEY_EXPORT_CRASH_DIR="+dir)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child: %v, want killed by SIGKILL; output:\n%s", err, out)
	}
	j, err := st.ExportJob(ctxT(t), job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != parley.ExportRunning || j.Done != 2 {
		t.Fatalf("after the crash: %+v; want running with 2 shards", j)
	}
	wk := newWorker(t, st, dir, nil)
	var rec record
	wk.afterShard = rec.hook
	got := run(t, wk, job.ID, isDone)
	if got.Attempts != 2 || wk.Stats().ShardsSkipped != 2 || len(rec.written) != anaShards-2 {
		t.Errorf("takeover: attempts %d, stats %+v, wrote %v", got.Attempts, wk.Stats(), rec.written)
	}
	ref := w.create(t, w.ana, "ref", "all")
	refJob := run(t, newWorker(t, st, t.TempDir(), nil), ref.ID, isDone)
	if refJob.SHA256 != got.SHA256 {
		t.Errorf("after a crash: %s; uninterrupted: %s", got.SHA256, refJob.SHA256)
	}
}

func crashChild(t *testing.T, file, dir string) {
	st, err := sqlite.Open(context.Background(), file, parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := fault.Arm("export.after_shard=crash@2"); err != nil {
		t.Fatal(err)
	}
	wk := NewWorker(Options{Store: st, Dir: dir, Workers: 1, Lease: time.Second, Poll: 10 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wk.Run(ctx)
	t.Fatal("the child was not killed")
}
