package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/parleychat/parley"
)

// LinkTTL is how long a download link of GET /exports/{id} stays valid.
const LinkTTL = 300 * time.Second

type exportBody struct {
	Scope string `json:"scope"`
}

// exportReply is the body of POST /exports and GET /exports/{id}.
type exportReply struct {
	JobID    string         `json:"job_id"`
	State    string         `json:"state"`
	Replayed bool           `json:"replayed,omitempty"`
	Reused   bool           `json:"reused,omitempty"`
	Scope    string         `json:"scope"`
	Progress exportProgress `json:"progress"`
	URL      string         `json:"url,omitempty"`
	URLTTL   int            `json:"url_expires_in,omitempty"`
	SHA256   string         `json:"sha256,omitempty"`
	Bytes    int64          `json:"bytes,omitempty"`
	// The files archive, when the export's lines attach files.
	FilesURL    string `json:"files_url,omitempty"`
	FilesSHA256 string `json:"files_sha256,omitempty"`
	FilesBytes  int64  `json:"files_bytes,omitempty"`
	Error       string `json:"error,omitempty"`
	Expires     string `json:"expires_at,omitempty"`
	Created     string `json:"created_at"`
}

type exportProgress struct {
	Done  int `json:"done"`
	Total int `json:"total"`
}

// exportLinks renders jobs, with a fresh signed link for a done one.
type exportLinks struct {
	link func(job, user string, exp time.Time) string // nil: no links
	now  func() time.Time
}

func (x exportLinks) reply(j parley.ExportJob) exportReply {
	out := exportReply{
		JobID: j.ID, State: string(j.State), Replayed: j.Replayed, Reused: j.Reused, Scope: j.Scope,
		Progress: exportProgress{Done: j.Done, Total: j.Total},
		Error:    j.Error,
		Created:  j.CreatedAt.UTC().Format(time.RFC3339Nano),
	}
	if j.State == parley.ExportDone {
		out.SHA256, out.Bytes = j.SHA256, j.Bytes
		out.Expires = j.ExpiresAt.UTC().Format(time.RFC3339Nano)
		if j.FilesSHA256 != "" {
			out.FilesSHA256, out.FilesBytes = j.FilesSHA256, j.FilesBytes
		}
		if x.link != nil {
			out.URL = x.link(j.ID, j.User, x.now().Add(LinkTTL))
			out.URLTTL = int(LinkTTL / time.Second)
			if j.FilesSHA256 != "" {
				out.FilesURL = out.URL + "&part=files"
			}
		}
	}
	return out
}

// handleCreateExport is POST /exports: 202 for a new job, 200 with
// replayed true for a replay of its Idempotency-Key, and 200 with replayed
// and reused true for a live artifact of the same scope that is still
// current (parley.Exports.CreateExport). The key is read before the body,
// so a request without one changes nothing.
func handleCreateExport(c calls, x exportLinks) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, err := idempotencyKey(r)
		var b exportBody
		if err == nil {
			err = decode(w, r, &b)
		}
		if err != nil {
			c.writeError(w, err, "export.create")
			return
		}
		ctx, cancel := c.ctx(r)
		defer cancel()
		job, err := c.app.CreateExport(ctx, caller(r), parley.ExportRequest{
			Key: key, Scope: b.Scope, MaxActive: c.config(r).ExportMaxActive(), MaxKept: c.config(r).ExportMaxKept(),
		})
		if err != nil {
			if parley.ErrorCode(err) == parley.CodeRateLimited {
				w.Header().Set("Retry-After", "10")
			}
			c.writeError(w, err, "export.create")
			return
		}
		status := http.StatusAccepted
		if job.Replayed {
			status = http.StatusOK
		}
		encode(w, status, x.reply(job))
	})
}

// handleExport is GET /exports/{id}: the job's state and progress, and a
// fresh signed link when it is done. A job of another user is the same 404
// as a missing one.
func handleExport(c calls, x exportLinks) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := c.ctx(r)
		defer cancel()
		job, err := c.app.Export(ctx, caller(r), r.PathValue("id"))
		if err != nil {
			c.writeError(w, err, "export.show")
			return
		}
		encode(w, http.StatusOK, x.reply(job))
	})
}

// handleAdminRevokeExport is POST /api/admin/exports/{id}/revoke: its
// downloads answer 410 from then on and a worker running it stops.
func handleAdminRevokeExport(o ops) http.Handler {
	return adminCall(o, "export.revoke", func(ctx context.Context, r *http.Request, _ *noBody) (int, any, error) {
		job, err := o.app.RevokeExport(ctx, r.PathValue("id"))
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, map[string]any{"job_id": job.ID, "user": job.User, "state": job.State}, nil
	})
}
