package postgres_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/postgres/pgtest"
)

// What only PostgreSQL has of files: the row locks that make the quota and
// the collector safe between gateways, and the bus that carries events.
// The behaviour both stores share is storetest's.

// readyFile uploads and finishes a file of size bytes for p.
func readyFile(t *testing.T, db *postgres.DB, p parley.Principal, name string, size int64) parley.File {
	t.Helper()
	ctx := context.Background()
	f, err := db.CreateUpload(ctx, p, parley.NewUpload{Name: name, Size: size, MaxSize: 1 << 30, Quota: 1 << 40})
	if err != nil {
		t.Fatalf("create upload: %v", err)
	}
	f, err = db.FinishUpload(ctx, p, f.ID, parley.FileMeta{MIME: "text/plain", SHA256: strings.Repeat("ab", 32)})
	if err != nil {
		t.Fatalf("finish upload: %v", err)
	}
	return f
}

// waitLockWaiters waits until n backends of conn's database wait for a
// lock (up to 10s).
func waitLockWaiters(t *testing.T, conn *pgx.Conn, n int) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var got int
		err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&got)
		if err != nil {
			t.Fatal(err)
		}
		if got >= n {
			return
		}
		if time.Now().After(end) {
			var sessions string
			conn.QueryRow(context.Background(), `SELECT string_agg(coalesce(wait_event_type, '-') || ' ' || state || ': ' || left(query, 60), E'\n')
				FROM pg_stat_activity WHERE datname = current_database()`).Scan(&sessions)
			t.Fatalf("after 10s: %d backends wait for a lock, want %d; sessions:\n%s", got, n, sessions)
		}
	}
}

// Uploads created at once on many connections, each a quarter of the
// quota: the owner's row lock lets exactly four in, the others are
// TOO_LARGE and store nothing.
func TestUploadQuotaConcurrent(t *testing.T) {
	const quota, n = 4 << 20, 16
	db, ana, _ := openChat(t, pgtest.WithPoolSize(pgtest.DSN(t), n))
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, errs[i] = db.CreateUpload(ctx, ana, parley.NewUpload{Name: "part.bin", Size: quota / 4, MaxSize: quota, Quota: quota})
		}()
	}
	close(start)
	wg.Wait()
	ok := 0
	for i, err := range errs {
		switch code := parley.ErrorCode(err); {
		case err == nil:
			ok++
		case code != parley.CodeTooLarge:
			t.Errorf("upload %d: %v (%s), want TOO_LARGE or success", i, err, code)
		}
	}
	if ok != 4 {
		t.Errorf("%d uploads succeeded, want 4", ok)
	}
	u, err := db.FileUsage(ctx, ana)
	if err != nil || u != (parley.FileUsage{Files: 4, Bytes: quota}) {
		t.Errorf("usage %+v, %v; want 4 files, %d bytes", u, err, quota)
	}
}

// The quota's sum is taken after the owner's row lock is granted: an
// upload committed by the transaction that held the lock counts, so the
// waiting upload is refused.
func TestUploadCountsWhatTheLockHolderCommitted(t *testing.T) {
	dsn := pgtest.DSN(t)
	db, ana, _ := openChat(t, dsn)
	ctx := context.Background()
	conn := admin(t, pgtest.Libpq(dsn))
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM users WHERE id = 'ana' FOR NO KEY UPDATE`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO files (id, owner, name, size, state) VALUES ('held', 'ana', 'held.bin', 600, 'uploading')`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := db.CreateUpload(ctx, ana, parley.NewUpload{Name: "late.bin", Size: 600, MaxSize: 1000, Quota: 1000})
		done <- err
	}()
	waitLockWaiters(t, admin(t, pgtest.Libpq(dsn)), 1)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; parley.ErrorCode(err) != parley.CodeTooLarge {
		t.Fatalf("upload after the holder's commit: %v; want TOO_LARGE", err)
	}
	if u, err := db.FileUsage(ctx, ana); err != nil || u != (parley.FileUsage{Files: 1, Bytes: 600}) {
		t.Errorf("usage %+v, %v; want only the holder's file", u, err)
	}
}

// A send holds its attachments key-share locked until its commit: the
// collector's DeleteFile, run while the send is inside its transaction,
// waits for it, then finds the link and keeps the file. The send is held
// between its lock on the file and its commit by a test transaction that
// inserted the very link row it is about to write (uncommitted: the
// send's insert waits on the primary key).
func TestDeleteFileWaitsForTheSend(t *testing.T) {
	dsn := pgtest.DSN(t)
	db, ana, root := openChat(t, dsn)
	ctx := context.Background()
	f := readyFile(t, db, ana, "a.txt", 10)
	conn := admin(t, pgtest.Libpq(dsn))
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO file_links (file_id, conv_id, seq) VALUES ($1, 'c-x', $2)`, f.ID, root.Seq+1); err != nil {
		t.Fatal(err)
	}
	sent := make(chan error, 1)
	go func() {
		_, err := db.Send(ctx, ana, parley.SendRequest{Conv: "c-x", CMID: "with-file", Attachments: []string{f.ID}})
		sent <- err
	}()
	watch := admin(t, pgtest.Libpq(dsn))
	waitLockWaiters(t, watch, 1) // the send, on the link's key
	deleted := make(chan error, 1)
	var gone bool
	go func() {
		var err error
		gone, err = db.DeleteFile(ctx, f.ID, parley.StaleFiles{UploadingBefore: time.Now().Add(time.Hour), UnlinkedBefore: time.Now().Add(time.Hour), Limit: 10})
		deleted <- err
	}()
	waitLockWaiters(t, watch, 2) // and the collector, on the file's row
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatalf("send: %v", err)
	}
	if err := <-deleted; err != nil || gone {
		t.Fatalf("DeleteFile: %v, %v; want the file kept", gone, err)
	}
	ben := parley.Principal{User: "ben", DeviceID: "laptop", InstallID: "i2"}
	if got, err := db.File(ctx, ben, f.ID); err != nil || got.ID != f.ID {
		t.Errorf("ben reads the attached file: %+v, %v", got, err)
	}
}

// The bus never carries attachments: a notice with an event that has
// some goes as ids only, and a receiver reads the event, attachments
// included, from the store (Feed).
func TestBusAttachmentsAsIDs(t *testing.T) {
	dsn := pgtest.DSN(t)
	db, ana, _ := openChat(t, dsn)
	ctx := context.Background()
	f := readyFile(t, db, ana, "photo.png", 1234)
	req := parley.SendRequest{Conv: "c-x", CMID: "with-file", Body: "look", Attachments: []string{f.ID}}
	sent, err := db.Send(ctx, ana, req)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := db.Fetch(ctx, ana, "c-x", sent.Seq)
	if err != nil {
		t.Fatal(err)
	}
	want := []parley.Attachment{parley.AttachmentOf(f)}
	if !reflect.DeepEqual(ev.Attachments, want) {
		t.Fatalf("fetched attachments %+v, want %+v", ev.Attachments, want)
	}

	ch := testChannel()
	pub, sub := newBus(t, busDSN(t), postgres.BusOptions{Channel: ch}), newBus(t, busDSN(t), postgres.BusOptions{Channel: ch})
	h := newHandler()
	run(t, sub, h)
	run(t, pub, newHandler())
	ready(t, pub, h)
	ids := parley.Notice{Conv: "c-x", Seq: sent.Seq}
	carrying := ids.WithEvent(ev, sent.Epoch)
	if carrying.Event == nil {
		t.Fatal("WithEvent did not attach the event")
	}
	pub.Publish(parley.SentNotice(ana, req, sent), carrying)
	h.waitUntil(t, "both notices", func() bool {
		n := 0
		for _, got := range h.ns {
			if got.Conv == "c-x" {
				n++
			}
		}
		return n == 2
	})
	h.mu.Lock()
	for _, got := range h.ns {
		if got.Conv == "c-x" && got != ids {
			t.Errorf("received %+v (event %v), want ids only %+v", got, got.Event, ids)
		}
	}
	h.mu.Unlock()
	feed, err := db.Feed(ctx, "c-x", sent.Seq-1, 1)
	if err != nil || len(feed.Events) != 1 {
		t.Fatalf("feed: %+v, %v", feed, err)
	}
	if got := feed.Events[0].Attachments; !reflect.DeepEqual(got, want) {
		t.Errorf("fed attachments %+v, want %+v", got, want)
	}
}

// An attachments column that is not what EncodeAttachments writes fails
// the read as an internal error, not as an event without files.
func TestAttachmentsColumnCorrupt(t *testing.T) {
	dsn := pgtest.DSN(t)
	db, ana, root := openChat(t, dsn)
	ctx := context.Background()
	if _, err := admin(t, pgtest.Libpq(dsn)).Exec(ctx, `UPDATE events SET attachments = '{not json' WHERE conv_id = 'c-x' AND seq = $1`, root.Seq); err != nil {
		t.Fatal(err)
	}
	_, err := db.Fetch(ctx, ana, "c-x", root.Seq)
	var pe *parley.Error
	if err == nil || errors.As(err, &pe) {
		t.Fatalf("fetch of a corrupt row: %v; want an internal error", err)
	}
}
