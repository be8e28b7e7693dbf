package httpapi

import (
	"net/http"
	"time"

	"github.com/parleychat/parley/config"
)

// DemoAccounts are the accounts a server started with --demo created, for
// a laptop only: the sign-in page names them.
type DemoAccounts struct {
	Users    []string `json:"users"`
	Password string   `json:"password"`
}

// serverReply is the body of GET /api/server: what a client shows before
// anyone signs in, and the policies it needs to offer only what the server
// would allow. Demo is set only on a server started with --demo, whose
// accounts and password are published anyway. RecallWindowMS is how long
// after a message its sender may recall it; EditWindowMS how long they may
// edit it, absent when edits have no window.
type serverReply struct {
	Demo           *DemoAccounts `json:"demo,omitempty"`
	RecallWindowMS int64         `json:"recall_window_ms"`
	EditWindowMS   int64         `json:"edit_window_ms,omitempty"`
}

// handleServer answers GET /api/server. The edit window is the
// configuration's in force (hot-reloaded), read per request.
func handleServer(demo *DemoAccounts, recall time.Duration, current func() *config.Config) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reply := serverReply{Demo: demo, RecallWindowMS: recall.Milliseconds()}
		if edit := current().EditWindow(); edit > 0 {
			reply.EditWindowMS = edit.Milliseconds()
		}
		w.Header().Set("Cache-Control", "no-store")
		encode(w, http.StatusOK, reply)
	})
}
