package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/parleychat/parley"
	"github.com/parleychat/parley/blobdir"
)

// tusReq sends one tus request to a server and returns the answer with its
// body read.
func tusReq(t *testing.T, base, method, path, token string, body []byte, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Tus-Resumable", "1.0.0")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func tusOffset(t *testing.T, base, path, token string) int64 {
	t.Helper()
	resp, _ := tusReq(t, base, "HEAD", path, token, nil)
	n, err := strconv.ParseInt(resp.Header.Get("Upload-Offset"), 10, 64)
	if resp.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("HEAD %s: %d, Upload-Offset %q", path, resp.StatusCode, resp.Header.Get("Upload-Offset"))
	}
	return n
}

// TestUploadSurvivesKill, on both stores, with real serve processes: an
// upload cut at half (the connection dropped) and its server SIGKILLed
// resumes on the restarted server from the offset HEAD gives, and the
// stored blob is the bytes sent. Then a finish that dies between the blob
// and the row (upload.after_blob=crash) is completed by the next server's
// HEAD, from the blob.
func TestUploadSurvivesKill(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		tokens := seed(t, b.store(t), "ana/phone")
		ana := tokens["ana/phone"]
		data := make([]byte, 8<<20)
		rng := rand.New(rand.NewPCG(3, 4))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		p := serve(t, b.db, b.dir)
		path := tusCreate(t, p.http, ana, "big.bin", len(data))

		conn, err := net.Dial("tcp", strings.TrimPrefix(p.http, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "PATCH %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nTus-Resumable: 1.0.0\r\nUpload-Offset: 0\r\nContent-Type: application/offset+octet-stream\r\nContent-Length: %d\r\n\r\n", path, ana, len(data))
		half := len(data) / 2
		conn.Write(data[:half])
		conn.Close()
		// Once the cut PATCH has ended (its access line), every byte
		// sent is stored. (A HEAD before would stop it reading.)
		p.waitLog("method=PATCH", 20*time.Second)
		if got := tusOffset(t, p.http, path, ana); got != int64(half) {
			t.Fatalf("the cut PATCH stored %d bytes, want %d", got, half)
		}
		p.kill()

		p = serve(t, b.db, b.dir, "PARLEY_FAULTS=upload.after_blob=crash@2")
		if got := tusOffset(t, p.http, path, ana); got != int64(half) {
			t.Fatalf("after the restart HEAD says %d, want %d", got, half)
		}
		resp, body := tusReq(t, p.http, "PATCH", path, ana, data[half:], "Upload-Offset", strconv.Itoa(half), "Content-Type", "application/offset+octet-stream")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("resuming PATCH: %d %s", resp.StatusCode, body)
		}
		checkUploaded(t, b, body, data)

		// The second finish crashes after the blob step.
		small := bytes.Repeat([]byte("crash "), 10_000)
		path = tusCreate(t, p.http, ana, "crash.txt", len(small))
		req, _ := http.NewRequest("PATCH", p.http+path, bytes.NewReader(small))
		req.Header.Set("Authorization", "Bearer "+ana)
		req.Header.Set("Tus-Resumable", "1.0.0")
		req.Header.Set("Upload-Offset", "0")
		req.Header.Set("Content-Type", "application/offset+octet-stream")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("the PATCH whose finish crashes answered %d", resp.StatusCode)
		}
		if err := p.waitExit(20 * time.Second); !killedBySIGKILL(err) {
			t.Fatalf("the server did not crash at upload.after_blob: %v", err)
		}
		p = serve(t, b.db, b.dir)
		if got := tusOffset(t, p.http, path, ana); got != int64(len(small)) {
			t.Fatalf("HEAD after the crash: %d, want %d (finished)", got, len(small))
		}
		resp, body = tusReq(t, p.http, "PATCH", path, ana, nil, "Upload-Offset", strconv.Itoa(len(small)), "Content-Type", "application/offset+octet-stream")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("PATCH of the finished upload: %d %s", resp.StatusCode, body)
		}
		checkUploaded(t, b, body, small)
	})
}

func tusCreate(t *testing.T, base, token, name string, size int) string {
	t.Helper()
	resp, body := tusReq(t, base, "POST", "/api/uploads", token, nil, "Upload-Length", strconv.Itoa(size),
		"Upload-Metadata", "filename "+base64.StdEncoding.EncodeToString([]byte(name)))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	return resp.Header.Get("Location")
}

// checkUploaded checks a finished upload's answer, its row and its blob
// against the bytes sent.
func checkUploaded(t *testing.T, b backend, body, data []byte) {
	t.Helper()
	var f struct {
		ID     string `json:"id"`
		Size   int64  `json:"size"`
		SHA256 string `json:"sha256"`
	}
	if err := json.Unmarshal(body, &f); err != nil {
		t.Fatalf("answer %s: %v", body, err)
	}
	s := sha256.Sum256(data)
	want := hex.EncodeToString(s[:])
	if f.SHA256 != want || f.Size != int64(len(data)) {
		t.Fatalf("file %+v, want %d bytes of sha256 %s", f, len(data), want)
	}
	row, err := b.store(t).File(context.Background(), parley.Principal{User: "ana"}, f.ID)
	if err != nil || row.State != parley.FileReady || row.SHA256 != want {
		t.Fatalf("row %+v %v", row, err)
	}
	blobs, err := blobdir.Open(filepath.Join(b.dir, "files", "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := blobs.Open(context.Background(), f.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		t.Fatalf("stored blob sha256 %s, want %s", got, want)
	}
}

// TestServeFilesFlags: on PostgreSQL serve needs --files-dir, named with
// its variable; --files takes only an s3:// URL.
func TestServeFilesFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"postgres without --files-dir", []string{"--db", "postgres://u@127.0.0.1:1/x", "--export-dir", t.TempDir()}, "PARLEY_FILES_DIR"},
		{"--files not s3", []string{"--files", "/srv/files"}, "want s3://"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseServe(tc.args, func(string) string { return "" }, io.Discard)
			var ue usageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parseServe(%q): %v; want a usage error naming %q", tc.args, err, tc.want)
			}
		})
	}
	f, err := parseServe([]string{"--data-dir", "/d"}, func(string) string { return "" }, io.Discard)
	if err != nil || f.files.dir != filepath.Join("/d", "files") || f.files.stagingDir() != filepath.Join("/d", "files", "uploads") {
		t.Fatalf("default files dir: %+v %v", f, err)
	}
	f, err = parseServe(nil, func(k string) string {
		return map[string]string{"PARLEY_FILES_DIR": "/shared/f", "PARLEY_FILES": "s3://b?endpoint=h:1"}[k]
	}, io.Discard)
	if err != nil || f.files.dir != "/shared/f" || f.files.store != "s3://b?endpoint=h:1" {
		t.Fatalf("from the environment: %+v %v", f.files, err)
	}
}

// TestUploadToS3: with --files s3://…, a finished upload's bytes are in
// the bucket (credentials from the environment), not on the disk.
func TestUploadToS3(t *testing.T) {
	raw := os.Getenv("PARLEY_TEST_S3")
	if raw == "" {
		t.Skip("PARLEY_TEST_S3 is not set (http://KEY:SECRET@HOST:PORT): S3 test skipped")
	}
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		t.Fatalf("PARLEY_TEST_S3=%q: want http://ACCESS:SECRET@HOST:PORT", raw)
	}
	secret, _ := u.User.Password()
	mc, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(u.User.Username(), secret, ""), Region: "us-east-1", BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	bucket := "parley-upload-" + strings.ToLower(strconv.FormatInt(time.Now().UnixNano(), 36))
	if err := mc.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for o := range mc.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
			mc.RemoveObject(ctx, bucket, o.Key, minio.RemoveObjectOptions{})
		}
		mc.RemoveBucket(ctx, bucket)
	})
	dir := t.TempDir()
	b := backend{name: "sqlite", db: "sqlite:" + filepath.Join(dir, "parley.db"), dir: dir}
	ana := seed(t, b.store(t), "ana/phone")["ana/phone"]
	p := serveEnv(t, []string{"PARLEY_S3_ACCESS_KEY=" + u.User.Username(), "PARLEY_S3_SECRET_KEY=" + secret},
		"--db", b.db, "--data-dir", dir, "--files", "s3://"+bucket+"/blobs?endpoint="+u.Host+"&region=us-east-1&secure=false")
	data := bytes.Repeat([]byte("bytes for the bucket\n"), 500_000) // 10 MiB: a multipart upload
	path := tusCreate(t, p.http, ana, "to-s3.txt", len(data))
	resp, body := tusReq(t, p.http, "PATCH", path, ana, data, "Upload-Offset", "0", "Content-Type", "application/offset+octet-stream")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PATCH: %d %s", resp.StatusCode, body)
	}
	id := strings.TrimPrefix(path, "/api/uploads/")
	obj, err := mc.GetObject(ctx, bucket, "blobs/"+id, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(obj)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the bucket holds %d bytes (%v), want the %d uploaded", len(got), err, len(data))
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "files", "uploads")); len(entries) != 0 {
		t.Fatalf("staging keeps %d files after the finish", len(entries))
	}

	// Sent, the file goes into an export's archive, read from the bucket.
	msg := map[string]any{"body": "the bucket's file", "attachments": []string{id}}
	if st := callAPI(t, p.http, ana, "POST", "/api/convs/g1/messages", msg, nil, "Idempotency-Key", "s3-export-1"); st != http.StatusCreated {
		t.Fatalf("send with the file: %d", st)
	}
	wantArchived(t, exportFiles(t, p.http, ana, "conv:g1"), id, "to-s3.txt", data)
}
