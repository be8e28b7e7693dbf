package export

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/blobdir"
)

// fileWorld is a conversation with files: ana and ben share c-files.
//
//	seq 3: ana "look" with cat.png (an image) and notes.txt
//	seq 4: ben "oops" with secret.txt, recalled by ben before the snapshot
//	seq 5: ana "again" with cat.png once more and late.txt
//	seq 6: ben's recall of seq 4 (not a line)
//
// ana's export job is created after that; the tests then recall seq 5
// after the snapshot and delete late.txt's blob, as the collector would
// once nothing links it.
type fileWorld struct {
	st                         parley.Store
	blobs                      *blobdir.Dir
	ana, ben                   parley.Principal
	cat, notes, secret, late   parley.File
	catBytes, notesBytes       []byte
	lookSeq, oopsSeq, againSeq int64
}

// pngBytes is a small PNG of w×h pixels.
func pngBytes(t *testing.T, w, h int) []byte {
	t.Helper()
	var buf bytes.Buffer
	img := image.NewGray(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = byte(i * 7)
	}
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// putFile uploads data as p's ready file called name: the row, then the
// blob, then the measured meta, as the upload path does.
func (w *fileWorld) putFile(t *testing.T, p parley.Principal, name, mime string, data []byte, width, height int) parley.File {
	t.Helper()
	ctx := ctxT(t)
	f, err := w.st.CreateUpload(ctx, p, parley.NewUpload{Name: name, Size: int64(len(data)), MaxSize: 1 << 20, Quota: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	_, sum, err := w.blobs.Put(ctx, f.ID, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	f, err = w.st.FinishUpload(ctx, p, f.ID, parley.FileMeta{MIME: mime, SHA256: hexSum(sum[:]), Width: width, Height: height})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func hexSum(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&0xF])
	}
	return string(out)
}

func seedFiles(t *testing.T, st parley.Store) *fileWorld {
	t.Helper()
	ctx := ctxT(t)
	blobs, err := blobdir.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w := &fileWorld{st: st, blobs: blobs, ana: principal("ana"), ben: principal("ben")}
	for _, u := range []string{"ana", "ben"} {
		if _, err := st.CreateUser(ctx, parley.NewUser{ID: u}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.CreateConversation(ctx, w.ana, parley.NewConversation{ID: "c-files", Kind: parley.KindGroup, Title: "files", Members: []string{"ben"}}); err != nil {
		t.Fatal(err)
	}
	w.catBytes = pngBytes(t, 40, 30)
	w.notesBytes = []byte("notes <&> \"quoted\" é\n")
	w.cat = w.putFile(t, w.ana, "cat.png", "image/png", w.catBytes, 40, 30)
	w.notes = w.putFile(t, w.ana, "notes \"1\".txt", "text/plain", w.notesBytes, 0, 0)
	w.secret = w.putFile(t, w.ben, "secret.txt", "text/plain", []byte("secret"), 0, 0)
	w.late = w.putFile(t, w.ana, "late.txt", "text/plain", []byte("late bytes"), 0, 0)
	send := func(p parley.Principal, cmid, body string, files ...parley.File) int64 {
		t.Helper()
		var ids []string
		for _, f := range files {
			ids = append(ids, f.ID)
		}
		s, err := st.Send(ctx, p, parley.SendRequest{Conv: "c-files", CMID: cmid, Body: body, Attachments: ids})
		if err != nil {
			t.Fatal(err)
		}
		return s.Seq
	}
	w.lookSeq = send(w.ana, "m1", "look", w.cat, w.notes)
	w.oopsSeq = send(w.ben, "m2", "oops", w.secret)
	w.againSeq = send(w.ana, "m3", "again", w.cat, w.late)
	if _, err := st.Recall(ctx, w.ben, parley.RecallRequest{Conv: "c-files", Target: w.oopsSeq, CMID: "r1"}); err != nil {
		t.Fatal(err)
	}
	return w
}

// afterSnapshot recalls seq 5 and deletes late.txt's blob, as the
// collector would: the export still lists it (its snapshot predates the
// recall) but its bytes are gone.
func (w *fileWorld) afterSnapshot(t *testing.T) {
	t.Helper()
	ctx := ctxT(t)
	if _, err := w.st.Recall(ctx, w.ana, parley.RecallRequest{Conv: "c-files", Target: w.againSeq, CMID: "r2"}); err != nil {
		t.Fatal(err)
	}
	if err := w.blobs.Delete(ctx, w.late.ID); err != nil {
		t.Fatal(err)
	}
}

// exportedLine is what the tests read of a line.
type exportedLine struct {
	Seq         int64             `json:"seq"`
	Recalled    bool              `json:"recalled"`
	Attachments []json.RawMessage `json:"attachments"`
}

// attachmentJSON is an attachment as a line must carry it.
func attachmentJSON(f parley.File) string {
	b := []byte{'{'}
	if f.Height != 0 {
		b = append(b, `"height":`...)
		b = append(b, jsonOf(f.Height)...)
		b = append(b, ',')
	}
	b = append(b, `"id":`+jsonOf(f.ID)+`,"mime":`+jsonOf(f.MIME)+`,"name":`+jsonOf(f.Name)+
		`,"sha256":`+jsonOf(f.SHA256)+`,"size":`+jsonOf(f.Size)...)
	if f.Width != 0 {
		b = append(b, `,"width":`+jsonOf(f.Width)...)
	}
	return string(append(b, '}'))
}

func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(jsonHTML(b))
}

// TestExportAttachments: a message's line lists its attachments in the
// message's order with sorted keys; a message recalled before the snapshot
// lists none; one recalled after it lists them as they were.
func TestExportAttachments(t *testing.T) {
	t.Parallel()
	backends(t, true, func(t *testing.T, open opener) {
		w := seedFiles(t, open(t))
		job, err := w.st.CreateExport(ctxT(t), w.ana, parley.ExportRequest{Key: "k1", Scope: "all", NoReuse: true})
		if err != nil {
			t.Fatal(err)
		}
		w.afterSnapshot(t)
		dir := t.TempDir()
		run(t, newWorker(t, w.st, dir, nil), job.ID, isDone)
		body := gunzip(t, ArtifactPath(dir, job.ID))
		want := map[int64][]parley.File{w.lookSeq: {w.cat, w.notes}, w.oopsSeq: nil, w.againSeq: {w.cat, w.late}}
		lines := bytes.Split(bytes.TrimSuffix(body, []byte("\n")), []byte("\n"))
		if len(lines) != 3 {
			t.Fatalf("%d lines, want 3:\n%s", len(lines), body)
		}
		for _, raw := range lines {
			var l exportedLine
			if err := json.Unmarshal(raw, &l); err != nil {
				t.Fatalf("line %s: %v", raw, err)
			}
			files, ok := want[l.Seq]
			if !ok {
				t.Errorf("unexpected line %s", raw)
				continue
			}
			if l.Recalled != (l.Seq == w.oopsSeq) {
				t.Errorf("line %s: recalled %v", raw, l.Recalled)
			}
			var got, exp []string
			for _, a := range l.Attachments {
				got = append(got, string(a))
			}
			for _, f := range files {
				exp = append(exp, attachmentJSON(f))
			}
			if len(got) != len(exp) || (len(got) > 0 && !bytes.Equal([]byte(jsonOf(got)), []byte(jsonOf(exp)))) {
				t.Errorf("seq %d attachments:\n got %v\nwant %v", l.Seq, got, exp)
			}
			if len(files) == 0 && bytes.Contains(raw, []byte(`"attachments"`)) {
				t.Errorf("line %s lists attachments", raw)
			}
		}
		if !bytes.Contains(lines[0], []byte(`{"at":"`)) || !bytes.Contains(lines[0], []byte(`,"attachments":[{"height":30,"id":`)) {
			t.Errorf("first line %s: want attachments right after at, keys sorted", lines[0])
		}
	})
}

// zipEntry is an entry of a files archive as the tests read it.
type zipEntry struct {
	name     string
	method   uint16
	modified time.Time
	data     []byte
}

// readZip reads a zip file whole.
func readZip(t *testing.T, data []byte) []zipEntry {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	var out []zipEntry
	for _, f := range zr.File {
		r, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatalf("entry %s: %v", f.Name, err)
		}
		out = append(out, zipEntry{name: f.Name, method: f.Method, modified: f.Modified, data: b})
	}
	return out
}

// lineTimes reads the at of each line of an artifact, by seq.
func lineTimes(t *testing.T, body []byte) map[int64]time.Time {
	t.Helper()
	out := map[int64]time.Time{}
	for _, raw := range bytes.Split(bytes.TrimSuffix(body, []byte("\n")), []byte("\n")) {
		var l struct {
			At  time.Time `json:"at"`
			Seq int64     `json:"seq"`
		}
		if err := json.Unmarshal(raw, &l); err != nil {
			t.Fatal(err)
		}
		out[l.Seq] = l.At
	}
	return out
}

// TestExportFilesArchive: a job whose lines attach files writes the files
// archive beside the artifact: each distinct file once, stored, dated by
// the first line that lists it, with its sha256; a file recalled before
// the snapshot is not in it; one whose blob was collected after the
// snapshot is listed missing; the manifest lists every attachment in
// export order. The same snapshot gives the same bytes again; the job
// records its sha256 and size; the link serves it with ranges; the
// janitor deletes it with the job.
func TestExportFilesArchive(t *testing.T) {
	t.Parallel()
	backends(t, true, func(t *testing.T, open opener) {
		w := seedFiles(t, open(t))
		job, err := w.st.CreateExport(ctxT(t), w.ana, parley.ExportRequest{Key: "k1", Scope: "all", NoReuse: true})
		if err != nil {
			t.Fatal(err)
		}
		w.afterSnapshot(t)
		dir := t.TempDir()
		wk := NewWorker(Options{
			Store: w.st, Dir: dir, Config: cfg(t, "export: {retries: 3, backoff: 10ms, keep: 1h}\n"), Workers: 1,
			Lease: 2 * time.Second, Poll: 10 * time.Millisecond, Janitor: time.Hour, Log: testLog(t), Blobs: w.blobs,
		})
		job = run(t, wk, job.ID, isDone)
		archive, err := os.ReadFile(FilesPath(dir, job.ID))
		if err != nil {
			t.Fatal(err)
		}
		if sum(archive) != job.FilesSHA256 || int64(len(archive)) != job.FilesBytes {
			t.Fatalf("archive sha256 %s, %d bytes; the job records %q, %d", sum(archive), len(archive), job.FilesSHA256, job.FilesBytes)
		}
		at := lineTimes(t, gunzip(t, ArtifactPath(dir, job.ID)))
		entries := readZip(t, archive)
		catPath, notesPath := "files/"+w.cat.ID+"/cat.png", "files/"+w.notes.ID+`/notes "1".txt`
		want := []zipEntry{
			{name: catPath, method: zip.Store, modified: at[w.lookSeq], data: w.catBytes},
			{name: notesPath, method: zip.Store, modified: at[w.lookSeq], data: w.notesBytes},
		}
		if len(entries) != 3 || entries[2].name != manifestName {
			t.Fatalf("entries %v: want the two files and the manifest", entries)
		}
		for i, e := range want {
			got := entries[i]
			if got.name != e.name || got.method != e.method || !got.modified.Equal(e.modified.Truncate(time.Second)) || sum(got.data) != sum(e.data) {
				t.Errorf("entry %d: %s method %d at %v sha256 %s; want %s method %d at %v sha256 %s",
					i, got.name, got.method, got.modified, sum(got.data), e.name, e.method, e.modified, sum(e.data))
			}
		}
		if sum(w.catBytes) != w.cat.SHA256 {
			t.Errorf("the seeded cat's sha256 is not its bytes'")
		}
		wantManifest := `{"files":[` + "\n" +
			`{"conv":"c-files","id":"` + w.cat.ID + `","included":true,"mime":"image/png","name":"cat.png","path":"` + catPath + `","seq":3,"sha256":"` + w.cat.SHA256 + `","size":` + jsonOf(w.cat.Size) + "}\n" +
			`,{"conv":"c-files","id":"` + w.notes.ID + `","included":true,"mime":"text/plain","name":"notes \"1\".txt","path":"files/` + w.notes.ID + `/notes \"1\".txt","seq":3,"sha256":"` + w.notes.SHA256 + `","size":` + jsonOf(w.notes.Size) + "}\n" +
			`,{"conv":"c-files","id":"` + w.cat.ID + `","included":true,"mime":"image/png","name":"cat.png","path":"` + catPath + `","seq":5,"sha256":"` + w.cat.SHA256 + `","size":` + jsonOf(w.cat.Size) + "}\n" +
			`,{"conv":"c-files","id":"` + w.late.ID + `","included":false,"mime":"text/plain","missing":"gone","name":"late.txt","seq":5,"sha256":"` + w.late.SHA256 + `","size":10}` + "\n]}\n"
		if w.lookSeq != 3 || w.againSeq != 5 {
			t.Fatalf("seqs %d %d, the manifest expects 3 and 5", w.lookSeq, w.againSeq)
		}
		if m := string(entries[2].data); m != wantManifest {
			t.Errorf("manifest:\n%s\nwant\n%s", m, wantManifest)
		}
		var parsed struct{ Files []manifestEntry }
		if err := json.Unmarshal(entries[2].data, &parsed); err != nil || len(parsed.Files) != 4 {
			t.Errorf("manifest does not decode to 4 entries: %v", err)
		}
		// The same snapshot and blobs give the same bytes.
		sha, size, err := wk.writeFiles(ctxT(t), job.ID, ArtifactPath(dir, job.ID))
		if again, _ := os.ReadFile(FilesPath(dir, job.ID)); err != nil || sha != job.FilesSHA256 || size != job.FilesBytes || !bytes.Equal(again, archive) {
			t.Errorf("rebuilt: %s %d (%v), want the same bytes %s %d", sha, size, err, job.FilesSHA256, job.FilesBytes)
		}
		wantFilesDownload(t, w.st, dir, job, archive)
		if _, err := w.st.RevokeExport(ctxT(t), job.ID); err != nil {
			t.Fatal(err)
		}
		wk.Sweep(ctxT(t))
		if names := files(t, dir); len(names) != 0 {
			t.Errorf("files after the revoked job's sweep: %v", names)
		}
	})
}

// wantFilesDownload checks the files archive's download: the link with
// part=files serves it with its ETag, ranges and If-Range; the artifact is
// still the link's default; an unknown part is 404.
func wantFilesDownload(t *testing.T, st parley.Store, dir string, job parley.ExportJob, archive []byte) {
	t.Helper()
	ring, err := NewKeyring(testKeys(t), "k2")
	if err != nil {
		t.Fatal(err)
	}
	d := serveDownloads(t, st, dir, ring)
	link := ring.Link(job.ID, "ana", time.Now().Add(5*time.Minute))
	etag := `"` + job.FilesSHA256 + `"`
	n := len(archive)
	r := d.do("GET", link+"&part=files")
	if r.status != http.StatusOK || !bytes.Equal(r.body, archive) || r.h.Get("ETag") != etag || r.h.Get("Content-Type") != "application/zip" ||
		r.h.Get("Content-Disposition") != `attachment; filename="parley-export-`+job.ID+`-files.zip"` {
		t.Errorf("files: %d, %d bytes, headers %v", r.status, len(r.body), r.h)
	}
	r = d.do("GET", link+"&part=files", "Range", "bytes=10-", "If-Range", etag)
	if cr := fmt.Sprintf("bytes 10-%d/%d", n-1, n); r.status != http.StatusPartialContent || r.h.Get("Content-Range") != cr || !bytes.Equal(r.body, archive[10:]) {
		t.Errorf("files range: %d, Content-Range %q, %d bytes; want 206 %s", r.status, r.h.Get("Content-Range"), len(r.body), cr)
	}
	r = d.do("GET", link+"&part=files", "Range", "bytes=10-", "If-Range", `"stale"`)
	if r.status != http.StatusOK || !bytes.Equal(r.body, archive) {
		t.Errorf("files range with a stale If-Range: %d, %d bytes; want 200 whole", r.status, len(r.body))
	}
	if r = d.do("GET", link); r.status != http.StatusOK || r.h.Get("ETag") != `"`+job.SHA256+`"` {
		t.Errorf("artifact: %d, ETag %q", r.status, r.h.Get("ETag"))
	}
	for _, bad := range []string{"&part=other", "&part=files&part=files", "&part="} {
		if r = d.do("GET", link+bad); r.status != http.StatusNotFound || r.problem(t).Code != parley.CodeNotFound {
			t.Errorf("%s: %d %s, want 404 NOT_FOUND", bad, r.status, r.body)
		}
	}
}

// flakyBlobs fails its first Open with an internal error, as an S3
// server that does not answer.
type flakyBlobs struct {
	parley.BlobStore
	mu     sync.Mutex
	failed bool
}

func (f *flakyBlobs) Open(ctx context.Context, key string) (io.ReadSeekCloser, parley.Blob, error) {
	f.mu.Lock()
	first := !f.failed
	f.failed = true
	f.mu.Unlock()
	if first {
		return nil, parley.Blob{}, errors.New("connection refused")
	}
	return f.BlobStore.Open(ctx, key)
}

// TestExportFilesRetry: a blob store that fails an attempt sends the job
// back to the queue (not failed); the next attempt builds the archive
// from scratch to the bytes an undisturbed run gives, and leaves no temp
// file. Without a blob store the job writes no archive, and clears the
// one an earlier attempt recorded.
func TestExportFilesRetry(t *testing.T) {
	t.Parallel()
	backends(t, true, func(t *testing.T, open opener) {
		w := seedFiles(t, open(t))
		conf := cfg(t, "export: {retries: 3, backoff: 10ms, keep: 1h}\n")
		worker := func(dir string, blobs parley.BlobStore) *Worker {
			return NewWorker(Options{
				Store: w.st, Dir: dir, Config: conf, Workers: 1,
				Lease: 2 * time.Second, Poll: 10 * time.Millisecond, Janitor: time.Hour, Log: testLog(t), Blobs: blobs,
			})
		}
		create := func(key string) parley.ExportJob {
			j, err := w.st.CreateExport(ctxT(t), w.ana, parley.ExportRequest{Key: key, Scope: "all", NoReuse: true})
			if err != nil {
				t.Fatal(err)
			}
			return j
		}
		// One job at a time: a worker stopped with a job claimed counts an attempt.
		calm := run(t, worker(t.TempDir(), w.blobs), create("calm").ID, isDone)
		flakyDir := t.TempDir()
		flaky := run(t, worker(flakyDir, &flakyBlobs{BlobStore: w.blobs}), create("flaky").ID, isDone)
		if flaky.Attempts != 2 || flaky.FilesSHA256 != calm.FilesSHA256 || flaky.FilesBytes != calm.FilesBytes || calm.FilesSHA256 == "" {
			t.Errorf("after a failed read: attempts %d, files %s %d; undisturbed %s %d", flaky.Attempts, flaky.FilesSHA256, flaky.FilesBytes, calm.FilesSHA256, calm.FilesBytes)
		}
		if names := files(t, flakyDir); !slices.Equal(names, []string{flaky.ID + filesSuffix, flaky.ID + artifactSuffix}) {
			t.Errorf("files after the retried job: %v", names)
		}
		// An attempt that recorded an archive and then failed, retried by a
		// worker without a blob store: the record and the file go.
		bare, bareDir := create("bare"), t.TempDir()
		ctx := ctxT(t)
		if _, ok, err := w.st.ClaimExport(ctx, "w0", time.Minute); err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		if err := w.st.RecordExportFiles(ctx, "w0", bare.ID, sum([]byte("old")), 3); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(FilesPath(bareDir, bare.ID), []byte("old"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := w.st.FailExport(ctx, "w0", bare.ID, "the database is unavailable", time.Millisecond); err != nil {
			t.Fatal(err)
		}
		bare = run(t, worker(bareDir, nil), bare.ID, isDone)
		if bare.FilesSHA256 != "" || bare.FilesBytes != 0 {
			t.Errorf("without a blob store: files %q %d, want none", bare.FilesSHA256, bare.FilesBytes)
		}
		if names := files(t, bareDir); !slices.Equal(names, []string{bare.ID + artifactSuffix}) {
			t.Errorf("files after a run without a blob store: %v, want the artifact only", names)
		}
	})
}
