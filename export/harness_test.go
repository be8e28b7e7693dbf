package export

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/config"
	"github.com/parleychat/parley/fault"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/postgres/pgtest"
	"github.com/parleychat/parley/sqlite"
)

// opener opens a fresh, empty store.
type opener func(t *testing.T) parley.Store

// backends runs fn on SQLite and, when PARLEY_TEST_POSTGRES is set, on
// PostgreSQL (skipped with instructions otherwise). parallel runs the two
// as parallel subtests; tests that arm faults pass false (the fault points
// are process-wide).
func backends(t *testing.T, parallel bool, fn func(t *testing.T, open opener)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		if parallel {
			t.Parallel()
		}
		fn(t, func(t *testing.T) parley.Store {
			t.Helper()
			s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"), parley.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
	t.Run("postgres", func(t *testing.T) {
		if parallel {
			t.Parallel()
		}
		pgtest.Server(t) // skips without PARLEY_TEST_POSTGRES
		fn(t, func(t *testing.T) parley.Store {
			t.Helper()
			s, err := postgres.Open(context.Background(), pgtest.DSN(t), parley.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
}

// arm arms fault points for the rest of the test.
func arm(t *testing.T, spec string) {
	t.Helper()
	if err := fault.Arm(spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fault.Arm("") })
}

func cfg(t *testing.T, yaml string) func() *config.Config {
	t.Helper()
	c, warnings, err := config.Parse([]byte(yaml))
	if err != nil || len(warnings) > 0 {
		t.Fatalf("config %q: %v %v", yaml, err, warnings)
	}
	return func() *config.Config { return c }
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// world is seeded data: ana and ben share c-big (410 messages) and
// c-small (25, ben leaves after 10); cleo has c-other, which ana never
// saw.
type world struct {
	st            parley.Store
	ana, ben, cle parley.Principal
}

const (
	bigMessages   = 410 // 3 shards: 200, 200, 10
	smallMessages = 25  // 1 shard
	anaShards     = 4
)

func principal(user string) parley.Principal {
	return parley.Principal{User: user, DeviceID: "d1", InstallID: "i1", Role: parley.RoleUser}
}

func seed(t *testing.T, st parley.Store) *world {
	t.Helper()
	ctx := ctxT(t)
	w := &world{st: st, ana: principal("ana"), ben: principal("ben"), cle: principal("cleo")}
	for _, u := range []string{"ana", "ben", "cleo"} {
		if _, err := st.CreateUser(ctx, parley.NewUser{ID: u}); err != nil {
			t.Fatal(err)
		}
	}
	mk := func(p parley.Principal, id string, members ...string) {
		if _, err := st.CreateConversation(ctx, p, parley.NewConversation{ID: id, Kind: parley.KindGroup, Title: id, Members: members}); err != nil {
			t.Fatal(err)
		}
	}
	mk(w.ana, "c-big", "ben")
	mk(w.ana, "c-small", "ben")
	mk(w.cle, "c-other")
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	send := func(conv string, from, to int, who func(i int) parley.Principal) {
		for i := from; i < to; i++ {
			// Bodies with JSON's awkward characters, to pin the encoding.
			body := fmt.Sprintf("msg %d of %s <&> \"quoted\" é\n", i, conv)
			if _, err := st.Send(ctx, who(i), parley.SendRequest{Conv: conv, CMID: fmt.Sprintf("%s-%d", conv, i), Body: body}); err != nil {
				errs <- err
				return
			}
		}
	}
	alt := func(i int) parley.Principal {
		if i%2 == 0 {
			return w.ana
		}
		return w.ben
	}
	wg.Go(func() { send("c-big", 0, bigMessages, alt) })
	wg.Go(func() {
		send("c-small", 0, 10, alt)
		if _, err := st.RemoveMember(ctx, w.ana, "c-small", "ben"); err != nil {
			errs <- err
			return
		}
		send("c-small", 10, smallMessages, func(int) parley.Principal { return w.ana })
	})
	wg.Go(func() { send("c-other", 0, 5, func(int) parley.Principal { return w.cle }) })
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// ana recalls her first message of c-big (seq 3) before the export.
	if _, err := st.Recall(ctx, w.ana, parley.RecallRequest{Conv: "c-big", Target: 3, CMID: "r1"}); err != nil {
		t.Fatal(err)
	}
	return w
}

// create creates an export job of scope for p: always a new job (NoReuse),
// since these tests compare runs of one snapshot.
func (w *world) create(t *testing.T, p parley.Principal, key, scope string) parley.ExportJob {
	t.Helper()
	j, err := w.st.CreateExport(ctxT(t), p, parley.ExportRequest{Key: key, Scope: scope, NoReuse: true})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// expected is the JSONL p's "all" export holds now: every message p can
// read through Sync, per conversation in id order, keys sorted by
// encoding/json's map encoding (independent of the package's struct).
func (w *world) expected(t *testing.T, p parley.Principal, convs ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	for _, c := range convs {
		var after int64
		for {
			pg, err := w.st.Sync(ctxT(t), p, parley.SyncRequest{Conv: c, After: after, Limit: parley.MaxPage})
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range pg.Events {
				if ev.Kind != parley.EventMessage {
					continue
				}
				b, err := json.Marshal(map[string]any{
					"at": ev.At.UTC().Format("2006-01-02T15:04:05.000Z"), "body": ev.Body, "conv": ev.Conv,
					"device": ev.Device, "kind": string(ev.Kind), "mid": ev.MID, "recalled": ev.Recalled,
					"sender": ev.Sender, "seq": ev.Seq,
				})
				if err != nil {
					t.Fatal(err)
				}
				buf.Write(b)
				buf.WriteByte('\n')
			}
			if !pg.HasMore {
				break
			}
			after = pg.NextAfter
		}
	}
	return buf.Bytes()
}

// jsonHTML undoes encoding/json's HTML escaping, which the export turns off.
func jsonHTML(b []byte) []byte {
	r := strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&")
	return []byte(r.Replace(string(b)))
}

// worker returns a Worker on dir with test timings.
func newWorker(t *testing.T, st parley.Store, dir string, conf func() *config.Config) *Worker {
	t.Helper()
	if conf == nil {
		conf = cfg(t, "export: {retries: 3, backoff: 10ms, keep: 1h}\n")
	}
	return NewWorker(Options{
		Store: st, Dir: dir, Config: conf, Workers: 1, Lease: 2 * time.Second,
		Poll: 10 * time.Millisecond, Janitor: time.Hour, Log: testLog(t),
	})
}

func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// jobReader reads a job: every store the tests give a Worker is a whole
// parley.Store.
type jobReader interface {
	ExportJob(ctx context.Context, id string) (parley.ExportJob, error)
}

// run runs w until until(job) holds for job id (or the test's patience
// ends), then stops it and waits for Run to return.
func run(t *testing.T, w *Worker, id string, until func(parley.ExportJob) bool) parley.ExportJob {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	deadline := time.Now().Add(45 * time.Second)
	for {
		j, err := w.o.Store.(jobReader).ExportJob(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if until(j) && (!terminal(j) || w.Running() == 0) {
			// A job the store shows ended may still be finishing in the
			// worker (removing its shards after the commit): stopping the
			// worker then would leave them for the janitor.
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: still %+v", id, j)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func terminal(j parley.ExportJob) bool {
	return j.State == parley.ExportDone || j.State == parley.ExportFailed
}

func isDone(j parley.ExportJob) bool { return j.State == parley.ExportDone }

func isState(s parley.ExportState) func(parley.ExportJob) bool {
	return func(j parley.ExportJob) bool { return j.State == s }
}

// gunzip reads a gzip file whole.
func gunzip(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// files lists the names under dir (recursively, relative), sorted.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && p != dir {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}
