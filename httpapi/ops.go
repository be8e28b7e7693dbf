package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/middleware"
	"github.com/parleychat/parley/wire"
)

// The operations API: every route needs the "admin" permission
// rule (403 "Access denied" otherwise) and every call, successful or not,
// is written to the audit log with the operator taken from the login.

// operatorField is the reserved parameter that names the operator. A
// client may send it; the server always overwrites it with the
// authenticated caller before anything reads it (copy the
// client's parameters first, then overwrite, never the other way round).
const operatorField = "__authenticatedOperator"

// ops is what the operations routes need: the use cases, the audit log
// and the listings.
type ops struct {
	calls
	store Store
	log   *slog.Logger
}

// noBody is the body type of operations calls that take none.
type noBody struct{}

// adminCall runs one operations call: it decodes a fresh body of type B
// (none for noBody) with the operator set, writes the audit entry as
// pending, runs do, finishes the entry with the outcome, and answers. The
// entry is written before the operation acts: when it cannot be written,
// nothing is done (503), so no operation goes unrecorded, and a crash
// between the two leaves a pending entry an operator can see. A request
// refused before do (a bad body) is recorded with its outcome at once.
func adminCall[B any](o ops, action string, do func(ctx context.Context, r *http.Request, b *B) (status int, reply any, err error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		operator := caller(r).User
		params := map[string]any{}
		var b B
		var err error
		if _, none := any(&b).(*noBody); !none {
			params, err = decodeAdmin(w, r, &b, operator)
		}
		for _, name := range []string{"id", "user"} {
			if v := r.PathValue(name); v != "" {
				params[name] = v
			}
		}
		for k, v := range r.URL.Query() {
			params[k] = strings.Join(v, ",")
		}
		params[operatorField] = operator
		target := r.PathValue("id")
		if t, ok := any(&b).(interface{ auditTarget() string }); ok && err == nil {
			target = t.auditTarget()
		}
		e := parley.AuditEntry{Operator: operator, Action: action, Target: capBytes(target, parley.MaxAuditAction), Params: RedactParams(params)}
		if err != nil {
			o.audit(r, e, err)
			o.writeError(w, err, action)
			return
		}
		e.Outcome = parley.AuditPending
		actx, cancel := o.ctx(r)
		pending, err := o.store.AppendAudit(actx, e)
		cancel()
		if err != nil {
			o.writeError(w, fmt.Errorf("audit before %s: %w", action, err), action)
			return
		}
		ctx, cancel := o.ctx(r)
		status, reply, err := do(ctx, r, &b)
		cancel()
		o.finishAudit(r, pending, err)
		if err != nil {
			o.writeError(w, err, action)
			return
		}
		encode(w, status, reply)
	})
}

// decodeAdmin reads an operations body into v, after writing the operator
// over any client-supplied operatorField, and returns the parameters for
// the audit log.
func decodeAdmin(w http.ResponseWriter, r *http.Request, v any, operator string) (map[string]any, error) {
	var raw map[string]json.RawMessage
	if err := decode(w, r, &raw); err != nil {
		return map[string]any{}, err
	}
	if raw == nil {
		return map[string]any{}, parley.Errorf(parley.CodeInvalidArgument, "request body must be one JSON object")
	}
	op, _ := json.Marshal(operator)
	raw[operatorField] = op
	params := make(map[string]any, len(raw))
	for k, m := range raw {
		var x any
		json.Unmarshal(m, &x)
		params[k] = x
	}
	b, _ := json.Marshal(raw)
	return params, decodeFrom(bytes.NewReader(b), v)
}

// outcome is how an operation ended, for the audit log: ok or the code
// the client saw.
func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	return string(parley.ErrorCode(err))
}

// auditCtx bounds an audit write: after the operation the request may be
// gone, but its record must still be written.
func (o ops) auditCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), o.config(r).StoreTimeout())
}

// audit writes a finished entry at once (a request refused before it
// could act).
func (o ops) audit(r *http.Request, e parley.AuditEntry, err error) {
	e.Outcome = outcome(err)
	ctx, cancel := o.auditCtx(r)
	defer cancel()
	if _, aerr := o.store.AppendAudit(ctx, e); aerr != nil {
		o.log.Error("audit entry not written", "action", e.Action, "operator", e.Operator, "target", e.Target, "err", aerr)
	}
}

// finishAudit sets the outcome of the pending entry; when that fails the
// entry stays pending (the operation's answer still goes out).
func (o ops) finishAudit(r *http.Request, e parley.AuditEntry, err error) {
	ctx, cancel := o.auditCtx(r)
	defer cancel()
	if ferr := o.store.FinishAudit(ctx, e.ID, outcome(err)); ferr != nil {
		o.log.Error("audit entry left pending", "id", e.ID, "action", e.Action, "outcome", outcome(err), "err", ferr)
	}
}

// Redaction and capping of audit parameters.
const (
	maxParamChars = 256
	redacted      = "[REDACTED]"
)

// secretWords mark parameter names whose values never reach the audit log.
var secretWords = []string{"password", "passwd", "token", "secret", "key", "authorization", "cookie", "signature"}

// RedactParams returns params as JSON for the audit log: values of keys
// that name a secret (password, token, secret, key, …, at any depth) are
// replaced by "[REDACTED]" and strings are capped at 256 characters. The
// text is always one JSON object of at most parley.MaxAuditParams bytes:
// when too long, strings are capped at 16 characters instead, and when still
// too long only the parameter names are kept, under "truncated".
func RedactParams(params map[string]any) string {
	for _, limit := range []int{maxParamChars, 16} {
		b, err := json.Marshal(redactValue(params, limit))
		if err != nil {
			return `{"unencodable":true}`
		}
		if len(b) <= parley.MaxAuditParams {
			return string(b)
		}
	}
	names := make([]string, 0, len(params))
	size := 0
	for k := range params {
		k = capString(k, 64)
		if size += len(k) + 8; size > parley.MaxAuditParams/2 {
			break
		}
		names = append(names, k)
	}
	slices.Sort(names)
	b, _ := json.Marshal(map[string]any{"truncated": true, "names": names})
	return string(b)
}

func redactValue(v any, limit int) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, val := range x {
			if isSecretName(k) {
				out[capString(k, limit)] = redacted
				continue
			}
			out[capString(k, limit)] = redactValue(val, limit)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, val := range x {
			out[i] = redactValue(val, limit)
		}
		return out
	case string:
		return capString(x, limit)
	default:
		return x
	}
}

func isSecretName(k string) bool {
	k = strings.ToLower(k)
	for _, w := range secretWords {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// capBytes cuts s to at most n bytes at a character boundary.
func capBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// capString cuts s to at most n characters (runes), marking the cut.
func capString(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

type createUserBody struct {
	ID       string      `json:"id"`
	Email    string      `json:"email"`
	Password string      `json:"password"`
	Role     parley.Role `json:"role"`
	Operator string      `json:"__authenticatedOperator"`
}

func (b *createUserBody) auditTarget() string { return b.ID }

type userReply struct {
	ID        string      `json:"id"`
	Email     string      `json:"email,omitempty"`
	Role      parley.Role `json:"role"`
	Disabled  bool        `json:"disabled"`
	CreatedAt string      `json:"created_at,omitempty"`
}

func fromUser(u parley.User) userReply {
	r := userReply{ID: u.ID, Email: u.Email, Role: u.Role, Disabled: u.Disabled}
	if !u.CreatedAt.IsZero() {
		r.CreatedAt = u.CreatedAt.UTC().Format(wire.TimeFormat)
	}
	return r
}

// handleAdminCreateUser creates an account (no password: a bot that posts
// through webhooks and cannot log in).
func handleAdminCreateUser(o ops, hashes hashGate) http.Handler {
	return adminCall(o, "user.create", func(ctx context.Context, r *http.Request, b *createUserBody) (int, any, error) {
		nu := parley.NewUser{ID: b.ID, Email: b.Email, Password: b.Password, Role: b.Role}
		if nu.Password != "" {
			// Bad input is refused before it waits for a hash slot.
			if _, err := parley.ValidateNewUser(nu); err != nil {
				return 0, nil, err
			}
			release, err := hashes.acquire(ctx, r)
			if err != nil {
				return 0, nil, err
			}
			defer release()
		}
		u, err := o.app.CreateUser(ctx, nu)
		return http.StatusCreated, fromUser(u), err
	})
}

// handleAdminSetDisabled disables or enables an account. Disabling ends
// the user's tokens at once: the identity cache forgets them and every
// gateway re-checks the user's sockets.
func handleAdminSetDisabled(o ops, ident *middleware.Identifier, disabled bool) http.Handler {
	action := "user.enable"
	if disabled {
		action = "user.disable"
	}
	return adminCall(o, action, func(ctx context.Context, r *http.Request, _ *noBody) (int, any, error) {
		id := r.PathValue("id")
		u, err := o.app.SetUserDisabled(ctx, id, disabled)
		if err != nil {
			return 0, nil, err
		}
		ident.ForgetUser(id)
		return http.StatusOK, fromUser(u), nil
	})
}

// handleAdminConv shows a conversation's header.
func handleAdminConv(o ops) http.Handler {
	return adminCall(o, "conv.show", func(ctx context.Context, r *http.Request, _ *noBody) (int, any, error) {
		c, err := o.app.Conversation(ctx, r.PathValue("id"))
		return http.StatusOK, fromConversation(c), err
	})
}

type rollbackBody struct {
	ToSeq    *int64 `json:"to_seq"`
	Operator string `json:"__authenticatedOperator"`
}

type rollbackReply struct {
	Conv    string `json:"conv"`
	Removed int64  `json:"removed"`
	Head    int64  `json:"head"`
	Epoch   int64  `json:"epoch"`
}

// handleAdminRollback returns a conversation to a restore point; its
// sockets are told at once (the new epoch makes every gateway resync them).
func handleAdminRollback(o ops) http.Handler {
	return adminCall(o, "conv.rollback", func(ctx context.Context, r *http.Request, b *rollbackBody) (int, any, error) {
		if b.ToSeq == nil {
			return 0, nil, parley.Errorf(parley.CodeInvalidArgument, "to_seq is required")
		}
		res, err := o.app.Rollback(ctx, r.PathValue("id"), *b.ToSeq)
		return http.StatusOK, rollbackReply{Conv: res.Conv, Removed: res.Removed, Head: res.Head, Epoch: res.Epoch}, err
	})
}

type retentionBody struct {
	MaxAge   string `json:"max_age"` // Go duration text ("720h"); "" or "0s": no age limit
	KeepLast int64  `json:"keep_last"`
	Operator string `json:"__authenticatedOperator"`
}

// handleAdminRetention sets a conversation's retention policy.
func handleAdminRetention(o ops) http.Handler {
	return adminCall(o, "conv.retention", func(ctx context.Context, r *http.Request, b *retentionBody) (int, any, error) {
		var ret parley.Retention
		if b.MaxAge != "" {
			age, err := time.ParseDuration(b.MaxAge)
			if err != nil {
				return 0, nil, parley.Errorf(parley.CodeInvalidArgument, "max_age must be a duration such as 720h")
			}
			ret.MaxAge = age
		}
		ret.KeepLast = b.KeepLast
		c, err := o.app.SetRetention(ctx, r.PathValue("id"), ret)
		return http.StatusOK, fromConversation(c), err
	})
}

type purgeReply struct {
	Conv       string `json:"conv"`
	Deleted    int64  `json:"deleted"`
	Tombstones int64  `json:"tombstones"`
	MinSeq     int64  `json:"min_seq"`
}

// handleAdminPurge applies a conversation's retention policy now.
func handleAdminPurge(o ops) http.Handler {
	return adminCall(o, "conv.purge", func(ctx context.Context, r *http.Request, _ *noBody) (int, any, error) {
		res, err := o.app.Purge(ctx, r.PathValue("id"))
		return http.StatusOK, purgeReply{Conv: res.Conv, Deleted: res.Deleted, Tombstones: res.Tombstones, MinSeq: res.MinSeq}, err
	})
}

type createHookBody struct {
	Conv     string `json:"conv"`
	Bot      string `json:"bot"`
	Operator string `json:"__authenticatedOperator"`
}

func (b *createHookBody) auditTarget() string { return b.Conv }

type hookReply struct {
	ID        string `json:"id"`
	Conv      string `json:"conv"`
	Bot       string `json:"bot"`
	Secret    string `json:"secret,omitempty"` // shown once, at creation
	URL       string `json:"url"`
	CreatedBy string `json:"created_by"`
	CreatedAt string `json:"created_at"`
}

func fromHook(h parley.Hook) hookReply {
	return hookReply{ID: h.ID, Conv: h.Conv, Bot: h.Bot, Secret: h.Secret, URL: "/hooks/" + h.ID,
		CreatedBy: h.CreatedBy, CreatedAt: h.CreatedAt.UTC().Format(wire.TimeFormat)}
}

// handleAdminCreateHook creates an incoming webhook and shows its secret
// once.
func handleAdminCreateHook(o ops) http.Handler {
	return adminCall(o, "hook.create", func(ctx context.Context, r *http.Request, b *createHookBody) (int, any, error) {
		h, err := o.app.CreateHook(ctx, parley.NewHook{Conv: b.Conv, Bot: b.Bot, CreatedBy: caller(r).User})
		return http.StatusCreated, fromHook(h), err
	})
}

// handleAdminHooks lists the webhooks without their secrets, one page at
// a time like the other listings (admin.go). "hooks" repeats the page's
// items for the clients written when this route answered every hook at
// once without paging.
func handleAdminHooks(o ops) http.Handler {
	return adminCall(o, "hook.list", func(ctx context.Context, r *http.Request, _ *noBody) (int, any, error) {
		q, err := adminQuery(r)
		if err != nil {
			return 0, nil, err
		}
		page, err := o.store.AdminHooks(ctx, q)
		if err != nil {
			return 0, nil, err
		}
		out := make([]hookReply, len(page.Items))
		for i, h := range page.Items {
			h.Secret = "" // never listed
			out[i] = fromHook(h)
		}
		return http.StatusOK, hooksReply{adminPage: adminPage[hookReply]{Items: out, Next: page.Next, HasMore: page.HasMore}, Hooks: out}, nil
	})
}

type hooksReply struct {
	adminPage[hookReply]
	Hooks []hookReply `json:"hooks"` // = items (the reply before paging)
}

// handleAdminDeleteHook deletes a webhook: its secret stops working.
func handleAdminDeleteHook(o ops) http.Handler {
	return adminCall(o, "hook.delete", func(ctx context.Context, r *http.Request, _ *noBody) (int, any, error) {
		err := o.app.DeleteHook(ctx, r.PathValue("id"))
		return http.StatusOK, map[string]any{"id": r.PathValue("id"), "deleted": err == nil}, err
	})
}

// handleAdminConfig shows the effective configuration (secrets masked).
func handleAdminConfig(o ops) http.Handler {
	return adminCall(o, "config.show", func(ctx context.Context, r *http.Request, _ *noBody) (int, any, error) {
		return http.StatusOK, o.config(r).Effective(), nil
	})
}

type auditReply struct {
	ID       int64  `json:"id"`
	At       string `json:"at"`
	Operator string `json:"operator"`
	Action   string `json:"action"`
	Target   string `json:"target,omitempty"`
	Params   string `json:"params"`
	Outcome  string `json:"outcome"`
}

// handleAdminAudit pages the audit log, newest first:
// GET /api/admin/audit?before=&limit=. Reading it is not itself audited.
func handleAdminAudit(o ops) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		before, err := queryInt(r, "before", 0)
		var limit int
		if err == nil {
			limit, err = queryLimit(r, parley.DefaultAuditPage, parley.MaxAuditPage)
		}
		if err != nil {
			o.writeError(w, err, "audit")
			return
		}
		ctx, cancel := o.ctx(r)
		defer cancel()
		es, err := o.store.Audit(ctx, parley.AuditQuery{Before: before, Limit: limit})
		if err != nil {
			o.writeError(w, err, "audit")
			return
		}
		out := make([]auditReply, len(es))
		for i, e := range es {
			out[i] = auditReply{ID: e.ID, At: e.At.UTC().Format(wire.TimeFormat), Operator: e.Operator,
				Action: e.Action, Target: e.Target, Params: e.Params, Outcome: e.Outcome}
		}
		encode(w, http.StatusOK, map[string]any{"entries": out})
	})
}
