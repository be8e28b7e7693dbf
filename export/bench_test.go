package export

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/postgres/pgtest"
)

// benchConvs is the number of group conversations the exported messages
// are spread over (the export size is exact: N/benchConvs each, the rest in
// the first).
const benchConvs = 4

// BenchmarkExportPostgres measures issue 5: one "all" export of N visible
// message events on PostgreSQL, from CreateExport to the job being done
// (ns/op), against `psql -c "COPY (SELECT the same rows) TO STDOUT" | gzip`
// on the same database in the same run. Each iteration runs the export
// (timed) and then the baseline (untimed, on its own clock), so both see
// the same cache and checkpoint weather. Metrics:
//
//	export-s, copy-gzip-s  mean seconds of one export, one psql COPY | gzip
//	x-copy-gzip            export-s / copy-gzip-s
//	copy-gzip9-s           the baseline with gzip -9, the export's level
//	x-copy-gzip9           export-s / copy-gzip9-s
//	artifact-MB/s          artifact bytes / export-s (MB = 10^6 bytes)
//	jsonl-MB/s             uncompressed JSONL bytes / export-s
//	artifact-MB, jsonl-MB  the sizes
//	peak-heap-MB           highest heap in use (runtime/metrics, sampled
//	                       every 2ms) during any export, after a GC before it
//	peak-growth-MB         highest (peak - heap in use after that GC)
//
// Run it (the events are inserted with raw SQL, outside the timer):
//
//	PARLEY_TEST_POSTGRES=postgres://postgres@127.0.0.1:5432/parley_test?sslmode=disable \
//	  go test ./export/ -run '^$' -bench BenchmarkExportPostgres -benchtime 3x -count 2
func BenchmarkExportPostgres(b *testing.B) {
	if os.Getenv(pgtest.Env) == "" {
		b.Skip("BenchmarkExportPostgres needs PostgreSQL: set " + pgtest.Env +
			"=postgres://USER@HOST:5432/postgres?sslmode=disable (a role that may CREATE DATABASE)")
	}
	psql, err := exec.LookPath("psql")
	if err != nil {
		b.Skip("BenchmarkExportPostgres compares with psql, which is not installed")
	}
	for _, f := range strings.Split(*benchExportSizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("-export-sizes %q: want comma-separated event counts", *benchExportSizes)
		}
		b.Run("events="+strconv.Itoa(n), func(b *testing.B) { benchExport(b, psql, n) })
	}
}

// benchExportSizes are the export sizes BenchmarkExportPostgres runs; a
// million events (seeded in about a minute) is for the flat-heap check:
//
//	go test ./export/ -run '^$' -bench BenchmarkExportPostgres -benchtime 1x -args -export-sizes 10000,1000000
var benchExportSizes = flag.String("export-sizes", "10000,100000", "BenchmarkExportPostgres: comma-separated numbers of exported events")

func benchExport(b *testing.B, psql string, n int) {
	ctx := context.Background()
	dsn := pgtest.DSN(b)
	st, err := postgres.Open(ctx, dsn, parley.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	ana := principal("ana")
	convs := benchSeed(b, st, dsn, ana, n)
	copyCmd := benchCopyCommand(psql, pgtest.Libpq(dsn), ana.User, convs)

	// The baseline's rows are the export's: count them once.
	if got := benchShell(b, copyCmd+" | wc -l"); got != strconv.Itoa(n) {
		b.Fatalf("the COPY baseline reads %s rows, want %d", got, n)
	}

	root := b.TempDir()
	var (
		exportSecs, copySecs, copy9Secs float64
		artifactBytes, jsonlBytes       int64
		peak, growth                    uint64
		iters                           int
	)
	for b.Loop() {
		b.StopTimer()
		dir := filepath.Join(root, strconv.Itoa(iters))
		w := NewWorker(Options{Store: st, Dir: dir, Workers: 1, Poll: 5 * time.Millisecond, Janitor: time.Hour})
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- w.Run(runCtx) }()
		runtime.GC()
		base := heapInUse()
		stop := sampleHeap()
		b.StartTimer()

		start := time.Now()
		job, err := st.CreateExport(ctx, ana, parley.ExportRequest{Key: "bench-" + parley.NewID()[:30], Scope: parley.ExportScopeAll, NoReuse: true})
		if err != nil {
			b.Fatal(err)
		}
		w.Kick()
		for w.Stats().Artifacts == 0 {
			time.Sleep(time.Millisecond)
		}
		took := time.Since(start)

		b.StopTimer()
		p := stop()
		peak, growth = max(peak, p), max(growth, p-min(p, base))
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		job, err = st.ExportJob(ctx, job.ID)
		if err != nil {
			b.Fatal(err)
		}
		if job.State != parley.ExportDone {
			b.Fatalf("job %s: %+v", job.ID, job)
		}
		if iters == 0 {
			benchVerify(b, st, job.ID, n)
			lines, size := benchGunzip(b, ArtifactPath(dir, job.ID))
			if lines != n {
				b.Fatalf("artifact holds %d lines, want %d", lines, n)
			}
			jsonlBytes = size
		}
		artifactBytes = job.Bytes
		exportSecs += took.Seconds()
		copySecs += benchTime(b, copyCmd+" | gzip > /dev/null")
		copy9Secs += benchTime(b, copyCmd+" | gzip -9 > /dev/null")
		iters++
		os.RemoveAll(dir)
		b.StartTimer()
	}
	if iters == 0 {
		return
	}
	e, c, c9 := exportSecs/float64(iters), copySecs/float64(iters), copy9Secs/float64(iters)
	b.ReportMetric(e, "export-s")
	b.ReportMetric(c, "copy-gzip-s")
	b.ReportMetric(e/c, "x-copy-gzip")
	b.ReportMetric(c9, "copy-gzip9-s")
	b.ReportMetric(e/c9, "x-copy-gzip9")
	b.ReportMetric(float64(artifactBytes)/1e6, "artifact-MB")
	b.ReportMetric(float64(jsonlBytes)/1e6, "jsonl-MB")
	b.ReportMetric(float64(artifactBytes)/1e6/e, "artifact-MB/s")
	b.ReportMetric(float64(jsonlBytes)/1e6/e, "jsonl-MB/s")
	b.ReportMetric(float64(peak)/1e6, "peak-heap-MB")
	b.ReportMetric(float64(growth)/1e6, "peak-growth-MB")
}

// benchSeed creates ana and ben, benchConvs group conversations of ana's
// with ben through the Store, and then n message events among them with raw
// SQL, as Store.Send would leave them (kind 'message', a fresh mid and a
// distinct cmid each, next_seq and last_at advanced). It returns the
// conversation ids.
func benchSeed(b *testing.B, st parley.Store, dsn string, ana parley.Principal, n int) []string {
	b.Helper()
	ctx := context.Background()
	for _, u := range []string{"ana", "ben"} {
		if _, err := st.CreateUser(ctx, parley.NewUser{ID: u}); err != nil {
			b.Fatal(err)
		}
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	var convs []string
	for i := range benchConvs {
		id := fmt.Sprintf("c-bench-%d", i)
		convs = append(convs, id)
		if _, err := st.CreateConversation(ctx, ana, parley.NewConversation{ID: id, Kind: parley.KindGroup, Title: id, Members: []string{"ben"}}); err != nil {
			b.Fatal(err)
		}
		count := n / benchConvs
		if i == 0 {
			count += n % benchConvs
		}
		// Bodies of 60–92 bytes; senders alternate; created_at steps by a
		// millisecond and ends now.
		if _, err := pool.Exec(ctx, `WITH c AS (SELECT next_seq FROM conversations WHERE id = $1 FOR UPDATE),
ins AS (
	INSERT INTO events (conv_id, seq, mid, kind, sender_user, sender_device, cmid, body, created_at)
	SELECT $1, c.next_seq + g, gen_random_uuid()::text, 'message',
		CASE WHEN g % 2 = 0 THEN 'ana' ELSE 'ben' END, 'd1', 'bench-' || g,
		'message ' || g || ' of ' || $1 || ': ' || substr(md5(g::text) || md5((g + 7)::text), 1, 36 + g % 29),
		clock_timestamp() - ($2::int - g) * interval '1 millisecond'
	FROM c, generate_series(0, $2::int - 1) g
	RETURNING seq, created_at)
UPDATE conversations SET next_seq = (SELECT max(seq) + 1 FROM ins), last_at = (SELECT max(created_at) FROM ins)
WHERE id = $1`, id, count); err != nil {
			b.Fatal(err)
		}
	}
	// What autovacuum would have done by the time anyone exports.
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE events`); err != nil {
		b.Fatal(err)
	}
	// ana reads exactly n messages through the Store.
	seen := 0
	for _, c := range convs {
		var after int64
		for {
			pg, err := st.Sync(ctx, ana, parley.SyncRequest{Conv: c, After: after, Limit: parley.MaxPage})
			if err != nil {
				b.Fatal(err)
			}
			for _, ev := range pg.Events {
				if ev.Kind == parley.EventMessage {
					seen++
				}
			}
			if !pg.HasMore {
				break
			}
			after = pg.NextAfter
		}
	}
	if seen != n {
		b.Fatalf("ana sees %d messages, want %d", seen, n)
	}
	return convs
}

// benchVerify checks that job's snapshot counts n messages.
func benchVerify(b *testing.B, st parley.Store, job string, n int) {
	b.Helper()
	snap, err := st.ExportSnapshot(context.Background(), job)
	if err != nil {
		b.Fatal(err)
	}
	var got int64
	for _, c := range snap {
		got += c.Messages
	}
	if got != int64(n) {
		b.Fatalf("snapshot counts %d messages, want %d", got, n)
	}
}

// benchCopyCommand is the baseline's psql: the export's rows (user's
// message events inside their periods, in conversation id then seq order)
// with the columns of a JSONL line, as COPY text.
func benchCopyCommand(psql, dsn, user string, convs []string) string {
	q := fmt.Sprintf(`COPY (SELECT e.created_at, CASE WHEN e.recall_seq IS NULL THEN e.body ELSE '' END, e.conv_id,
	e.sender_device, e.kind, e.mid, e.recall_seq IS NOT NULL, e.sender_user, e.seq
FROM events e JOIN periods p ON p.conv_id = e.conv_id AND p.user_id = '%s'
	AND e.seq >= p.from_seq AND (p.to_seq IS NULL OR e.seq <= p.to_seq)
WHERE e.kind = 'message' AND e.conv_id IN ('%s')
ORDER BY e.conv_id COLLATE "C", e.seq) TO STDOUT`, user, strings.Join(convs, "', '"))
	return shellQuote(psql) + " -X -q " + shellQuote(dsn) + " -c " + shellQuote(q)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// benchShell runs cmd with bash (pipefail) and returns its trimmed output.
func benchShell(b *testing.B, cmd string) string {
	b.Helper()
	var out, errb bytes.Buffer
	c := exec.Command("bash", "-c", "set -o pipefail; "+cmd)
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		b.Fatalf("%s: %v: %s", cmd, err, errb.String())
	}
	return strings.TrimSpace(out.String())
}

// benchTime returns the seconds cmd takes.
func benchTime(b *testing.B, cmd string) float64 {
	b.Helper()
	start := time.Now()
	benchShell(b, cmd)
	return time.Since(start).Seconds()
}

// benchGunzip returns the lines and uncompressed size of a gzip file.
func benchGunzip(b *testing.B, path string) (lines int, size int64) {
	b.Helper()
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		b.Fatal(err)
	}
	br := bufio.NewReaderSize(zr, 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		size += int64(len(line))
		if err == io.EOF {
			break
		}
		if err != nil && err != bufio.ErrBufferFull {
			b.Fatal(err)
		}
		if err == nil {
			lines++
		}
	}
	return lines, size
}

// heapMetrics are the runtime/metrics whose sum is MemStats.HeapInuse
// (read without stopping the world, unlike runtime.ReadMemStats).
var heapMetrics = []string{"/memory/classes/heap/objects:bytes", "/memory/classes/heap/unused:bytes"}

func heapInUse() uint64 {
	s := make([]metrics.Sample, len(heapMetrics))
	for i, name := range heapMetrics {
		s[i].Name = name
	}
	metrics.Read(s)
	var sum uint64
	for _, x := range s {
		sum += x.Value.Uint64()
	}
	return sum
}

// sampleHeap samples heapInUse every 2ms until the returned func is
// called, which returns the highest value seen.
func sampleHeap() func() uint64 {
	var (
		wg   sync.WaitGroup
		peak = heapInUse()
		quit = make(chan struct{})
	)
	wg.Go(func() {
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				peak = max(peak, heapInUse())
			}
		}
	})
	return func() uint64 {
		close(quit)
		wg.Wait()
		return max(peak, heapInUse())
	}
}
