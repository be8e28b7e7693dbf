package httpapi

import (
	"encoding/json"
	"net/http"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/ratelimit"
)

// Web Push: GET /api/push/key, POST /api/push/subscriptions,
// DELETE /api/push/subscriptions/{id}, GET /api/push/settings and
// PUT /api/push/settings/{conv}.

// routePush mounts the push routes: reads in the read bucket, changes in
// the push bucket.
func (rt router) routePush(c calls) {
	rt.route("GET /api/push/key", user(ratelimit.BucketRead), handlePushKey(c))
	rt.route("POST /api/push/subscriptions", user(ratelimit.BucketPush, http.StatusCreated), handleSubscribe(c))
	rt.route("DELETE /api/push/subscriptions/{id}", user(ratelimit.BucketPush), handleUnsubscribe(c))
	rt.route("GET /api/push/settings", user(ratelimit.BucketRead), handlePushSettings(c))
	rt.route("PUT /api/push/settings/{conv}", user(ratelimit.BucketPush), handleSetPushLevel(c))
}

// handlePushKey answers the VAPID public key a browser subscribes with
// (applicationServerKey).
func handlePushKey(c calls) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := c.ctx(r)
		defer cancel()
		key, err := c.app.PushPublicKey(ctx)
		if err != nil {
			c.writeError(w, err, "push key")
			return
		}
		encode(w, http.StatusOK, map[string]string{"key": key})
	})
}

// subscriptionBody is a browser's PushSubscription.toJSON().
// expirationTime is accepted (null or a number) and not kept: a push
// service that expires a subscription answers 404 or 410, which removes
// it.
type subscriptionBody struct {
	Endpoint       *string         `json:"endpoint"`
	ExpirationTime json.RawMessage `json:"expirationTime"`
	Keys           *struct {
		P256DH string `json:"p256dh"`
		Auth   string `json:"auth"`
	} `json:"keys"`
}

// decodeSubscription reads a subscription body; errors are
// INVALID_ARGUMENT.
func decodeSubscription(w http.ResponseWriter, r *http.Request) (parley.NewPushSubscription, error) {
	var b subscriptionBody
	if err := decode(w, r, &b); err != nil {
		return parley.NewPushSubscription{}, err
	}
	if b.Endpoint == nil || b.Keys == nil {
		return parley.NewPushSubscription{}, parley.Errorf(parley.CodeInvalidArgument, "endpoint and keys {p256dh, auth} are required")
	}
	if e := string(b.ExpirationTime); e != "" && e != "null" {
		var n float64
		if json.Unmarshal(b.ExpirationTime, &n) != nil {
			return parley.NewPushSubscription{}, parley.Errorf(parley.CodeInvalidArgument, "expirationTime must be null or a number")
		}
	}
	return parley.CheckPushSubscription(parley.NewPushSubscription{Endpoint: *b.Endpoint, P256DH: b.Keys.P256DH, Auth: b.Keys.Auth})
}

// handleSubscribe binds the subscription to the caller's device: 201 with
// its id, 200 with the same id when the endpoint was already this
// device's.
func handleSubscribe(c calls) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ns, err := decodeSubscription(w, r)
		if err != nil {
			c.writeError(w, err, "subscribe")
			return
		}
		ctx, cancel := c.ctx(r)
		defer cancel()
		sub, created, err := c.app.Subscribe(ctx, caller(r), ns)
		if err != nil {
			c.writeError(w, err, "subscribe")
			return
		}
		status := http.StatusOK
		if created {
			status = http.StatusCreated
		}
		encode(w, status, map[string]string{"id": sub.ID})
	})
}

// handleUnsubscribe deletes one of the caller's subscriptions: 204, or 404
// for an id that is not the caller's.
func handleUnsubscribe(c calls) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := c.ctx(r)
		defer cancel()
		if err := c.app.Unsubscribe(ctx, caller(r), r.PathValue("id")); err != nil {
			c.writeError(w, err, "unsubscribe")
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

type pushSetting struct {
	Conv  string `json:"conv"`
	Level string `json:"level"`
}

// handlePushSettings lists the caller's levels that are not the default.
func handlePushSettings(c calls) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := c.ctx(r)
		defer cancel()
		list, err := c.app.PushSettings(ctx, caller(r))
		if err != nil {
			c.writeError(w, err, "push settings")
			return
		}
		out := make([]pushSetting, len(list))
		for i, s := range list {
			out[i] = pushSetting{Conv: s.Conv, Level: string(s.Level)}
		}
		encode(w, http.StatusOK, map[string][]pushSetting{"settings": out})
	})
}

// handleSetPushLevel sets the caller's level in a conversation they hold
// an open period in.
func handleSetPushLevel(c calls) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			Level *string `json:"level"`
		}
		err := decode(w, r, &b)
		if err == nil && b.Level == nil {
			err = parley.Errorf(parley.CodeInvalidArgument, "level is required")
		}
		if err == nil {
			err = parley.CheckPushLevel(parley.PushLevel(*b.Level))
		}
		if err != nil {
			c.writeError(w, err, "set push level")
			return
		}
		ctx, cancel := c.ctx(r)
		defer cancel()
		s, err := c.app.SetPushLevel(ctx, caller(r), r.PathValue("conv"), parley.PushLevel(*b.Level))
		if err != nil {
			c.writeError(w, err, "set push level")
			return
		}
		encode(w, http.StatusOK, pushSetting{Conv: s.Conv, Level: string(s.Level)})
	})
}
