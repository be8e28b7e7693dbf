package httpapi

import "net/http"

// DemoAccounts are the accounts a server started with --demo created, for
// a laptop only: the sign-in page names them.
type DemoAccounts struct {
	Users    []string `json:"users"`
	Password string   `json:"password"`
}

// serverReply is the body of GET /api/server: what a client shows before
// anyone signs in. Demo is set only on a server started with --demo, whose
// accounts and password are published anyway.
type serverReply struct {
	Demo *DemoAccounts `json:"demo,omitempty"`
}

// handleServer answers GET /api/server.
func handleServer(demo *DemoAccounts) http.Handler {
	reply := serverReply{Demo: demo}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		encode(w, http.StatusOK, reply)
	})
}
