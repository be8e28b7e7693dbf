package export

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/fault"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/postgres/pgtest"
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

// TestCrashMidPipeline: a worker process in the ordinary (not lab) mode is
// killed with SIGKILL once some shards are recorded: at any point, wherever
// the writers, the recorder and the compressor were. Its eighth shard write
// hangs (export.write=delay@8), so the kill always finds the job partly
// done, however late a loaded machine lets the parent look. Every
// recorded shard then has its file (a record follows its fsynced file);
// the rerun rewrites no shard whose file was in place, recorded or not,
// and its artifact has the bytes of an uninterrupted run. Both stores: the
// child opens the same database.
func TestCrashMidPipeline(t *testing.T) {
	if kind := os.Getenv("PARLEY_EXPORT_PIPE_KIND"); kind != "" {
		pipelineChild(t, kind, os.Getenv("PARLEY_EXPORT_PIPE_DB"), os.Getenv("PARLEY_EXPORT_PIPE_DIR"))
		return
	}
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			db := filepath.Join(t.TempDir(), "parley.db")
			if kind == "postgres" {
				db = pgtest.DSN(t) // skips without PARLEY_TEST_POSTGRES
			}
			st := openKind(t, kind, db)
			t.Cleanup(func() { st.Close() })
			w := seed(t, st)
			// More shards than writers: 1,300 more messages in c-big.
			ctx := ctxT(t)
			for i := range 1300 {
				if _, err := st.Send(ctx, w.ana, parley.SendRequest{Conv: "c-big", CMID: fmt.Sprintf("more-%d", i), Body: fmt.Sprintf("more %d", i)}); err != nil {
					t.Fatal(err)
				}
			}
			ref := w.create(t, w.ana, "ref", "all")
			want := run(t, newWorker(t, st, t.TempDir(), nil), ref.ID, isDone)
			job := w.create(t, w.ana, "k1", "all")
			dir := t.TempDir()

			cmd := exec.Command(os.Args[0], "-test.run=^TestCrashMidPipeline$", "-test.count=1")
			cmd.Env = append(os.Environ(), "PARLEY_EXPORT_PIPE_KIND="+kind, "PARLEY_EXPORT_PIPE_DB="+db, "PARLEY_EXPORT_PIPE_DIR="+dir)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(45 * time.Second)
			for {
				j, err := st.ExportJob(ctx, job.ID)
				if err != nil {
					t.Fatal(err)
				}
				if j.Done >= 3 {
					break
				}
				if time.Now().After(deadline) {
					cmd.Process.Kill()
					cmd.Wait()
					t.Fatalf("the child recorded no 3 shards: %+v\n%s", j, out.Bytes())
				}
				time.Sleep(time.Millisecond)
			}
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()

			crashed, err := st.ExportJob(ctx, job.ID)
			if err != nil {
				t.Fatal(err)
			}
			recs, err := st.ExportShards(ctx, job.ID)
			if err != nil {
				t.Fatal(err)
			}
			if crashed.Total < 8 {
				t.Fatalf("the job has %d shards; the child's hang needs at least 8", crashed.Total)
			}
			if crashed.State != parley.ExportRunning || crashed.Done != len(recs) || crashed.Done == crashed.Total {
				t.Fatalf("after the kill: %+v with %d records; want running, partly done", crashed, len(recs))
			}
			inPlace := map[int]bool{}
			for i := range crashed.Total {
				if _, err := os.Stat(shardPath(dir, job.ID, i)); err == nil {
					inPlace[i] = true
				}
			}
			for _, r := range recs {
				if !inPlace[r.Index] {
					t.Errorf("shard %d is recorded but has no file", r.Index)
				}
			}
			t.Logf("killed with %d of %d shards recorded, %d files in place", len(recs), crashed.Total, len(inPlace))

			wk := newWorker(t, st, dir, nil)
			var rec record
			wk.afterShard = rec.hook
			got := run(t, wk, job.ID, isDone)
			// Per index, not per count: on a loaded machine the rerun may
			// take more than one attempt (a busy store), and Stats adds up.
			wrote := map[int]bool{}
			for _, i := range rec.written {
				wrote[i] = true
				if inPlace[i] {
					t.Errorf("shard %d was in place after the crash and was written again", i)
				}
			}
			for i := range crashed.Total {
				if !inPlace[i] && !wrote[i] {
					t.Errorf("shard %d was neither in place nor written", i)
				}
			}
			if s := wk.Stats(); s.ShardsRewritten != 0 {
				t.Errorf("rerun stats %+v (attempts %d); want none rewritten", s, got.Attempts)
			}
			if got.SHA256 != want.SHA256 || got.Bytes != want.Bytes {
				t.Errorf("after the kill: %s (%d bytes); uninterrupted: %s (%d bytes)", got.SHA256, got.Bytes, want.SHA256, want.Bytes)
			}
		})
	}
}

func openKind(t *testing.T, kind, db string) parley.Store {
	t.Helper()
	var st parley.Store
	var err error
	if kind == "postgres" {
		st, err = postgres.Open(context.Background(), db, parley.Options{})
	} else {
		st, err = sqlite.Open(context.Background(), db, parley.Options{})
	}
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func pipelineChild(t *testing.T, kind, db, dir string) {
	st := openKind(t, kind, db)
	// The job has 10 shards and the artifact is written after them: hit 8
	// is a shard, and the job cannot finish before the kill (20 s, under
	// the parent's 45 s deadline and the child's own 30 s).
	if err := fault.Arm("export.write=delay:20s@8"); err != nil {
		t.Fatal(err)
	}
	wk := NewWorker(Options{Store: st, Dir: dir, Workers: 1, Lease: time.Second, Poll: 10 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wk.Run(ctx)
	t.Fatal("the child was not killed")
}
