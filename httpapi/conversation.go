package httpapi

import (
	"net/http"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// handleConvs lists one page of the caller's conversations, latest
// activity first: GET /api/convs?limit=&before= (both optional: the first
// page of DefaultConvs; before is the next of the previous page).
func handleConvs(c calls) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit, err := queryInt(r, "limit", parley.DefaultConvs)
		if err == nil && limit < 1 {
			err = parley.Errorf(parley.CodeInvalidArgument, "limit must be at least 1")
		}
		if err != nil {
			c.writeError(w, err, "convs")
			return
		}
		ctx, cancel := c.ctx(r)
		defer cancel()
		page, err := c.app.Convs(ctx, caller(r), parley.ConvsRequest{
			Limit: int(min(limit, parley.MaxConvsPage)), Before: r.URL.Query().Get("before"),
		})
		if err != nil {
			c.writeError(w, err, "convs")
			return
		}
		encode(w, http.StatusOK, frameBody(wire.Convs(page)))
	})
}

type createConvBody struct {
	ID      string          `json:"id"`
	Kind    parley.ConvKind `json:"kind"`
	Title   string          `json:"title"`
	Members []string        `json:"members"`
}

// convReply is a conversation header as the API shows it.
type convReply struct {
	ID        string          `json:"id"`
	Kind      parley.ConvKind `json:"kind"`
	Title     string          `json:"title"`
	Owner     string          `json:"owner,omitempty"`
	Head      int64           `json:"head"`
	MinSeq    int64           `json:"min_seq"`
	Epoch     int64           `json:"epoch"`
	Retention retentionReply  `json:"retention"`
	CreatedAt string          `json:"created_at"`
}

type retentionReply struct {
	MaxAge   string `json:"max_age,omitempty"` // Go duration text, e.g. "720h0m0s"
	KeepLast int64  `json:"keep_last,omitempty"`
}

func fromConversation(c parley.Conversation) convReply {
	r := convReply{ID: c.ID, Kind: c.Kind, Title: c.Title, Owner: c.Owner, Head: c.Head, MinSeq: c.MinSeq,
		Epoch: c.Epoch, Retention: retentionReply{KeepLast: c.Retention.KeepLast},
		CreatedAt: c.CreatedAt.UTC().Format(wire.TimeFormat)}
	if c.Retention.MaxAge > 0 {
		r.Retention.MaxAge = c.Retention.MaxAge.String()
	}
	return r
}

// handleCreateConv creates a conversation owned by the caller: 201 with its
// header. Every initial member's gateway learns of it at once.
func handleCreateConv(c calls) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b createConvBody
		if err := decode(w, r, &b); err != nil {
			c.writeError(w, err, "create conversation")
			return
		}
		nc := parley.NewConversation{ID: b.ID, Kind: b.Kind, Title: b.Title, Members: b.Members}
		ctx, cancel := c.ctx(r)
		defer cancel()
		conv, err := c.app.CreateConversation(ctx, caller(r), nc)
		if err != nil {
			c.writeError(w, err, "create conversation")
			return
		}
		encode(w, http.StatusCreated, fromConversation(conv))
	})
}

type memberBody struct {
	User string `json:"user"`
}

// memberReply is the result of adding or removing a member: the seq of the
// membership event, or changed false for a no-op.
type memberReply struct {
	Conv    string `json:"conv"`
	User    string `json:"user"`
	Seq     int64  `json:"seq,omitempty"`
	Changed bool   `json:"changed"`
}

// handleAddMember adds a user to a group (a member, or an admin, may).
func handleAddMember(c calls) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b memberBody
		if err := decode(w, r, &b); err != nil {
			c.writeError(w, err, "add member")
			return
		}
		ctx, cancel := c.ctx(r)
		defer cancel()
		mc, err := c.app.AddMember(ctx, caller(r), r.PathValue("id"), b.User)
		c.answerMember(w, mc, err, "add member")
	})
}

// handleRemoveMember removes a user from a group (the owner, an admin, or
// the user themself may).
func handleRemoveMember(c calls) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := c.ctx(r)
		defer cancel()
		mc, err := c.app.RemoveMember(ctx, caller(r), r.PathValue("id"), r.PathValue("user"))
		c.answerMember(w, mc, err, "remove member")
	})
}

func (c calls) answerMember(w http.ResponseWriter, mc parley.MemberChange, err error, op string) {
	if err != nil {
		c.writeError(w, err, op)
		return
	}
	encode(w, http.StatusOK, memberReply{Conv: mc.Conv, User: mc.User, Seq: mc.Seq, Changed: mc.Changed})
}

// handleOpenDirect opens the caller's direct conversation with a user:
// POST /api/dms {"user"}; 201 with its header when it was created, 200
// when it existed.
func handleOpenDirect(c calls) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b memberBody
		if err := decode(w, r, &b); err != nil {
			c.writeError(w, err, "open direct")
			return
		}
		ctx, cancel := c.ctx(r)
		defer cancel()
		conv, made, err := c.app.OpenDirect(ctx, caller(r), b.User)
		if err != nil {
			c.writeError(w, err, "open direct")
			return
		}
		encode(w, statusOf(made), fromConversation(conv))
	})
}
