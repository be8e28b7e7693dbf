package httpapi

import (
	"net/http"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// Edits, reactions and versions of a message: the HTTP twins of the edit
// and react frames, and the version list. Each validates its request
// completely (parley.ValidateEdit, parley.ValidateReact) before any
// storage work, as the frame decoder does.

type editBody struct {
	Body string `json:"body"`
}

// handleEdit edits the caller's message: PATCH
// /api/convs/{id}/messages/{seq} with Idempotency-Key and {"body"}; 201
// for a new edit, 200 with dup true for a replay.
func handleEdit(c calls) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, err := idempotencyKey(r)
		var seq int64
		if err == nil {
			seq, err = pathSeq(r, "seq")
		}
		var b editBody
		if err == nil {
			err = decode(w, r, &b)
		}
		req := parley.EditRequest{Conv: r.PathValue("id"), Target: seq, CMID: key, Body: b.Body}
		if err == nil {
			err = parley.ValidateEdit(req)
		}
		if err != nil {
			c.writeError(w, err, "edit")
			return
		}
		ctx, cancel := c.ctx(r)
		defer cancel()
		ed, err := c.app.Edit(ctx, caller(r), req)
		if err != nil {
			c.writeError(w, err, "edit")
			return
		}
		encode(w, statusOf(!ed.Dup), frameBody(wire.Edited(ed)))
	})
}

// handleReact sets (on, PUT) or removes (DELETE) the caller's reaction:
// /api/convs/{id}/messages/{seq}/reactions/{emoji} with Idempotency-Key and
// no body; 201 for a new reaction event, 200 with dup true for a replay or
// a state that already held.
func handleReact(c calls, on bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, err := idempotencyKey(r)
		var seq int64
		if err == nil {
			seq, err = pathSeq(r, "seq")
		}
		// The mux has path-unescaped {emoji}: %20 is a space, refused here.
		req := parley.ReactRequest{Conv: r.PathValue("id"), Target: seq, Emoji: r.PathValue("emoji"), On: on, CMID: key}
		if err == nil {
			err = parley.ValidateReact(req)
		}
		if err != nil {
			c.writeError(w, err, "react")
			return
		}
		ctx, cancel := c.ctx(r)
		defer cancel()
		re, err := c.app.React(ctx, caller(r), req)
		if err != nil {
			c.writeError(w, err, "react")
			return
		}
		encode(w, statusOf(!re.Dup), frameBody(wire.Reacted(re)))
	})
}

// statusOf is the status of a write that may find its result already
// made: 201 when it made it, 200 when it was there (a replay, a state that
// held, a conversation that existed).
func statusOf(made bool) int {
	if made {
		return http.StatusCreated
	}
	return http.StatusOK
}

// handleVersions lists the versions of a message the caller may see:
// GET /api/convs/{id}/messages/{seq}/versions.
func handleVersions(c calls) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seq, err := pathSeq(r, "seq")
		if err != nil {
			c.writeError(w, err, "versions")
			return
		}
		ctx, cancel := c.ctx(r)
		defer cancel()
		conv := r.PathValue("id")
		vs, recalled, err := c.app.Versions(ctx, caller(r), conv, seq)
		if err != nil {
			c.writeError(w, err, "versions")
			return
		}
		encode(w, http.StatusOK, wire.FromVersions(conv, seq, vs, recalled))
	})
}
