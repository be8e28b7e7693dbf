package parley_test

import (
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley"
)

// A send's notice carries the event as a member reads it back, unless the
// store did not report the commit time, the send was a replay, the body is
// over MaxNoticeBody, or it attaches files; a recall's notice is ids only.
func TestSentNotice(t *testing.T) {
	p := parley.Principal{User: "ana", Role: parley.RoleUser, DeviceID: "phone 2"}
	at := time.Date(2026, 12, 3, 19, 0, 0, 5e6, time.UTC)
	sent := parley.Sent{Conv: "g", Seq: 7, MID: "m-7", Epoch: 2, At: at}
	req := parley.SendRequest{Conv: "g", CMID: "k", Body: "hi there"}
	full := parley.Event{Conv: "g", Seq: 7, MID: "m-7", Kind: parley.EventMessage, Sender: "ana", Device: "phone 2", Body: "hi there", At: at}
	ids := parley.Notice{Conv: "g", Seq: 7}
	long := req
	long.Body = strings.Repeat("x", parley.MaxNoticeBody+1)
	files := req
	files.Attachments = []string{"f1"}
	for _, c := range []struct {
		name string
		got  parley.Notice
		want parley.Notice
	}{
		{"carried", parley.SentNotice(p, req, sent), parley.Notice{Conv: "g", Seq: 7, Event: &full, Epoch: 2}},
		{"no commit time", parley.SentNotice(p, req, parley.Sent{Conv: "g", Seq: 7, MID: "m-7", Epoch: 2}), ids},
		{"replay", parley.SentNotice(p, req, parley.Sent{Conv: "g", Seq: 7, MID: "m-7", Epoch: 2, At: at, Dup: true}), ids},
		{"body over the bound", parley.SentNotice(p, long, sent), ids},
		{"attachments", parley.SentNotice(p, files, sent), ids},
		{"recall", parley.RecalledNotice(parley.Recalled{Conv: "g", Seq: 7}), ids},
	} {
		if !c.got.Same(c.want) {
			t.Errorf("%s: %+v (event %v), want %+v (event %v)", c.name, c.got, c.got.Event, c.want, c.want.Event)
		}
	}
}
