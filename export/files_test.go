package export

import (
	"bytes"
	"encoding/json"
	"image"
	"image/png"
	"testing"

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
