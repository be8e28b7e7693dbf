package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// The operators' listings: GET /api/admin/{users,convs,exports,hooks}
// ?limit=&after=, each a page {items, next?, has_more} in id order with an
// opaque cursor (parley.Admin). Like the other operations reads (conv.show,
// hook.list, config.show) each call is audited.

// adminPage is the reply of a listing.
type adminPage[T any] struct {
	Items   []T    `json:"items"`
	Next    string `json:"next,omitempty"`
	HasMore bool   `json:"has_more"`
}

// adminQuery reads ?limit= (1..MaxAdminPage, default DefaultAdminPage)
// and ?after= (a next of an earlier page; the store checks it).
func adminQuery(r *http.Request) (parley.AdminQuery, error) {
	limit, err := queryLimit(r, parley.DefaultAdminPage, parley.MaxAdminPage)
	if err != nil {
		return parley.AdminQuery{}, err
	}
	q := r.URL.Query()
	if vs, ok := q["after"]; ok && (len(vs) != 1 || vs[0] == "") {
		return parley.AdminQuery{}, parley.Errorf(parley.CodeInvalidArgument, "after must be the next of an earlier page")
	}
	return parley.AdminQuery{Limit: limit, After: q.Get("after")}, nil
}

// adminList makes a listing handler: list reads one page, item renders one
// entry.
func adminList[T, R any](o ops, action string, list func(ctx context.Context, q parley.AdminQuery) (parley.AdminPage[T], error), item func(T) R) http.Handler {
	return adminCall(o, action, func(ctx context.Context, r *http.Request, _ *noBody) (int, any, error) {
		q, err := adminQuery(r)
		if err != nil {
			return 0, nil, err
		}
		page, err := list(ctx, q)
		if err != nil {
			return 0, nil, err
		}
		out := adminPage[R]{Items: make([]R, len(page.Items)), Next: page.Next, HasMore: page.HasMore}
		for i, it := range page.Items {
			out.Items[i] = item(it)
		}
		return http.StatusOK, out, nil
	})
}

// timeText renders a time for a reply, "" for zero.
func timeText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(wire.TimeFormat)
}

type adminUserReply struct {
	userReply
	LastSeen string     `json:"last_seen,omitempty"`
	Files    filesReply `json:"files"`
}

// handleAdminUsers lists accounts with role, disabled, last seen, and
// their files against the quota in force.
func handleAdminUsers(o ops) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		quota := o.config(r).FileQuota()
		adminList(o, "user.list", o.store.AdminUsers, func(u parley.AdminUser) adminUserReply {
			return adminUserReply{userReply: fromUser(u.User), LastSeen: timeText(u.LastSeen),
				Files: filesReply{Files: u.Files.Files, Bytes: u.Files.Bytes, Quota: quota}}
		}).ServeHTTP(w, r)
	})
}

type adminConvReply struct {
	convReply
	Members int64 `json:"members"`
}

// handleAdminConvs lists conversations with kind, member count, head and
// retention.
func handleAdminConvs(o ops) http.Handler {
	return adminList(o, "conv.list", o.store.AdminConvs, func(c parley.AdminConv) adminConvReply {
		return adminConvReply{convReply: fromConversation(c.Conversation), Members: c.Members}
	})
}

type adminExportReply struct {
	JobID    string         `json:"job_id"`
	User     string         `json:"user"`
	Scope    string         `json:"scope"`
	State    string         `json:"state"`
	Progress exportProgress `json:"progress"`
	Bytes    int64          `json:"bytes"`
	Error    string         `json:"error,omitempty"`
	Created  string         `json:"created_at"`
	Finished string         `json:"finished_at,omitempty"`
	Expires  string         `json:"expires_at,omitempty"`
}

// handleAdminExports lists every user's export jobs with state, owner and
// size.
func handleAdminExports(o ops) http.Handler {
	return adminList(o, "export.list", o.store.AdminExports, func(j parley.AdminExport) adminExportReply {
		return adminExportReply{JobID: j.ID, User: j.User, Scope: j.Scope, State: string(j.State),
			Progress: exportProgress{Done: j.Done, Total: j.Total}, Bytes: j.Bytes, Error: j.Error,
			Created: timeText(j.CreatedAt), Finished: timeText(j.FinishedAt), Expires: timeText(j.ExpiresAt)}
	})
}
