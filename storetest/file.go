package storetest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley"
)

// Checks of uploaded files (file.go in the root package): the upload
// rows and their limits, finishing, who may read a file (its owner, or a
// reader whose periods hold the seq of a link), the links written by a
// send with attachments and removed by recall, purge and rollback in
// their transactions, the attachments every read of a message carries,
// and the collector's questions.

// fileRows is what the file tables hold, as far as the shared column
// names let the suite see it: a refused request must leave it as it was.
type fileRows struct {
	Files, Bytes, Ready, Links, LinkSeqs, Carriers int64
}

func (e *env) fileRows(t *testing.T) fileRows {
	t.Helper()
	q := func(query string) int64 { t.Helper(); return e.db.Int(t, query) }
	return fileRows{
		Files:    q("SELECT count(*) FROM files"),
		Bytes:    q("SELECT CAST(sum(size) AS BIGINT) FROM files"),
		Ready:    q("SELECT count(*) FROM files WHERE state = 'ready'"),
		Links:    q("SELECT count(*) FROM file_links"),
		LinkSeqs: q("SELECT CAST(sum(seq) AS BIGINT) FROM file_links"),
		Carriers: q("SELECT count(*) FROM events WHERE attachments IS NOT NULL"),
	}
}

func (e *env) fileRowsUnchanged(t *testing.T, what string, before fileRows) {
	t.Helper()
	if after := e.fileRows(t); after != before {
		t.Errorf("%s changed the file tables:\nbefore %+v\nafter  %+v", what, before, after)
	}
}

// links counts the link rows of a file (conv "" for every conversation).
func (e *env) links(t *testing.T, id, conv string) int64 {
	t.Helper()
	if conv == "" {
		return e.db.Int(t, "SELECT count(*) FROM file_links WHERE file_id = ?", id)
	}
	return e.db.Int(t, "SELECT count(*) FROM file_links WHERE file_id = ? AND conv_id = ?", id, conv)
}

// limits is a NewUpload with the limits most checks use.
func limits(name string, size int64) parley.NewUpload {
	return parley.NewUpload{Name: name, Size: size, MaxSize: 1000, Quota: 2500}
}

// metaOf is what a server would have measured of a text file called name.
func metaOf(name string) parley.FileMeta {
	return parley.FileMeta{MIME: "text/plain", SHA256: shaOf(name)}
}

// fileLine renders a file in one line for comparisons.
func fileLine(f parley.File) string {
	return fmt.Sprintf("%s owner %s %q %d bytes %s %q %s %dx%d at %d", f.ID, f.Owner, f.Name, f.Size, f.State, f.MIME, f.SHA256, f.Width, f.Height, f.CreatedAt.UnixNano())
}

// createUpload starts an upload that must be accepted.
func (e *env) createUpload(t *testing.T, p parley.Principal, name string, size int64) parley.File {
	t.Helper()
	start := time.Now()
	f, err := e.st.CreateUpload(ctx(t), p, limits(name, size))
	ok(t, err, fmt.Sprintf("create upload %q by %s", name, p.User))
	want := parley.File{ID: f.ID, Owner: p.User, Name: strings.TrimSpace(name), Size: size, State: parley.FileUploading, CreatedAt: f.CreatedAt}
	if fileLine(f) != fileLine(want) || parley.ValidBlobKey(f.ID) != nil || !within(f.CreatedAt, start, time.Now()) {
		t.Fatalf("create upload %q by %s: %s, want %s created now with a valid key", name, p.User, fileLine(f), fileLine(want))
	}
	time.Sleep(2 * time.Millisecond) // files made one after another sort by time
	return f
}

// upload creates and finishes a text file of p's.
func (e *env) upload(t *testing.T, p parley.Principal, name string) parley.File {
	t.Helper()
	f := e.createUpload(t, p, name, int64(len(name)))
	done, err := e.st.FinishUpload(ctx(t), p, f.ID, metaOf(name))
	ok(t, err, "finish upload "+name)
	f.State, f.MIME, f.SHA256 = parley.FileReady, "text/plain", shaOf(name)
	if fileLine(done) != fileLine(f) {
		t.Fatalf("finish upload %q: %s, want %s", name, fileLine(done), fileLine(f))
	}
	return done
}

// canRead checks that p reads file f as it is.
func (e *env) canRead(t *testing.T, p parley.Principal, f parley.File) {
	t.Helper()
	got, err := e.st.File(ctx(t), p, f.ID)
	if !wantCode(t, err, "") {
		t.Errorf("File(%s) by %s: above, want the file", f.Name, p.User)
		return
	}
	if fileLine(got) != fileLine(f) {
		t.Errorf("File(%s) by %s: %s, want %s", f.Name, p.User, fileLine(got), fileLine(f))
	}
}

// cannotRead checks that p gets for file id exactly what a missing file
// gives.
func (e *env) cannotRead(t *testing.T, p parley.Principal, id, what string) {
	t.Helper()
	_, err := e.st.File(ctx(t), p, id)
	_, missing := e.st.File(ctx(t), p, "no-such-file-anywhere")
	if !wantCode(t, err, parley.CodeNotFound) || err.Error() != missing.Error() || err.Error() != parley.ErrNoSuchFile().Error() {
		t.Errorf("File(%s) by %s: %v; want the answer of a missing file %v", what, p.User, err, missing)
	}
}

// sendFiles sends a message with attachments that must be new.
func (e *env) sendFiles(t *testing.T, p parley.Principal, conv, cmid, body string, ids ...string) parley.Sent {
	t.Helper()
	s, err := e.st.Send(ctx(t), p, parley.SendRequest{Conv: conv, CMID: cmid, Body: body, Attachments: ids})
	ok(t, err, fmt.Sprintf("send %s/%s with %d files by %s", conv, cmid, len(ids), p.User))
	if s.Dup {
		t.Fatalf("send %s/%s by %s: Dup true for a new request", conv, cmid, p.User)
	}
	return s
}

// wantAttachments checks that ev carries exactly the attachments of
// files, in order (none when files is empty).
func wantAttachments(t *testing.T, what string, ev parley.Event, files ...parley.File) {
	t.Helper()
	var want []parley.Attachment
	for _, f := range files {
		want = append(want, parley.AttachmentOf(f))
	}
	if len(ev.Attachments) == 0 && len(want) == 0 {
		return
	}
	if !slices.Equal(ev.Attachments, want) {
		t.Errorf("%s: seq %d carries %+v, want %+v", what, ev.Seq, ev.Attachments, want)
	}
}

// testFileCreate: CreateUpload checks the name and size (INVALID_ARGUMENT),
// then max_file_size, then the quota (both TOO_LARGE, each with its own
// message, in that order); a refusal stores nothing; an accepted upload is
// an uploading row of the caller's that File reads back; every file of the
// user, uploading or ready, counts against the quota, another user's not.
func testFileCreate(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben")
	ana, ben := ps[0], ps[1]
	invalid := parley.CodeInvalidArgument
	refusals := []struct {
		what string
		r    parley.NewUpload
		code parley.Code
		err  error // the exact error, when the code alone does not tell
	}{
		{"empty name", limits("", 1), invalid, nil},
		{"blank name", limits(" \t ", 1), invalid, nil},
		{"slash", limits("a/b.txt", 1), invalid, nil},
		{"backslash", limits(`a\b.txt`, 1), invalid, nil},
		{"NUL", limits("a\x00b", 1), invalid, nil},
		{"newline inside", limits("a\nb", 1), invalid, nil},
		{"bad UTF-8", limits("a\xffb", 1), invalid, nil},
		{"256 characters", limits(strings.Repeat("é", 256), 1), invalid, nil},
		{"negative size", limits("a.txt", -1), invalid, nil},
		{"no size limit", parley.NewUpload{Name: "a.txt", Size: 1, Quota: 10}, invalid, nil},
		{"no quota", parley.NewUpload{Name: "a.txt", Size: 1, MaxSize: 10}, invalid, nil},
		{"bad name and too large", limits("", 5000), invalid, nil},
		{"one byte too large", limits("big.bin", 1001), parley.CodeTooLarge, parley.ErrTooLarge(1000)},
		{"too large and over quota", limits("big.bin", 3000), parley.CodeTooLarge, parley.ErrTooLarge(1000)},
	}
	before := e.fileRows(t)
	for _, c := range refusals {
		_, err := e.st.CreateUpload(ctx(t), ana, c.r)
		if wantCode(t, err, c.code) && c.err != nil && err.Error() != c.err.Error() {
			t.Errorf("%s: %v, want %v", c.what, err, c.err)
		}
		e.fileRowsUnchanged(t, c.what, before)
	}

	long := e.createUpload(t, ana, " "+strings.Repeat("é", 255)+" ", 1000) // the name trimmed; size = max
	e.canRead(t, ana, long)
	empty := e.createUpload(t, ana, "empty.txt", 0)
	done := e.createUpload(t, ana, "done.bin", 1000)
	_, err := e.st.FinishUpload(ctx(t), ana, done.ID, metaOf("done")) // a ready file counts too: 2000 of 2500 used
	ok(t, err, "finish done.bin")
	if long.ID == empty.ID || long.ID == done.ID || empty.ID == done.ID {
		t.Fatalf("ids %s %s %s: want three", long.ID, empty.ID, done.ID)
	}
	before = e.fileRows(t)
	_, err = e.st.CreateUpload(ctx(t), ana, limits("over.bin", 501))
	if wantCode(t, err, parley.CodeTooLarge) && err.Error() != parley.ErrQuotaExceeded(2500).Error() {
		t.Errorf("over quota: %v, want %v", err, parley.ErrQuotaExceeded(2500))
	}
	e.fileRowsUnchanged(t, "an upload over the quota", before)
	e.createUpload(t, ana, "exactly.bin", 500) // 2500: the quota reached, not passed
	e.createUpload(t, ana, "nothing.bin", 0)
	before = e.fileRows(t)
	_, err = e.st.CreateUpload(ctx(t), ana, limits("one.bin", 1))
	wantCode(t, err, parley.CodeTooLarge)
	e.fileRowsUnchanged(t, "one byte over the quota", before)
	e.createUpload(t, ben, "ben.bin", 1000) // ana's files are not ben's
	if _, err := e.st.CreateUpload(ctx(t), ana, parley.NewUpload{Name: "more.bin", Size: 10, MaxSize: 1000, Quota: 2510}); err != nil {
		t.Errorf("ana with a larger quota: %v", err)
	}
	if u, err := e.st.FileUsage(ctx(t), ana); err != nil || u != (parley.FileUsage{Files: 6, Bytes: 2510}) {
		t.Errorf("ana's usage: %+v %v, want 6 files of 2510 bytes", u, err)
	}
}

// testFileQuotaConcurrent: uploads of one user made at once, through two
// stores on one database, cannot pass the quota together: of twelve that
// each ask a quarter of it, exactly four are accepted and the others are
// refused with the quota's error.
func testFileQuotaConcurrent(t *testing.T, e *env) {
	ana := e.users(t, "ana")[0]
	stores := []parley.Store{e.st, e.db.Open(t)}
	const quota, n = 4000, 12
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, errs[i] = stores[i%2].CreateUpload(ctx(t), ana, parley.NewUpload{Name: fmt.Sprintf("f%d.bin", i), Size: quota / 4, MaxSize: quota, Quota: quota})
		})
	}
	wg.Wait()
	accepted := 0
	for i, err := range errs {
		switch {
		case err == nil:
			accepted++
		case err.Error() != parley.ErrQuotaExceeded(quota).Error():
			t.Errorf("upload %d: %v (code %s), want success or %v", i, err, parley.ErrorCode(err), parley.ErrQuotaExceeded(quota))
		}
	}
	if accepted != 4 {
		t.Errorf("%d of %d uploads of a quarter of the quota accepted, want 4", accepted, n)
	}
	if u, err := e.st.FileUsage(ctx(t), ana); err != nil || u != (parley.FileUsage{Files: 4, Bytes: quota}) {
		t.Errorf("usage: %+v %v, want 4 files of %d bytes", u, err, quota)
	}
	if rows := e.fileRows(t); rows.Files != 4 || rows.Bytes != quota {
		t.Errorf("file rows %+v, want 4 of %d bytes", rows, quota)
	}
}

// testFileUsage: FileUsage counts a user's uploading and ready files and
// nobody else's, and drops when the collector deletes one; AdminUsers
// lists every user with the same counts.
func testFileUsage(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben")
	ana, ben := ps[0], ps[1]
	usage := func(p parley.Principal, want parley.FileUsage) {
		t.Helper()
		if u, err := e.st.FileUsage(ctx(t), p); err != nil || u != want {
			t.Errorf("usage of %s: %+v %v, want %+v", p.User, u, err, want)
		}
		// The operators' listing counts the same, for every user of the page.
		page, err := e.st.AdminUsers(ctx(t), parley.AdminQuery{Limit: parley.MaxAdminPage})
		ok(t, err, "admin users")
		i := slices.IndexFunc(page.Items, func(u parley.AdminUser) bool { return u.ID == p.User })
		if i < 0 || page.Items[i].Files != want {
			t.Errorf("admin users: %s not listed with %+v: %+v", p.User, want, page.Items)
		}
	}
	usage(ana, parley.FileUsage{})
	up := e.createUpload(t, ana, "part.bin", 100)
	e.upload(t, ana, "done.txt") // 8 bytes
	usage(ana, parley.FileUsage{Files: 2, Bytes: 108})
	usage(ben, parley.FileUsage{})
	e.createUpload(t, ben, "b.bin", 50)
	usage(ben, parley.FileUsage{Files: 1, Bytes: 50})
	usage(ana, parley.FileUsage{Files: 2, Bytes: 108})
	far := time.Now().Add(time.Hour)
	gone, err := e.st.DeleteFile(ctx(t), up.ID, parley.StaleFiles{UploadingBefore: far, UnlinkedBefore: far, Limit: 1})
	if err != nil || !gone {
		t.Fatalf("delete the stale upload: %v %v", gone, err)
	}
	usage(ana, parley.FileUsage{Files: 1, Bytes: 8})
}

// testFileFinish: FinishUpload checks the id and the meta first
// (INVALID_ARGUMENT, whoever asks), then that the upload is the caller's
// (NOT_FOUND); it records the meta and makes the file ready; a retry with
// the same meta returns the file unchanged, with other meta it is
// INVALID_ARGUMENT and the file stays as it was.
func testFileFinish(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben")
	ana, ben := ps[0], ps[1]
	f := e.createUpload(t, ana, "photo.png", 10)
	m := parley.FileMeta{MIME: "image/png", SHA256: shaOf("photo"), Width: 640, Height: 480}
	before := e.fileRows(t)
	type call struct {
		what string
		p    parley.Principal
		id   string
		m    parley.FileMeta
		code parley.Code
	}
	bad := func(what string, edit func(*parley.FileMeta)) call {
		mm := m
		edit(&mm)
		return call{what, ben, f.ID, mm, parley.CodeInvalidArgument} // meta before ownership
	}
	calls := []call{
		{"empty id", ana, "", m, parley.CodeInvalidArgument},
		{"upper-case id", ana, strings.ToUpper(f.ID), m, parley.CodeInvalidArgument},
		{"id with a slash", ana, "a/b", m, parley.CodeInvalidArgument},
		{"id too long", ana, strings.Repeat("a", parley.MaxBlobKey+1), m, parley.CodeInvalidArgument},
		bad("no mime", func(m *parley.FileMeta) { m.MIME = "" }),
		bad("mime without subtype", func(m *parley.FileMeta) { m.MIME = "image" }),
		bad("mime with a space", func(m *parley.FileMeta) { m.MIME = "image/ png" }),
		bad("mime too long", func(m *parley.FileMeta) { m.MIME = "image/" + strings.Repeat("p", 250) }),
		bad("no sha256", func(m *parley.FileMeta) { m.SHA256 = "" }),
		bad("upper-case sha256", func(m *parley.FileMeta) { m.SHA256 = strings.ToUpper(m.SHA256) }),
		bad("short sha256", func(m *parley.FileMeta) { m.SHA256 = m.SHA256[1:] }),
		bad("negative width", func(m *parley.FileMeta) { m.Width = -1 }),
		bad("negative height", func(m *parley.FileMeta) { m.Height = -1 }),
		{"another user's upload", ben, f.ID, m, parley.CodeNotFound},
		{"a missing upload", ana, "no-such-upload", m, parley.CodeNotFound},
	}
	for _, c := range calls {
		_, err := e.st.FinishUpload(ctx(t), c.p, c.id, c.m)
		if !wantCode(t, err, c.code) {
			t.Errorf("%s: above", c.what)
		}
		e.fileRowsUnchanged(t, c.what, before)
	}
	e.canRead(t, ana, f)

	done, err := e.st.FinishUpload(ctx(t), ana, f.ID, m)
	ok(t, err, "finish")
	want := f
	want.State, want.MIME, want.SHA256, want.Width, want.Height = parley.FileReady, m.MIME, m.SHA256, m.Width, m.Height
	if fileLine(done) != fileLine(want) {
		t.Errorf("finished: %s, want %s", fileLine(done), fileLine(want))
	}
	e.canRead(t, ana, want)
	again, err := e.st.FinishUpload(ctx(t), ana, f.ID, m)
	if wantCode(t, err, "") && fileLine(again) != fileLine(want) {
		t.Errorf("finished again: %s, want %s", fileLine(again), fileLine(want))
	}
	before = e.fileRows(t)
	for _, other := range []parley.FileMeta{
		{MIME: "image/jpeg", SHA256: m.SHA256, Width: 640, Height: 480},
		{MIME: m.MIME, SHA256: shaOf("other"), Width: 640, Height: 480},
		{MIME: m.MIME, SHA256: m.SHA256, Width: 641, Height: 480},
		{MIME: m.MIME, SHA256: m.SHA256},
	} {
		_, err := e.st.FinishUpload(ctx(t), ana, f.ID, other)
		wantCode(t, err, parley.CodeInvalidArgument)
		e.fileRowsUnchanged(t, "a finish with other meta", before)
		e.canRead(t, ana, want)
	}
	e.cannotRead(t, ben, f.ID, "ana's unlinked file")
	plain := e.upload(t, ana, "notes.txt")
	if plain.Width != 0 || plain.Height != 0 {
		t.Errorf("a file without pixels: %s", fileLine(plain))
	}
}

// testFileAccess: a file is read by its owner in any state; by another
// user only through a link whose seq lies in one of their periods — a
// member after a send, a former member for what was sent inside their
// periods (not in a gap, not before a join), anyone through any of the
// conversations that link it. Everything else is the answer of a
// missing file.
func testFileAccess(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben", "cy", "dan")
	ana, ben, cy, dan := ps[0], ps[1], ps[2], ps[3]
	const c = "c-ab"
	e.group(t, ana, c, "ben") // 1, 2
	up := e.createUpload(t, ana, "draft.txt", 5)
	f := e.upload(t, ana, "f.txt")
	e.canRead(t, ana, up)
	e.canRead(t, ana, f)
	e.cannotRead(t, ben, f.ID, "a ready file nobody links")
	e.cannotRead(t, ana, "no-such-file", "a missing file, for anyone")
	_, err := e.st.File(ctx(t), ana, "Not A Key")
	wantCode(t, err, parley.CodeInvalidArgument)

	e.sendFiles(t, ana, c, "k3", "here", f.ID) // 3
	e.canRead(t, ben, f)
	e.cannotRead(t, cy, f.ID, "a file of a conversation cy is not in")
	e.cannotRead(t, ben, up.ID, "an upload never attached")
	if ch, err := e.st.RemoveMember(ctx(t), ana, c, "ben"); err != nil || ch.Seq != 4 {
		t.Fatalf("remove ben: %+v %v", ch, err)
	}
	g := e.upload(t, ana, "g.txt")
	e.sendFiles(t, ana, c, "k5", "", g.ID) // 5
	e.canRead(t, ben, f)
	e.cannotRead(t, ben, g.ID, "a file sent after ben left")
	if ch, err := e.st.AddMember(ctx(t), ana, c, "dan"); err != nil || ch.Seq != 6 {
		t.Fatalf("add dan: %+v %v", ch, err)
	}
	e.cannotRead(t, dan, f.ID, "a file sent before dan joined")
	e.cannotRead(t, dan, g.ID, "a file sent before dan joined")
	e.group(t, ana, "c-ad", "dan")                   // 1, 2
	e.sendFiles(t, ana, "c-ad", "k3", "again", f.ID) // the same upload, another conversation
	e.canRead(t, dan, f)
	e.cannotRead(t, dan, g.ID, "a file linked only before dan's period")
	if n := e.links(t, f.ID, ""); n != 2 {
		t.Errorf("%d links of a file sent twice, want 2", n)
	}
	if ch, err := e.st.AddMember(ctx(t), ana, c, "ben"); err != nil || ch.Seq != 7 {
		t.Fatalf("add ben back: %+v %v", ch, err)
	}
	e.canRead(t, ben, f)
	e.cannotRead(t, ben, g.ID, "a file sent while ben was away")
	h := e.upload(t, ana, "h.txt")
	e.sendFiles(t, ana, c, "k8", "back", h.ID) // 8
	e.canRead(t, ben, h)
	e.canRead(t, dan, h)
	e.cannotRead(t, cy, h.ID, "a stranger")
}

// testFileAccessRecall: a recall deletes the links of the recalled
// message in its transaction: nobody but the owner reads a file only it
// carried, a file another message carries stays readable, the recalled
// message reads with no attachments in every read, and a file that lost
// its last link is the collector's.
func testFileAccessRecall(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben")
	ana, ben := ps[0], ps[1]
	const c = "c-ab"
	e.group(t, ana, c, "ben") // 1, 2
	f := e.upload(t, ana, "f.txt")
	g := e.upload(t, ana, "g.txt")
	e.sendFiles(t, ana, c, "k3", "two files", f.ID, g.ID) // 3
	e.sendFiles(t, ana, c, "k4", "f again", f.ID)         // 4
	e.canRead(t, ben, f)
	e.canRead(t, ben, g)
	e.recall(t, ana, c, 3, "r5") // 5
	e.cannotRead(t, ben, g.ID, "the file of a recalled message")
	e.canRead(t, ben, f)
	e.canRead(t, ana, g)
	if n := e.db.Int(t, "SELECT count(*) FROM file_links WHERE conv_id = ? AND seq = 3", c); n != 0 {
		t.Errorf("%d links of the recalled message", n)
	}
	wantAttachments(t, "fetch of the recalled message", e.fetch(t, ben, c, 3))
	pg := e.sync(t, ben, c, 2, 50)
	wantAttachments(t, "sync of the recalled message", eventAt(pg.Events, 3))
	wantAttachments(t, "sync of the kept message", eventAt(pg.Events, 4), f)
	wantAttachments(t, "feed of the recalled message", eventAt(e.feed(t, c, 2, 50).Events, 3))
	wantAttachments(t, "feed events of the recalled message", eventAt(e.feedEvents(t, c, 2, 50).Events, 3))
	e.recall(t, ana, c, 4, "r6") // 6
	e.cannotRead(t, ben, f.ID, "a file whose messages are all recalled")
	e.canRead(t, ana, f)
	if n := e.links(t, f.ID, "") + e.links(t, g.ID, ""); n != 0 {
		t.Errorf("%d links left after both recalls", n)
	}
	far := time.Now().Add(time.Hour)
	stale, err := e.st.StaleFiles(ctx(t), parley.StaleFiles{UploadingBefore: far, UnlinkedBefore: far, Limit: 10})
	ok(t, err, "stale files")
	if got := fileIDs(stale); !slices.Equal(got, []string{f.ID, g.ID}) {
		t.Errorf("stale after the recalls: %v, want %v", got, []string{f.ID, g.ID})
	}
}

func fileIDs(fs []parley.File) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.ID
	}
	return out
}

// testFileAccessPurge: a purge deletes the links of the events it
// deletes: a former reader loses a file whose message went, keeps one
// whose message stays; the owner keeps both.
func testFileAccessPurge(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben")
	ana, ben := ps[0], ps[1]
	const c = "c-ab"
	e.group(t, ana, c, "ben") // 1, 2
	f := e.upload(t, ana, "f.txt")
	g := e.upload(t, ana, "g.txt")
	e.sendFiles(t, ana, c, "k3", "old", f.ID) // 3
	e.send(t, ana, c, "k4", "plain")          // 4
	e.sendFiles(t, ana, c, "k5", "new", g.ID) // 5
	ok(t, e.st.SetRetention(ctx(t), c, parley.Retention{KeepLast: 2}), "keep last 2")
	pr, err := e.st.Purge(ctx(t), c)
	ok(t, err, "purge")
	if pr.MinSeq != 4 {
		t.Fatalf("purge: %+v, want min_seq 4", pr)
	}
	e.cannotRead(t, ben, f.ID, "the file of a purged message")
	e.canRead(t, ben, g)
	e.canRead(t, ana, f)
	if n := e.db.Int(t, "SELECT count(*) FROM file_links WHERE conv_id = ? AND seq < 4", c); n != 0 {
		t.Errorf("%d links of purged events", n)
	}
	if n := e.links(t, g.ID, c); n != 1 {
		t.Errorf("%d links of the kept message, want 1", n)
	}
	wantAttachments(t, "the kept message", e.fetch(t, ben, c, 5), g)
}

// testFileAccessRollback: a rollback rebuilds the conversation's links
// from the events it keeps, in its transaction: a message it removes
// takes its links (a new event at the freed seq does not inherit them),
// one it keeps keeps them, and a recall it undoes gives them back.
func testFileAccessRollback(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben")
	ana, ben := ps[0], ps[1]
	const c = "c-ab"
	e.group(t, ana, c, "ben") // 1, 2
	f := e.upload(t, ana, "f.txt")
	h := e.upload(t, ana, "h.txt")
	e.sendFiles(t, ana, c, "k3", "f", f.ID) // 3
	e.sendFiles(t, ana, c, "k4", "h", h.ID) // 4
	e.send(t, ana, c, "k5", "plain")        // 5
	rollback := func(conv string, to int64) {
		t.Helper()
		rr, err := e.st.Rollback(ctx(t), conv, to)
		if err != nil || rr.Head != to {
			t.Fatalf("rollback of %s to %d: %+v %v", conv, to, rr, err)
		}
	}
	rollback(c, 3)
	e.canRead(t, ben, f)
	e.cannotRead(t, ben, h.ID, "the file of a rolled-back message")
	e.canRead(t, ana, h)
	if n, m := e.links(t, f.ID, c), e.links(t, h.ID, c); n != 1 || m != 0 {
		t.Errorf("links after the rollback to 3: f %d, h %d; want 1, 0", n, m)
	}
	rollback(c, 2)
	e.cannotRead(t, ben, f.ID, "the file of a rolled-back message")
	e.send(t, ana, c, "k3b", "no files at the freed seq") // 3 again
	e.cannotRead(t, ben, f.ID, "a file linked at a seq since reused")
	if n := e.db.Int(t, "SELECT count(*) FROM file_links WHERE conv_id = ?", c); n != 0 {
		t.Errorf("%d links after the rollback past every send", n)
	}
	wantAttachments(t, "the new event at the freed seq", e.fetch(t, ben, c, 3))

	const c2 = "c-r"
	e.group(t, ana, c2, "ben") // 1, 2
	g := e.upload(t, ana, "g.txt")
	e.sendFiles(t, ana, c2, "k3", "", g.ID) // 3
	e.recall(t, ana, c2, 3, "r4")           // 4
	e.send(t, ana, c2, "k5", "after")       // 5
	rollback(c2, 4)
	e.cannotRead(t, ben, g.ID, "the file of a message whose recall the rollback keeps")
	if n := e.links(t, g.ID, c2); n != 0 {
		t.Errorf("%d links of a message recalled before the restore point", n)
	}
	rollback(c2, 3)
	e.canRead(t, ben, g)
	if n := e.links(t, g.ID, c2); n != 1 {
		t.Errorf("%d links after the recall was undone, want 1", n)
	}
	wantAttachments(t, "the message after the undo", e.fetch(t, ben, c2, 3), g)
}

// testAttachRejections: a send whose attachments are not all ready files
// of the sender's own is NOT_FOUND (ErrNotAttachable, naming the first
// such id) and stores nothing, its key included; more than ten files, a
// file listed twice or a bad id is INVALID_ARGUMENT; the open period and
// the reply target are checked before the attachments. A file another
// user sent is readable but not attachable.
func testAttachRejections(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben", "cy")
	ana, ben, cy := ps[0], ps[1], ps[2]
	const c = "c-ab"
	e.group(t, ana, c, "ben") // 1, 2
	mine := e.upload(t, ana, "mine.txt")
	theirs := e.upload(t, ben, "theirs.txt")
	e.sendFiles(t, ben, c, "kb", "ben's file", theirs.ID) // 3: ana may read it now
	e.canRead(t, ana, theirs)
	part := e.createUpload(t, ana, "part.bin", 10)
	var eleven []string
	for i := range 11 {
		eleven = append(eleven, fmt.Sprintf("file-%d", i))
	}
	cases := []struct {
		what  string
		p     parley.Principal
		files []string
		reply int64
		body  string
		code  parley.Code
		err   error
	}{
		{"another user's file", ana, []string{theirs.ID}, 0, "x", parley.CodeNotFound, parley.ErrNotAttachable(theirs.ID)},
		{"an unfinished upload", ana, []string{part.ID}, 0, "x", parley.CodeNotFound, parley.ErrNotAttachable(part.ID)},
		{"a missing file", ana, []string{"no-such-upload"}, 0, "x", parley.CodeNotFound, parley.ErrNotAttachable("no-such-upload")},
		{"a good file then a missing one", ana, []string{mine.ID, "no-such-upload"}, 0, "", parley.CodeNotFound, parley.ErrNotAttachable("no-such-upload")},
		{"a foreign file then a good one", ana, []string{theirs.ID, mine.ID}, 0, "x", parley.CodeNotFound, parley.ErrNotAttachable(theirs.ID)},
		{"eleven files", ana, eleven, 0, "x", parley.CodeInvalidArgument, nil},
		{"a file twice", ana, []string{mine.ID, mine.ID}, 0, "x", parley.CodeInvalidArgument, nil},
		{"a bad id", ana, []string{"Not/A/Key"}, 0, "x", parley.CodeInvalidArgument, nil},
		{"no body and no files", ana, nil, 0, "", parley.CodeInvalidArgument, nil},
		{"a non-member", cy, []string{"no-such-upload"}, 0, "x", parley.CodeNotMember, nil},
		{"a missing reply target first", ana, []string{"no-such-upload"}, 99, "x", parley.CodeNotFound, nil},
	}
	before, rows := e.full(t, c), e.fileRows(t)
	for _, k := range cases {
		_, err := e.st.Send(ctx(t), k.p, parley.SendRequest{Conv: c, CMID: "k-bad", Body: k.body, ReplyTo: k.reply, Attachments: k.files})
		if !wantCode(t, err, k.code) {
			t.Errorf("%s: above", k.what)
		} else if k.err != nil && err.Error() != k.err.Error() {
			t.Errorf("%s: %v, want %v", k.what, err, k.err)
		} else if k.reply != 0 && err.Error() == parley.ErrNotAttachable("no-such-upload").Error() {
			t.Errorf("%s: %v, want the reply target's error", k.what, err)
		}
		e.fullUnchanged(t, c, before)
		e.fileRowsUnchanged(t, k.what, rows)
	}
	e.sendFiles(t, ana, c, "k-bad", "", mine.ID) // the refused key was never stored
	if n := e.links(t, mine.ID, c); n != 1 {
		t.Errorf("%d links after the accepted send, want 1", n)
	}
}

// testAttachReads: a message carries its attachments, in the order sent,
// as AttachmentOf the files, in Sync, Fetch, Feed, FeedEvents, the Convs
// entry's last message and search hits; the body may be empty; a replay
// answers dup; the same key with another list (another order, fewer, none)
// is IDEMPOTENCY_MISMATCH; a recalled message carries none.
func testAttachReads(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben")
	ana, ben := ps[0], ps[1]
	const c = "c-ab"
	e.group(t, ana, c, "ben") // 1, 2
	f := e.upload(t, ana, "report.pdf")
	g := e.createUpload(t, ana, "photo.png", 10)
	g, err := e.st.FinishUpload(ctx(t), ana, g.ID, parley.FileMeta{MIME: "image/png", SHA256: shaOf("png"), Width: 3, Height: 2})
	ok(t, err, "finish the photo")
	e.send(t, ana, c, "k3", "plain")                                 // 3
	e.sendFiles(t, ana, c, "k4", "the quarterly report", g.ID, f.ID) // 4
	e.sendFiles(t, ana, c, "k5", "", f.ID)                           // 5
	check := func(what string, evs []parley.Event) {
		t.Helper()
		wantAttachments(t, what, eventAt(evs, 3))
		wantAttachments(t, what, eventAt(evs, 4), g, f)
		wantAttachments(t, what, eventAt(evs, 5), f)
		if ev := eventAt(evs, 5); ev.Seq != 5 || ev.Body != "" {
			t.Errorf("%s: %s, want an empty body at 5", what, describe(ev))
		}
	}
	check("sync", e.sync(t, ben, c, 2, 50).Events)
	check("fetch", []parley.Event{e.fetch(t, ben, c, 3), e.fetch(t, ben, c, 4), e.fetch(t, ana, c, 5)})
	check("feed", e.feed(t, c, 2, 50).Events)
	check("feed events", e.feedEvents(t, c, 2, 50).Events)
	if s := e.summary(t, ben, c); s.Last == nil {
		t.Errorf("convs: no last message")
	} else {
		wantAttachments(t, "convs' last", *s.Last, f)
	}
	if hits := e.searchAll(t, ben, parley.SearchRequest{Query: "quarterly"}); len(hits) != 1 {
		t.Errorf("search: %d hits, want 1", len(hits))
	} else {
		wantAttachments(t, "search hit", hits[0].Event, g, f)
	}

	s, err := e.st.Send(ctx(t), ana, parley.SendRequest{Conv: c, CMID: "k4", Body: "the quarterly report", Attachments: []string{g.ID, f.ID}})
	if wantCode(t, err, "") && (!s.Dup || s.Seq != 4) {
		t.Errorf("replay: %+v, want Dup of 4", s)
	}
	before, rows := e.full(t, c), e.fileRows(t)
	for _, other := range [][]string{{f.ID, g.ID}, {g.ID}, nil} {
		_, err := e.st.Send(ctx(t), ana, parley.SendRequest{Conv: c, CMID: "k4", Body: "the quarterly report", Attachments: other})
		wantCode(t, err, parley.CodeIdempotencyMismatch)
	}
	_, err = e.st.Send(ctx(t), ana, parley.SendRequest{Conv: c, CMID: "k3", Body: "plain", Attachments: []string{f.ID}})
	wantCode(t, err, parley.CodeIdempotencyMismatch)
	e.fullUnchanged(t, c, before)
	e.fileRowsUnchanged(t, "replays", rows)

	e.recall(t, ana, c, 4, "r6") // 6
	for what, evs := range map[string][]parley.Event{
		"sync": e.sync(t, ben, c, 2, 50).Events, "fetch": {e.fetch(t, ben, c, 4)},
		"feed": e.feed(t, c, 2, 50).Events, "feed events": e.feedEvents(t, c, 2, 50).Events,
	} {
		wantAttachments(t, what+" of the recalled message", eventAt(evs, 4))
	}
	s, err = e.st.Send(ctx(t), ana, parley.SendRequest{Conv: c, CMID: "k4", Body: "the quarterly report", Attachments: []string{g.ID, f.ID}})
	if wantCode(t, err, "") && (!s.Dup || s.Seq != 4) {
		t.Errorf("replay after the recall: %+v, want Dup of 4", s)
	}
}

// testAttachConcurrent: sends of one upload made at once, in one
// conversation and in two, through two stores, all land and each links
// the file.
func testAttachConcurrent(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben")
	ana, ben := ps[0], ps[1]
	e.group(t, ana, "c-1", "ben")
	e.group(t, ana, "c-2", "ben")
	f := e.upload(t, ana, "shared.txt")
	stores := []parley.Store{e.st, e.db.Open(t)}
	const n = 6
	sent := make([]parley.Sent, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			conv := []string{"c-1", "c-2"}[i%2]
			sent[i], errs[i] = stores[i%2].Send(ctx(t), ana, parley.SendRequest{Conv: conv, CMID: fmt.Sprintf("k%d", i), Body: "same file", Attachments: []string{f.ID}})
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || sent[i].Dup {
			t.Errorf("send %d: %+v %v, want a new message", i, sent[i], errs[i])
			continue
		}
		wantAttachments(t, fmt.Sprintf("send %d", i), e.fetch(t, ben, sent[i].Conv, sent[i].Seq), f)
	}
	if a, b := e.links(t, f.ID, "c-1"), e.links(t, f.ID, "c-2"); a != n/2 || b != n/2 {
		t.Errorf("links %d and %d, want %d in each conversation", a, b, n/2)
	}
	e.canRead(t, ben, f)
}

// testAttachBatch: the group commit path checks attachments item by item
// as Send does: a refused item changes nothing, the others land with
// their attachments and links, a replay answers dup and another list
// under the same key is IDEMPOTENCY_MISMATCH.
func testAttachBatch(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben")
	ana, ben := ps[0], ps[1]
	const c = "c-ab"
	e.group(t, ana, c, "ben") // 1, 2
	f := e.upload(t, ana, "f.txt")
	g := e.upload(t, ana, "g.txt")
	theirs := e.upload(t, ben, "theirs.txt")
	part := e.createUpload(t, ana, "part.bin", 3)
	e.sendFiles(t, ana, c, "k3", "before", g.ID) // 3
	req := func(p parley.Principal, cmid, body string, ids ...string) parley.BatchSend {
		return parley.BatchSend{P: p, Req: parley.SendRequest{Conv: c, CMID: cmid, Body: body, Attachments: ids}}
	}
	items := []struct {
		in    parley.BatchSend
		code  parley.Code
		files []parley.File
	}{
		{req(ana, "b1", "one", f.ID), "", []parley.File{f}},
		{req(ana, "b2", "not mine", theirs.ID), parley.CodeNotFound, nil},
		{req(ben, "b3", "not ben's", f.ID), parley.CodeNotFound, nil},
		{req(ana, "b4", "", g.ID, f.ID), "", []parley.File{g, f}},
		{req(ana, "b5", "unfinished", part.ID), parley.CodeNotFound, nil},
		{req(ana, "b6", "twice", f.ID, f.ID), parley.CodeInvalidArgument, nil},
		{req(ana, "k3", "before", g.ID), "", []parley.File{g}},
		{req(ana, "k3", "before", f.ID), parley.CodeIdempotencyMismatch, nil},
		{req(ben, "b9", "ben's", theirs.ID), "", []parley.File{theirs}},
	}
	in := make([]parley.BatchSend, len(items))
	for i, it := range items {
		in[i] = it.in
	}
	res := e.batcher(t).SendBatch(ctx(t), in)
	if len(res) != len(items) {
		t.Fatalf("%d results for %d items", len(res), len(items))
	}
	for i, it := range items {
		if !wantCode(t, res[i].Err, it.code) {
			t.Errorf("item %d (%s): above", i, it.in.Req.CMID)
			continue
		}
		if it.code != "" {
			continue
		}
		if dup := it.in.Req.CMID == "k3"; res[i].Sent.Dup != dup || dup && res[i].Sent.Seq != 3 {
			t.Errorf("item %d: %+v, want dup %v", i, res[i].Sent, dup)
		}
		wantAttachments(t, fmt.Sprintf("item %d", i), e.fetch(t, ben, c, res[i].Sent.Seq), it.files...)
	}
	if h := e.conv(t, c).Head; h != 6 {
		t.Errorf("head %d, want 6 (three new messages)", h)
	}
	if a, b, x := e.links(t, f.ID, c), e.links(t, g.ID, c), e.links(t, theirs.ID, c); a != 2 || b != 2 || x != 1 {
		t.Errorf("links f %d, g %d, theirs %d; want 2, 2, 1", a, b, x)
	}
	if n := e.links(t, part.ID, ""); n != 0 {
		t.Errorf("%d links of an unfinished upload", n)
	}
}

// testFileStale: StaleFiles lists, oldest first and at most Limit,
// unfinished uploads created before UploadingBefore and ready files no
// message links created before UnlinkedBefore (each bound strict and for
// its own state only); never a linked file. The limit is 1..1000.
func testFileStale(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben")
	ana, ben := ps[0], ps[1]
	const c = "c-ab"
	e.group(t, ana, c, "ben")
	u1 := e.createUpload(t, ana, "u1.bin", 10)
	r1 := e.upload(t, ana, "r1.txt")
	l1 := e.upload(t, ana, "l1.txt")
	e.sendFiles(t, ana, c, "k3", "", l1.ID)
	u2 := e.createUpload(t, ben, "u2.bin", 10)
	r2 := e.upload(t, ben, "r2.txt")
	far, past := time.Now().Add(time.Hour), time.Now().Add(-time.Hour)
	list := func(what string, q parley.StaleFiles, want ...parley.File) {
		t.Helper()
		got, err := e.st.StaleFiles(ctx(t), q)
		if !wantCode(t, err, "") {
			return
		}
		g, w := make([]string, len(got)), make([]string, len(want))
		for i := range got {
			g[i] = fileLine(got[i])
		}
		for i := range want {
			w[i] = fileLine(want[i])
		}
		if !slices.Equal(g, w) {
			t.Errorf("%s:\ngot  %q\nwant %q", what, g, w)
		}
	}
	list("both", parley.StaleFiles{UploadingBefore: far, UnlinkedBefore: far, Limit: 100}, u1, r1, u2, r2)
	list("uploads only", parley.StaleFiles{UploadingBefore: far, UnlinkedBefore: past, Limit: 100}, u1, u2)
	list("ready only", parley.StaleFiles{UploadingBefore: past, UnlinkedBefore: far, Limit: 1000}, r1, r2)
	list("none", parley.StaleFiles{UploadingBefore: past, UnlinkedBefore: past, Limit: 100})
	list("bounds strict", parley.StaleFiles{UploadingBefore: u2.CreatedAt, UnlinkedBefore: r2.CreatedAt, Limit: 100}, u1, r1)
	list("limit", parley.StaleFiles{UploadingBefore: far, UnlinkedBefore: far, Limit: 2}, u1, r1)
	for _, limit := range []int{0, -1, 1001} {
		_, err := e.st.StaleFiles(ctx(t), parley.StaleFiles{UploadingBefore: far, UnlinkedBefore: far, Limit: limit})
		wantCode(t, err, parley.CodeInvalidArgument)
	}
}

// testFileDelete: DeleteFile deletes a row only if it is still stale by
// the same bounds, checked in its transaction: a file a send linked
// meanwhile, one finished meanwhile, a ready file under the uploads'
// bound only or one too new stays; a deleted file reads as missing for
// its owner and leaves the quota; a missing id is false, a bad one
// INVALID_ARGUMENT.
func testFileDelete(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben")
	ana, ben := ps[0], ps[1]
	const c = "c-ab"
	e.group(t, ana, c, "ben")
	u := e.createUpload(t, ana, "u.bin", 10)
	r := e.upload(t, ana, "r.txt")
	l := e.upload(t, ana, "l.txt")
	e.sendFiles(t, ana, c, "k3", "", l.ID) // 3
	v := e.createUpload(t, ana, "v.bin", 10)
	far, past := time.Now().Add(time.Hour), time.Now().Add(-time.Hour)
	all := parley.StaleFiles{UploadingBefore: far, UnlinkedBefore: far, Limit: 100}
	del := func(what, id string, q parley.StaleFiles, want bool) {
		t.Helper()
		rows := e.fileRows(t)
		gone, err := e.st.DeleteFile(ctx(t), id, q)
		if !wantCode(t, err, "") || gone != want {
			t.Errorf("%s: deleted %v, want %v", what, gone, want)
		}
		if !want {
			e.fileRowsUnchanged(t, what, rows)
		}
	}
	_, err := e.st.DeleteFile(ctx(t), "Not A Key", all)
	wantCode(t, err, parley.CodeInvalidArgument)
	del("a missing file", "no-such-file", all, false)
	del("a linked file", l.ID, all, false)
	e.canRead(t, ben, l)
	del("an upload too new", u.ID, parley.StaleFiles{UploadingBefore: past, UnlinkedBefore: far, Limit: 100}, false)
	del("a ready file under the uploads' bound", r.ID, parley.StaleFiles{UploadingBefore: far, UnlinkedBefore: past, Limit: 100}, false)
	del("an upload", u.ID, all, true)
	e.cannotRead(t, ana, u.ID, "a deleted upload")
	del("the upload again", u.ID, all, false)
	if usage, err := e.st.FileUsage(ctx(t), ana); err != nil || usage.Files != 3 {
		t.Errorf("usage after the delete: %+v %v, want 3 files", usage, err)
	}

	// The collector listed r and v; a send links r and v is finished
	// before it deletes them.
	stale, err := e.st.StaleFiles(ctx(t), all)
	ok(t, err, "stale files")
	if got := fileIDs(stale); !slices.Equal(got, []string{r.ID, v.ID}) {
		t.Fatalf("stale: %v, want %v", got, []string{r.ID, v.ID})
	}
	e.sendFiles(t, ana, c, "k4", "late", r.ID) // 4
	_, err = e.st.FinishUpload(ctx(t), ana, v.ID, metaOf("v"))
	ok(t, err, "finish v")
	del("a file a send linked meanwhile", r.ID, all, false)
	del("an upload finished meanwhile", v.ID, parley.StaleFiles{UploadingBefore: far, UnlinkedBefore: past, Limit: 100}, false)
	e.canRead(t, ben, r)
	e.recall(t, ana, c, 4, "r5") // 5: r unlinked again
	del("a file whose message was recalled", r.ID, all, true)
	e.cannotRead(t, ana, r.ID, "a deleted file")
	wantAttachments(t, "the recalled message", e.fetch(t, ben, c, 4))
}

// testAttachExport: an export's messages carry their attachments as of
// the export's snapshot: none for a message recalled before it, all for
// one recalled after it (the recall is past the snapshot).
func testAttachExport(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben")
	ana, ben := ps[0], ps[1]
	const c = "c-ab"
	e.group(t, ana, c, "ben") // 1, 2
	f := e.upload(t, ana, "f.txt")
	g := e.upload(t, ana, "g.txt")
	e.sendFiles(t, ana, c, "k3", "both", f.ID, g.ID) // 3
	e.sendFiles(t, ana, c, "k4", "gone", g.ID)       // 4
	e.send(t, ana, c, "k5", "plain")                 // 5
	e.sendFiles(t, ana, c, "k6", "", f.ID)           // 6
	e.recall(t, ana, c, 4, "r7")                     // 7
	j := e.newExport(t, ben, "k-ben", "conv:"+c)
	e.recall(t, ana, c, 6, "r8") // 8: after the snapshot
	for _, limit := range []int{parley.MaxPage, 1} {
		evs := exportEvents(t, e.st, j.ID, c, limit)
		what := fmt.Sprintf("export, pages of %d", limit)
		if got := seqs(evs); !slices.Equal(got, []int64{3, 4, 5, 6}) {
			t.Fatalf("%s: seqs %v, want 3..6", what, got)
		}
		wantAttachments(t, what, evs[0], f, g)
		wantAttachments(t, what+": recalled before the snapshot", evs[1])
		wantAttachments(t, what, evs[2])
		wantAttachments(t, what+": recalled after the snapshot", evs[3], f)
	}
}

// testFilesExist: FilesExist answers true for every id with a row, in
// either state, and leaves out missing and deleted ones; 1..1000 valid
// ids, else INVALID_ARGUMENT with nothing read.
func testFilesExist(t *testing.T, e *env) {
	ana := e.users(t, "ana")[0]
	u := e.createUpload(t, ana, "u.bin", 10)
	r := e.upload(t, ana, "r.txt")
	d := e.createUpload(t, ana, "d.bin", 10)
	far := time.Now().Add(time.Hour)
	gone, err := e.st.DeleteFile(ctx(t), d.ID, parley.StaleFiles{UploadingBefore: far, UnlinkedBefore: far, Limit: 1})
	if err != nil || !gone {
		t.Fatalf("delete %s: %v %v", d.ID, gone, err)
	}
	got, err := e.st.FilesExist(ctx(t), []string{u.ID, "no-such-file", r.ID, d.ID, r.ID})
	ok(t, err, "files exist")
	if want := map[string]bool{u.ID: true, r.ID: true}; !maps.Equal(got, want) {
		t.Errorf("files exist: %v, want %v", got, want)
	}
	many := make([]string, parley.MaxFilesPage)
	for i := range many {
		many[i] = fmt.Sprintf("f%d", i)
	}
	many[len(many)-1] = r.ID
	got, err = e.st.FilesExist(ctx(t), many)
	ok(t, err, "files exist, a full batch")
	if len(got) != 1 || !got[r.ID] {
		t.Errorf("files exist, a full batch: %v, want only %s", got, r.ID)
	}
	for what, ids := range map[string][]string{
		"none": nil, "too many": append(many, "one-more"), "a bad id": {r.ID, "Not A Key"},
	} {
		_, err := e.st.FilesExist(ctx(t), ids)
		if !wantCode(t, err, parley.CodeInvalidArgument) {
			t.Errorf("files exist with %s: above", what)
		}
	}
}

// testReadyFiles: ReadyFiles walks every ready file once, in pages of at
// most limit, each starting after the last id of the one before; uploads
// are left out. The limit is 1..1000, after "" or a file id.
func testReadyFiles(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben")
	var want []string
	for i := range 5 {
		want = append(want, e.upload(t, ps[i%2], fmt.Sprintf("r%d.txt", i)).ID)
	}
	e.createUpload(t, ps[0], "u.bin", 10)
	for _, limit := range []int{1, 2, 5, 1000} {
		var got []string
		after := ""
		for page := 0; page < 10; page++ {
			fs, err := e.st.ReadyFiles(ctx(t), after, limit)
			ok(t, err, "ready files")
			if len(fs) > limit {
				t.Fatalf("limit %d: a page of %d", limit, len(fs))
			}
			for _, f := range fs {
				if f.State != parley.FileReady {
					t.Errorf("limit %d: %s", limit, fileLine(f))
				}
				got = append(got, f.ID)
			}
			if len(fs) < limit {
				break
			}
			after = fs[len(fs)-1].ID
		}
		if g, w := slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want)); !slices.Equal(g, w) {
			t.Errorf("limit %d: walked %v, want each of %v once", limit, got, want)
		}
	}
	for _, bad := range []struct {
		after string
		limit int
	}{{"", 0}, {"", -1}, {"", 1001}, {"Not A Key", 10}} {
		_, err := e.st.ReadyFiles(ctx(t), bad.after, bad.limit)
		if !wantCode(t, err, parley.CodeInvalidArgument) {
			t.Errorf("ready files after %q, limit %d: above", bad.after, bad.limit)
		}
	}
}
