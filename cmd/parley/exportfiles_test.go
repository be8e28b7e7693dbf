package main

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/blobdir"
)

// TestExportFilesServe: serve hands the export worker its file store. An
// export of a conversation with an attached file shows files_url,
// files_sha256 and files_bytes, and the link serves the archive, which
// holds the file's bytes.
func TestExportFilesServe(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := backend{name: "sqlite", db: "sqlite:" + filepath.Join(dir, "parley.db"), dir: dir}
	s := b.store(t)
	seed(t, s)
	ctx := context.Background()
	ana := parley.Principal{User: "ana", DeviceID: "d1", InstallID: "i1", Role: parley.RoleUser}
	data := []byte("the minutes of the meeting\n")
	f, err := s.CreateUpload(ctx, ana, parley.NewUpload{Name: "minutes.txt", Size: int64(len(data)), MaxSize: 1 << 20, Quota: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	blobs, err := blobdir.Open(filepath.Join(dir, "files", "blobs")) // serve's default --files-dir on SQLite
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := blobs.Put(ctx, f.ID, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if _, err := s.FinishUpload(ctx, ana, f.ID, parley.FileMeta{MIME: "text/plain", SHA256: hex.EncodeToString(sum[:])}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Send(ctx, ana, parley.SendRequest{Conv: "g1", CMID: "m1", Body: "minutes", Attachments: []string{f.ID}}); err != nil {
		t.Fatal(err)
	}
	p := serveEnv(t, nil, "--db", b.db, "--data-dir", b.dir)
	tok := loginHTTP(t, p.http, "ana", "password-ana")
	wantArchived(t, exportFiles(t, p.http, tok, "conv:g1"), f.ID, "minutes.txt", data)
}

// exportFiles exports scope as the holder of tok and returns the export's
// files archive, checked against the sha256 and size the job reports.
func exportFiles(t *testing.T, base, tok, scope string) *zip.Reader {
	t.Helper()
	link := exportLink(t, base, tok, scope)
	id := strings.TrimPrefix(link[:strings.Index(link, "?")], "/download/")
	req, _ := http.NewRequest("GET", base+"/exports/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var j struct {
		URL         string `json:"url"`
		FilesURL    string `json:"files_url"`
		FilesSHA256 string `json:"files_sha256"`
		FilesBytes  int64  `json:"files_bytes"`
	}
	err = json.NewDecoder(resp.Body).Decode(&j)
	resp.Body.Close()
	if err != nil || j.FilesURL != j.URL+"&part=files" || j.FilesSHA256 == "" || j.FilesBytes == 0 {
		t.Fatalf("job %+v (%v): want a files archive", j, err)
	}
	resp, err = http.Get(base + j.FilesURL)
	if err != nil {
		t.Fatal(err)
	}
	archive, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	got := sha256.Sum256(archive)
	if err != nil || resp.StatusCode != http.StatusOK || hex.EncodeToString(got[:]) != j.FilesSHA256 || int64(len(archive)) != j.FilesBytes {
		t.Fatalf("files download: %d, %d bytes (%v)", resp.StatusCode, len(archive), err)
	}
	zr, err := zip.NewReader(bytes.NewReader(archive), int64(len(archive)))
	if err != nil {
		t.Fatalf("archive: %v", err)
	}
	return zr
}

// wantArchived checks that a files archive holds the one file id (named
// name, with data as its bytes) and the manifest.
func wantArchived(t *testing.T, zr *zip.Reader, id, name string, data []byte) {
	t.Helper()
	if len(zr.File) != 2 || zr.File[0].Name != "files/"+id+"/"+name || zr.File[1].Name != "manifest.json" {
		t.Fatalf("archive holds %d files, want files/%s/%s and the manifest", len(zr.File), id, name)
	}
	r, err := zr.File[0].Open()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if b, err := io.ReadAll(r); err != nil || !bytes.Equal(b, data) {
		t.Errorf("the archive holds %d bytes of the file (%v), want the %d sent", len(b), err, len(data))
	}
}
