package app_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/app"
	"github.com/parleychat/parley/blobdir"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/postgres/pgtest"
	"github.com/parleychat/parley/sqlite"
)

// stores runs fn on a fresh SQLite store and, when PARLEY_TEST_POSTGRES
// is set, on a fresh PostgreSQL one.
func stores(t *testing.T, fn func(t *testing.T, st parley.Store)) {
	t.Run("sqlite", func(t *testing.T) {
		st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"), parley.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		fn(t, st)
	})
	t.Run("postgres", func(t *testing.T) {
		pgtest.Server(t) // skips without PARLEY_TEST_POSTGRES
		st, err := postgres.Open(context.Background(), pgtest.DSN(t), parley.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		fn(t, st)
	})
}

// blobAt sets the modification time of blob key in the directory d.
func blobAt(t *testing.T, d *blobdir.Dir, key string, at time.Time) {
	t.Helper()
	found := false
	filepath.WalkDir(d.Root(), func(path string, e fs.DirEntry, err error) error {
		if err == nil && !e.IsDir() && e.Name() == key {
			found = true
			return os.Chtimes(path, at, at)
		}
		return err
	})
	if !found {
		t.Fatalf("no blob %s under %s", key, d.Root())
	}
}

// TestCollectFiles: one pass deletes an upload not finished within the
// expiry and a ready file no message links within the grace (row, blob
// and thumbnail), keeps a linked file, deletes blobs older than the grace
// that no row owns (a thumbnail's owner is its file) and keeps younger
// ones, and counts a ready file whose blob is missing as lost without
// deleting it. A second pass, or two at once, changes nothing more.
func TestCollectFiles(t *testing.T) {
	stores(t, func(t *testing.T, st parley.Store) {
		ctx := context.Background()
		blobs, err := blobdir.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		var log bytes.Buffer
		svc := app.New(app.Options{Store: st, Blobs: blobs, Log: slog.New(slog.NewTextHandler(&log, nil))})
		for _, u := range []string{"ana", "ben"} {
			if _, err := st.CreateUser(ctx, parley.NewUser{ID: u}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := st.CreateConversation(ctx, ana, parley.NewConversation{ID: "g", Title: "g", Members: []string{"ben"}}); err != nil {
			t.Fatal(err)
		}
		put := func(key, text string) {
			t.Helper()
			if _, _, err := blobs.Put(ctx, key, strings.NewReader(text)); err != nil {
				t.Fatal(err)
			}
		}
		upload := func(name string, finish bool) parley.File {
			t.Helper()
			f, err := st.CreateUpload(ctx, ana, parley.NewUpload{Name: name, Size: int64(len(name)), MaxSize: 1000, Quota: 10000})
			if err != nil {
				t.Fatal(err)
			}
			put(f.ID, name)
			if !finish {
				return f
			}
			sum := sha256.Sum256([]byte(name))
			if f, err = st.FinishUpload(ctx, ana, f.ID, parley.FileMeta{MIME: "text/plain", SHA256: hex.EncodeToString(sum[:])}); err != nil {
				t.Fatal(err)
			}
			return f
		}
		stale := upload("stale.bin", false)
		unlinked := upload("unlinked.txt", true)
		put(parley.ThumbKey(unlinked.ID), "thumb")
		linked := upload("linked.txt", true)
		put(parley.ThumbKey(linked.ID), "thumb")
		lost := upload("lost.txt", true)
		for i, f := range []parley.File{linked, lost} {
			if _, err := st.Send(ctx, ana, parley.SendRequest{Conv: "g", CMID: "k" + string(rune('a'+i)), Body: "f", Attachments: []string{f.ID}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := blobs.Delete(ctx, lost.ID); err != nil {
			t.Fatal(err)
		}
		now, grace := time.Now().Add(time.Hour), 30*time.Minute
		orphan, young, orphanThumb := parley.NewID(), parley.NewID(), parley.ThumbKey(parley.NewID())
		put(orphan, "orphan")
		put(young, "young")
		put(orphanThumb, "thumb")
		blobAt(t, blobs, young, now) // written at the pass's time: within the grace

		// Everything is younger than a three-hour grace and expiry.
		res, err := svc.CollectFiles(ctx, now, 3*time.Hour, 3*time.Hour)
		if err != nil || res != (app.CollectResult{Blobs: 8, Bytes: res.Bytes, Lost: 1}) {
			t.Fatalf("a pass within the grace: %+v %v", res, err)
		}

		res, err = svc.CollectFiles(ctx, now, grace, grace)
		keptBytes := int64(len("linked.txt") + len("thumb") + len("young"))
		if want := (app.CollectResult{Collected: 2, Orphans: 2, Blobs: 3, Bytes: keptBytes, Lost: 1}); err != nil || res != want {
			t.Errorf("pass: %+v %v, want %+v", res, err, want)
		}
		exist, err := st.FilesExist(ctx, []string{stale.ID, unlinked.ID, linked.ID, lost.ID})
		if err != nil || len(exist) != 2 || !exist[linked.ID] || !exist[lost.ID] {
			t.Errorf("rows after the pass: %v %v, want the linked and the lost file", exist, err)
		}
		for key, want := range map[string]bool{
			stale.ID: false, unlinked.ID: false, parley.ThumbKey(unlinked.ID): false, orphan: false, orphanThumb: false,
			linked.ID: true, parley.ThumbKey(linked.ID): true, young: true,
		} {
			if _, err := blobs.Stat(ctx, key); (err == nil) != want {
				t.Errorf("blob %s: %v, want kept %v", key, err, want)
			}
		}
		if !strings.Contains(log.String(), "lost file") || !strings.Contains(log.String(), lost.ID) {
			t.Errorf("log does not name the lost file:\n%s", &log)
		}

		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				res, err := svc.CollectFiles(ctx, now, grace, grace)
				if want := (app.CollectResult{Blobs: 3, Bytes: keptBytes, Lost: 1}); err != nil || res != want {
					t.Errorf("another pass: %+v %v, want %+v", res, err, want)
				}
			})
		}
		wg.Wait()
	})
}
