package blobdir

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// From another filesystem a rename fails with EXDEV: PutFile then copies
// the file in and removes it. The test cannot mount a second filesystem,
// so the rename of the moved file answers EXDEV as the kernel would.
func TestPutFileAcrossFilesystems(t *testing.T) {
	d, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	upload := filepath.Join(t.TempDir(), "upload")
	d.rename = func(oldpath, newpath string) error {
		if oldpath == upload {
			return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: syscall.EXDEV}
		}
		return os.Rename(oldpath, newpath)
	}
	want := bytes.Repeat([]byte("0123456789"), 100_000)
	if err := os.WriteFile(upload, want, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.PutFile(context.Background(), "copied", upload); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(upload); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the copied file is still at its path (stat: %v)", err)
	}
	rc, blob, err := d.Open(context.Background(), "copied")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil || !bytes.Equal(got, want) || blob.Size != int64(len(want)) {
		t.Fatalf("the copied blob has %d bytes (%v), want the file's %d", len(got), err, len(want))
	}

	// Any other rename error leaves the file where it was.
	d.rename = func(string, string) error { return syscall.EACCES }
	if err := os.WriteFile(upload, want, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.PutFile(context.Background(), "refused", upload); err == nil {
		t.Fatal("PutFile succeeded with a failing rename")
	}
	if _, err := os.Stat(upload); err != nil {
		t.Fatalf("a failed PutFile lost the file: %v", err)
	}
}
