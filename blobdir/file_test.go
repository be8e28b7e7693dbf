package blobdir_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/blobdir"
	"github.com/parleychat/parley/blobtest"
)

func TestContract(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) parley.BlobStore { return open(t, t.TempDir()) })
}

func open(t *testing.T, root string) *blobdir.Dir {
	t.Helper()
	d, err := blobdir.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The server alone reads the blobs: directories 0700, files 0600, a file
// moved in with PutFile included, whatever mode its writer gave it.
func TestModes(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "files")
	d := open(t, root)
	if _, _, err := d.Put(ctx, "put", strings.NewReader("bytes")); err != nil {
		t.Fatal(err)
	}
	upload := filepath.Join(t.TempDir(), "upload")
	if err := os.WriteFile(upload, []byte("bytes"), 0o664); err != nil {
		t.Fatal(err)
	}
	if err := d.PutFile(ctx, "moved", upload); err != nil {
		t.Fatal(err)
	}
	files := 0
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if e.IsDir() {
			want = fs.ModeDir | 0o700
		} else {
			files++
		}
		if info.Mode() != want {
			t.Errorf("%s has mode %v, want %v", path, info.Mode(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files != 2 {
		t.Fatalf("%d files under the root, want the 2 blobs", files)
	}
}

// Blobs live in 256 directories named by the first byte of the SHA-256 of
// their key, and a reopened store finds them.
func TestLayout(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d := open(t, root)
	// SHA-256("a") starts with ca, SHA-256("b") with 3e.
	for _, key := range []string{"a", "b"} {
		if _, _, err := d.Put(ctx, key, strings.NewReader(key)); err != nil {
			t.Fatal(err)
		}
	}
	for path, want := range map[string]string{"ca/a": "a", "3e/b": "b"} {
		got, err := os.ReadFile(filepath.Join(root, path))
		if err != nil || string(got) != want {
			t.Errorf("%s holds %q (%v), want %q", path, got, err, want)
		}
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 257 {
		t.Errorf("the root has %d entries, want 256 fan-out directories and tmp", len(entries))
	}

	// A file in a fan-out directory that is not a valid key is nothing the
	// store wrote: List skips it.
	if err := os.WriteFile(filepath.Join(root, "ca", "Stray.txt"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	again := open(t, root)
	var keys []string
	if err := again.List(ctx, "", func(b parley.Blob) error { keys = append(keys, b.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 {
		t.Fatalf("the reopened store lists %v, want a and b", keys)
	}
}

// A failed Put leaves no temp file behind; Open removes the temp files a
// crashed writer left, once they are a day old, and keeps younger ones (a
// write in progress in another process).
func TestTempFiles(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d := open(t, root)
	if _, _, err := d.Put(ctx, "k", &failing{n: 1 << 20}); err == nil {
		t.Fatal("a failing Put succeeded")
	}
	tmp := filepath.Join(root, "tmp")
	if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
		t.Fatalf("a failed Put left %d temp files", len(entries))
	}

	old, young := filepath.Join(tmp, "put-old"), filepath.Join(tmp, "put-young")
	for _, p := range []string{old, young} {
		if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	long := time.Now().Add(-25 * time.Hour)
	if err := os.Chtimes(old, long, long); err != nil {
		t.Fatal(err)
	}
	open(t, root)
	if _, err := os.Stat(old); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a temp file of 25 hours survived Open (stat: %v)", err)
	}
	if _, err := os.Stat(young); err != nil {
		t.Errorf("a fresh temp file was removed by Open: %v", err)
	}
}

// failing yields n zero bytes, then fails.
type failing struct{ n int }

func (f *failing) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errors.New("broken")
	}
	k := min(len(p), f.n)
	clear(p[:k])
	f.n -= k
	return k, nil
}

// Open refuses a root it cannot use.
func TestOpenRefuses(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{"", file, filepath.Join(file, "below")} {
		if _, err := blobdir.Open(root); err == nil {
			t.Errorf("Open(%q) succeeded", root)
		}
	}
}

// PutFile moves the file: the blob is the same inode, no byte is copied.
func TestPutFileRenames(t *testing.T) {
	root := t.TempDir()
	d := open(t, root)
	upload := filepath.Join(root, "upload")
	if err := os.WriteFile(upload, bytes.Repeat([]byte("x"), 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(upload)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.PutFile(context.Background(), "moved", upload); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(filepath.Join(root, "5e", "moved"))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Fatal("PutFile copied the file instead of renaming it")
	}
}
