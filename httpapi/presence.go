package httpapi

import (
	"net/http"
	"strings"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// handlePresence answers GET /api/presence?users=ben,cy: the presence of
// the listed users the caller shares an open conversation with (and the
// caller's own); the others are left out, as unknown users are.
func handlePresence(c calls) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		vs := r.URL.Query()["users"]
		var err error
		var users []string
		if len(vs) != 1 {
			err = parley.Errorf(parley.CodeInvalidArgument, "users must be given once")
		} else if vs[0] != "" {
			users = strings.Split(vs[0], ",")
		}
		if err == nil {
			err = parley.CheckPresenceUsers(users)
		}
		if err != nil {
			c.writeError(w, err, "presence")
			return
		}
		ctx, cancel := c.ctx(r)
		defer cancel()
		ps, err := c.app.Presence(ctx, caller(r), users)
		if err != nil {
			c.writeError(w, err, "presence")
			return
		}
		encode(w, http.StatusOK, wire.FromPresence(ps))
	})
}
