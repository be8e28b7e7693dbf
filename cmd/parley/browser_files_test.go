package main

// Browser tests of files in the chat screens (docs/web-client.md): files
// attached through the composer's file input, uploaded over tus by the
// page, sent as a message's attachments and shown to the other user as a
// thumbnail and a download link; and an upload cut by a reload that
// resumes from the server's offset with the bytes the outbox kept.

import (
	"crypto/rand"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// writePNG writes a w×h PNG of a gradient under dir and returns its path.
func writePNG(t *testing.T, dir, name string, w, h int) string {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{uint8(x * 255 / w), uint8(y * 255 / h), uint8((x ^ y) & 0xff), 255})
		}
	}
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := png.Encode(f, img); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeRandom writes n random bytes under dir and returns the path.
func writeRandom(t *testing.T, dir, name string, n int) string {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// pageSHA fetches a URL from the device's page (its cookie) and returns the
// SHA-256 of the bytes, or "status N".
func pageSHA(d *chatDev, href string) string {
	d.t.Helper()
	return devEval[string](d, `fetch(`+jsq(href)+`).then(async r => {
		if (!r.ok) return "status " + r.status;
		const sum = await crypto.subtle.digest("SHA-256", await r.arrayBuffer());
		return [...new Uint8Array(sum)].map(b => b.toString(16).padStart(2, "0")).join("");
	})`)
}

// TestBrowserFiles: ana attaches a PNG and a text file through the file
// input, sees them upload in the composer's chips, and sends them with a
// text; ben sees the image as a thumbnail (or the small image itself while
// no thumbnail is made) in a box reserved at the image's proportions, and
// the text file as a download link with its name and size; what ben
// downloads through the page has the SHA-256 of what ana picked. A recall
// takes the files off both timelines and out of ben's reach.
func TestBrowserFiles(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		p := chatServe(t, b)
		browser := newBrowser(t)
		ana, ben := pairInTeam(t, browser, p.http)

		dir := t.TempDir()
		pic := writePNG(t, dir, "boat.png", 640, 480)
		notes := filepath.Join(dir, "notes <b>1.txt")
		if err := os.WriteFile(notes, []byte(strings.Repeat("notes of the meeting\n", 300)), 0o600); err != nil {
			t.Fatal(err)
		}
		ana.do(chromedp.SetUploadFiles(`[data-test=attach-input]`, []string{pic, notes}))
		ana.waitJS("two chips", `document.querySelectorAll("form.composer [data-test=chips] [data-test=chip]").length === 2`)
		names := devEval[[]string](ana, `[...document.querySelectorAll("form.composer [data-test=chip-name]")].map(e => e.textContent)`)
		if strings.Join(names, "|") != "boat.png|notes <b>1.txt" {
			t.Errorf("chips %q", names)
		}
		if n := devEval[int](ana, `document.querySelectorAll("form.composer [data-test=chip] progress[data-test=upload-progress]").length`); n != 2 {
			t.Errorf("%d progress bars in the chips, want 2", n)
		}
		ana.waitJS("both uploaded", `[...document.querySelectorAll("form.composer [data-test=chip]")].every(c => c.dataset.state === "uploaded")`)
		ana.screenshot("chips-" + b.name)
		ana.say("the boat and the notes")
		ana.waitJS("the composer's chips gone", `document.querySelectorAll("form.composer [data-test=chip]").length === 0`)

		for _, d := range []*chatDev{ana, ben} {
			d.waitOnce("the boat and the notes")
			d.waitJS("the image loaded (thumbnail or the image)", msgJS("the boat and the notes")+`?.querySelector("img[data-test=thumb]")?.complete && `+
				msgJS("the boat and the notes")+`.querySelector("img[data-test=thumb]").naturalWidth > 0`)
		}
		type shown struct {
			W, H     int
			Natural  int // the loaded image's width: the thumbnail's (at most 320) or the image's
			Fallback string
			Href     string
			Link     string
			Download string
			Text     string
		}
		got := devEval[shown](ben, `(() => { const li = `+msgJS("the boat and the notes")+`;
			const img = li.querySelector("img[data-test=thumb]"), a = li.querySelector("a[data-test=file-link]");
			return {W: +img.getAttribute("width"), H: +img.getAttribute("height"), Natural: img.naturalWidth, Fallback: img.dataset.fallback || "",
				Href: li.querySelector("a[data-test=file-image]").getAttribute("href"),
				Link: a.getAttribute("href"), Download: a.getAttribute("download"), Text: a.textContent}; })()`)
		t.Logf("%s: ben's image %+v", b.name, got)
		if got.W != 320 || got.H != 240 {
			t.Errorf("the image's box is %d×%d, want 320×240 (640×480 scaled into 320×240)", got.W, got.H)
		}
		if (got.Fallback == "" && got.Natural > 320) || (got.Fallback == "full" && got.Natural != 640) {
			t.Errorf("the image loaded %d px wide with fallback %q: want a thumbnail (≤ 320) or the image (640)", got.Natural, got.Fallback)
		}
		if got.Download != "notes <b>1.txt" || !strings.Contains(got.Text, "notes <b>1.txt") || !strings.Contains(got.Text, "6.3 KB") {
			t.Errorf("download link %+v", got)
		}
		if n := devEval[int](ben, `document.querySelectorAll("#app b").length`); n != 0 {
			t.Errorf("a file name became markup")
		}
		for name, c := range map[string]struct{ href, path string }{"image": {got.Href, pic}, "text": {got.Link, notes}} {
			if sum, want := pageSHA(ben, c.href), fileSHA(t, c.path); sum != want {
				t.Errorf("ben's download of the %s: %s, want sha256 %s", name, sum, want)
			}
		}
		ben.screenshot("files-" + b.name)

		// A recall takes the files off the timeline, and out of ben's reach.
		seq := devEval[int](ana, `+`+msgJS("the boat and the notes")+`.dataset.seq`)
		ana.do(chromedp.Click(fmt.Sprintf(`[data-test=msg][data-seq="%d"] [data-test=recall]`, seq)))
		ana.waitJS("the recall's confirmation", `!!document.querySelector("dialog[data-test=confirm][open]")`)
		ana.do(chromedp.Click(`[data-test=confirm-ok]`))
		for _, d := range []*chatDev{ana, ben} {
			d.waitJS("the recalled message without files", fmt.Sprintf(`!!document.querySelector('[data-test=msg][data-seq="%d"] [data-test=recalled]') &&
				!document.querySelector('[data-test=msg][data-seq="%d"] [data-test=attachments]')`, seq, seq))
		}
		if s := pageSHA(ben, got.Link); s != "status 404" {
			t.Errorf("ben's download after the recall: %s, want status 404", s)
		}

		// A file pasted into the box, one dropped on the timeline and one on
		// the composer (attached once); the pasted one removed; the dropped
		// ones sent with no text.
		devEval[bool](ana, `(() => {
			const dt = new DataTransfer();
			dt.items.add(new File(["pasted bytes"], "pasted.txt", {type: "text/plain"}));
			document.querySelector("[data-test=composer]").dispatchEvent(new ClipboardEvent("paste", {clipboardData: dt, bubbles: true, cancelable: true}));
			const dd = new DataTransfer();
			dd.items.add(new File(["dropped bytes"], "dropped.txt", {type: "text/plain"}));
			document.querySelector("[data-test=timeline]").dispatchEvent(new DragEvent("drop", {dataTransfer: dd, bubbles: true, cancelable: true}));
			const dc = new DataTransfer();
			dc.items.add(new File(["dropped on the composer"], "composer.txt", {type: "text/plain"}));
			document.querySelector("[data-test=composer]").dispatchEvent(new DragEvent("drop", {dataTransfer: dc, bubbles: true, cancelable: true}));
			return true; })()`)
		ana.waitJS("three chips, uploaded", `[...document.querySelectorAll("form.composer [data-test=chip][data-state=uploaded]")].map(c => c.querySelector("[data-test=chip-name]").textContent).sort().join() === "composer.txt,dropped.txt,pasted.txt"`)
		ana.click("remove the pasted file", `[...document.querySelectorAll("form.composer [data-test=chip]")].find(c => c.textContent.includes("pasted.txt")).querySelector("[data-test=chip-remove]")`)
		ana.waitJS("two chips left", `document.querySelectorAll("form.composer [data-test=chip]").length === 2`)
		ana.do(chromedp.Click(`[data-test=send]`))
		ben.waitJS("the file-only message", `[...document.querySelectorAll("[data-test=events] [data-test=msg] a[data-test=file-link]")].some(a => a.getAttribute("download") === "dropped.txt")`)
		if n := devEval[int](ben, `[...document.querySelectorAll("[data-test=events] a[data-test=file-link]")].filter(a => a.getAttribute("download") === "pasted.txt").length`); n != 0 {
			t.Errorf("the removed file was sent")
		}
		ana.waitJS("no outgoing row left", `document.querySelectorAll("[data-test=outgoing] [data-test=msg-out]").length === 0`)
		ben.waitJS("the list's preview of the files", `document.querySelector("[data-test=conv][data-conv='c-team'] .preview")?.textContent === "ana: 📎 2 files"`)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			got := metricLine(scrape(t, p.http), "parley_uploads_total{", `outcome="cancelled"`)
			if strings.HasSuffix(got, " 1") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%q: want the removed file's upload deleted", got)
			}
		}
	})
}

// networkLog records, from the DevTools network events of a device, the
// Upload-Offset of every HEAD answered on an upload.
type networkLog struct {
	mu      sync.Mutex
	methods map[network.RequestID]string
	heads   []int64
}

func watchHeads(t *testing.T, d *chatDev) *networkLog {
	t.Helper()
	l := &networkLog{methods: map[network.RequestID]string{}}
	if _, err := chromedp.Call(d.ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Listen(d.ctx, func(ev any) {
		l.mu.Lock()
		defer l.mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			l.methods[e.RequestID] = e.Request.Method
		case *network.EventResponseReceived:
			if l.methods[e.RequestID] == "HEAD" && strings.Contains(e.Response.URL, "/api/uploads/") {
				n, _ := strconv.ParseInt(header(e.Response, "Upload-Offset"), 10, 64)
				l.heads = append(l.heads, n)
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	return l
}

func (l *networkLog) headOffsets() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int64(nil), l.heads...)
}

// throttle limits the device's upload speed (bytes per second; -1: none).
func (d *chatDev) throttle(up float64) {
	d.t.Helper()
	if _, err := chromedp.Call(d.ctx, network.EmulateNetworkConditionsByRule, network.EmulateNetworkConditionsByRuleParams{
		MatchedNetworkConditions: []*network.Conditions{{URLPattern: "", DownloadThroughput: -1, UploadThroughput: up}},
	}); err != nil {
		d.t.Fatal(err)
	}
}

// TestBrowserFileResume: ana sends a 24 MiB file on a slow uplink and
// reloads the page while the upload is partway. The page reloads with the
// message still in the outbox, asks the server how far the upload is (a
// HEAD whose offset is past 0), sends only the rest from the bytes
// IndexedDB kept, and then the message, once: ben receives it with the
// same SHA-256, the server created one upload and received each byte once.
// A file above the server's max_file_size is refused in its chip with a
// sentence, not a code.
func TestBrowserFileResume(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "parley.yaml")
	if err := os.WriteFile(cfg, []byte("rate_limits: {}\nmax_file_size: 25MiB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := backend{name: "sqlite", db: "sqlite:" + filepath.Join(dir, "parley.db"), dir: dir}
	p := serveEnv(t, nil, "--demo", "--db", b.db, "--data-dir", b.dir, "--config", cfg)
	browser := newBrowser(t)
	ana, ben := pairInTeam(t, browser, p.http)
	heads := watchHeads(t, ana)

	files := t.TempDir()
	const size = 24 << 20
	big := writeRandom(t, files, "big.bin", size)
	ana.throttle(4 << 20)
	ana.do(chromedp.SetUploadFiles(`[data-test=attach-input]`, []string{big}))
	ana.waitJS("the chip", `!!document.querySelector("form.composer [data-test=chip]")`)
	ana.say("the big one")
	row := `document.querySelector("[data-test=outgoing] [data-test=msg-out] progress[data-test=upload-progress]")`
	ana.waitJS("the upload partway", row+` && `+row+`.value > `+strconv.Itoa(size/4))
	before := devEval[float64](ana, row+`.value`)
	ana.screenshot("partway")
	ana.do(chromedp.Reload())
	ana.throttle(-1)
	ana.waitOnline()
	t.Logf("reloaded at %.0f of %d bytes sent", before, size)
	for _, d := range []*chatDev{ana, ben} {
		d.waitOnce("the big one")
	}
	link := devEval[string](ben, msgJS("the big one")+`.querySelector("a[data-test=file-link]").getAttribute("href")`)
	if sum, want := pageSHA(ben, link), fileSHA(t, big); sum != want {
		t.Errorf("ben's download: %s, want %s", sum, want)
	}
	offs := heads.headOffsets()
	if len(offs) == 0 || offs[0] <= 0 || offs[0] >= size {
		t.Errorf("HEAD offsets after the reload %v, want the first partway (0 < offset < %d)", offs, size)
	}
	m := scrape(t, p.http)
	created := metricLine(m, "parley_uploads_total{", `outcome="created"`)
	ready := metricLine(m, "parley_uploads_total{", `outcome="ready"`)
	received := ""
	for _, l := range strings.Split(m, "\n") {
		if strings.HasPrefix(l, "parley_upload_bytes_received_total ") {
			received = l
		}
	}
	t.Logf("HEAD offsets %v; %s; %s; %s", offs, created, ready, received)
	if !strings.HasSuffix(created, " 1") || !strings.HasSuffix(ready, " 1") {
		t.Errorf("uploads: %q, %q, want one created and one ready", created, ready)
	}
	if f := strings.Fields(received); len(f) != 2 || f[1] != strconv.Itoa(size) && f[1] != strconv.FormatFloat(size, 'g', -1, 64) {
		t.Errorf("%q: want each of the %d bytes received once", received, size)
	}
	if n := count(teamBodies(t, b.store(t)), "the big one"); n != 1 {
		t.Errorf("stored %d times, want once", n)
	}

	// Too large: refused in its chip with a sentence; nothing to send.
	huge := writeRandom(t, files, "huge.bin", 26<<20)
	ana.do(chromedp.SetUploadFiles(`[data-test=attach-input]`, []string{huge}))
	ana.waitJS("the refusal", `!!document.querySelector("form.composer [data-test=chip][data-state=refused] [data-test=chip-error]")`)
	why := devEval[string](ana, `document.querySelector("form.composer [data-test=chip-error]").textContent`)
	if !strings.Contains(why, "huge.bin") || !strings.Contains(why, "larger than the 26.2 MB this server accepts") || strings.Contains(why, "TOO_LARGE") {
		t.Errorf("refusal %q", why)
	}
	ana.screenshot("refused")
	ana.do(chromedp.Click(`form.composer [data-test=chip-remove]`))
	ana.waitJS("the chip removed", `!document.querySelector("form.composer [data-test=chip]")`)
}

// TestBrowserOutboxUpgrade: a message left in the outbox of the previous
// schema (IndexedDB version 1: one store, an item written before items had
// a kind) survives the upgrade to the schema with files (version 2, a
// store of Blobs) and is sent after sign-in, once.
func TestBrowserOutboxUpgrade(t *testing.T) {
	dir := t.TempDir()
	b := backend{name: "sqlite", db: "sqlite:" + filepath.Join(dir, "parley.db"), dir: dir}
	p := chatServe(t, b)
	browser := newBrowser(t)
	ana := newDev(t, browser, "ana")
	ben := newDev(t, browser, "ben")
	ana.do(chromedp.Navigate(p.http + "/signin"))
	ana.waitJS("the sign-in page", `!!document.querySelector("[data-test=login]")`)
	if got := devEval[string](ana, `new Promise((done, fail) => {
		const r = indexedDB.open("parley-ana", 1);
		r.onupgradeneeded = () => r.result.createObjectStore("outbox", {keyPath: "cmid"}).createIndex("created", "created");
		r.onerror = () => fail(r.error);
		r.onsuccess = () => {
			const t = r.result.transaction("outbox", "readwrite");
			t.objectStore("outbox").put({cmid: "0b6c6a35-4a57-4f0e-9a51-5b0e4f3f2a11", conv: "c-team", body: "kept from version 1", created: Date.now(), state: "pending"});
			t.oncomplete = () => { r.result.close(); done("ok"); };
			t.onerror = () => fail(t.error);
		};
	})`); got != "ok" {
		t.Fatalf("writing the old outbox: %s", got)
	}
	ben.signIn(p.http, "ben")
	ben.open("c-team")
	ana.signIn(p.http, "ana")
	ana.open("c-team")
	for _, d := range []*chatDev{ana, ben} {
		d.waitOnce("kept from version 1")
	}
	stores := devEval[string](ana, `new Promise((done) => { const r = indexedDB.open("parley-ana");
		r.onsuccess = () => { done(r.result.version + ":" + [...r.result.objectStoreNames].join(",")); r.result.close(); }; })`)
	if stores != "2:blobs,outbox" {
		t.Errorf("the outbox database after the upgrade: %s, want 2:blobs,outbox", stores)
	}
	if n := count(teamBodies(t, b.store(t)), "kept from version 1"); n != 1 {
		t.Errorf("stored %d times, want once", n)
	}
}
