package httpapi_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/app"
	"github.com/parleychat/parley/httpapi"
)

type hookInfo struct {
	ID, Conv, Bot, Secret, URL string
}

// postHook sends a signed webhook request; sig "" signs it correctly.
func (s *server) postHook(h hookInfo, key, body string, at time.Time, sig string) reply {
	s.t.Helper()
	ts := strconv.FormatInt(at.Unix(), 10)
	if sig == "" {
		sig = app.SignHook(h.Secret, ts, key, []byte(body))
	}
	return s.do("POST", h.URL, "", body, "Idempotency-Key", key, httpapi.HookTimestampHeader, ts, httpapi.HookSignatureHeader, sig)
}

// TestWebhook: an admin creates a hook and gets its secret once; a signed
// request posts as the bot through Send (201, replay 200 dup); a captured
// request cannot be replayed under another key, late, unsigned, or after
// the hook is deleted; the webhooks access mode gates it.
func TestWebhook(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{})
		ana := s.user("ana", parley.RoleAdmin)
		ben := s.user("ben", parley.RoleUser)
		s.do("POST", "/api/admin/users", ana, map[string]any{"id": "ci-bot"}).want(201)
		s.do("POST", "/api/convs", ana, map[string]any{"id": "g", "members": []string{"ben"}}).want(201)

		s.do("POST", "/api/admin/hooks", ana, map[string]string{"conv": "g", "bot": "ci-bot"}).want(404, parley.CodeNotMember)
		s.do("POST", "/api/convs/g/members", ana, map[string]string{"user": "ci-bot"}).want(200)
		var h hookInfo
		s.do("POST", "/api/admin/hooks", ana, map[string]string{"conv": "g", "bot": "ci-bot"}).want(201).decode(&h)
		if h.ID == "" || len(h.Secret) < 40 || h.URL != "/hooks/"+h.ID || h.Conv != "g" || h.Bot != "ci-bot" {
			t.Fatalf("hook %+v", h)
		}
		s.do("POST", "/api/admin/hooks", ben, map[string]string{"conv": "g", "bot": "ci-bot"}).want(403, parley.CodePermissionDenied)
		list := s.do("GET", "/api/admin/hooks", ana, nil).want(200)
		if strings.Contains(string(list.body), h.Secret) || !strings.Contains(string(list.body), h.ID) {
			t.Errorf("hook list %s: want the hook without its secret", list.body)
		}

		now := time.Now()
		body := `{"body":"build 42 passed"}`
		first := s.postHook(h, "build-42", body, now, "").want(201).frame()
		again := s.postHook(h, "build-42", body, now, "").want(200).frame()
		if *first.Dup || !*again.Dup || *again.Seq != *first.Seq {
			t.Fatalf("hook send %+v, replay %+v", first, again)
		}
		ev := s.do("GET", "/api/convs/g/events/"+strconv.FormatInt(*first.Seq, 10), ben, nil).want(200).frame().Ev
		if ev.Sender != "ci-bot" || ev.Body != "build 42 passed" {
			t.Errorf("posted event %+v", ev)
		}

		ts := strconv.FormatInt(now.Unix(), 10)
		captured := app.SignHook(h.Secret, ts, "build-42", []byte(body))
		before := s.head("g")
		refused := []struct {
			name string
			r    func() reply
		}{
			{"another key, captured signature", func() reply { return s.postHook(h, "build-43", body, now, captured) }},
			{"another body, captured signature", func() reply { return s.postHook(h, "build-42", `{"body":"x"}`, now, captured) }},
			{"six minutes old", func() reply { return s.postHook(h, "late", body, now.Add(-6*time.Minute), "") }},
			{"six minutes ahead", func() reply { return s.postHook(h, "early", body, now.Add(6*time.Minute), "") }},
			{"wrong secret", func() reply {
				return s.postHook(hookInfo{URL: h.URL, Secret: "guess"}, "k", body, now, "")
			}},
			{"no signature", func() reply {
				return s.do("POST", h.URL, "", body, "Idempotency-Key", "k", httpapi.HookTimestampHeader, ts)
			}},
			{"unknown hook", func() reply {
				return s.postHook(hookInfo{URL: "/hooks/0123-abc", Secret: h.Secret}, "k", body, now, "")
			}},
		}
		for _, c := range refused {
			r := c.r().want(401, parley.CodeUnauthenticated)
			if p := r.problem(); p.Detail != app.ErrHookSignature.Msg {
				t.Errorf("%s: detail %q tells more than the one message", c.name, p.Detail)
			}
		}
		s.do("POST", h.URL, "", body, httpapi.HookTimestampHeader, ts, httpapi.HookSignatureHeader, captured).want(400, parley.CodeInvalidArgument)
		s.postHook(h, "bad-json", `{"text":"x"}`, now, "").want(400, parley.CodeInvalidArgument)
		if s.head("g") != before {
			t.Errorf("refused hooks moved the head %d → %d", before, s.head("g"))
		}

		// The access mode closes the feature at the next request.
		s.writeConfig("access:\n  webhooks: {mode: CLOSED}\n")
		eventually(t, "webhooks closed", func() bool {
			return s.postHook(h, "closed", body, time.Now(), "").status == 403
		})
		p := s.postHook(h, "closed-2", body, time.Now(), "").want(403, parley.CodePermissionDenied).problem()
		if p.Detail != "Access denied" {
			t.Errorf("closed feature detail %q", p.Detail)
		}
		s.writeConfig("access:\n  webhooks: {mode: OPEN}\n")
		eventually(t, "webhooks open", func() bool {
			return s.postHook(h, "open-again", body, time.Now(), "").status == 201
		})

		// A disabled bot is refused; a deleted hook stops at once.
		s.do("POST", "/api/admin/users/ci-bot/disable", ana, nil).want(200)
		s.postHook(h, "disabled", body, time.Now(), "").want(403, parley.CodePermissionDenied)
		s.do("POST", "/api/admin/users/ci-bot/enable", ana, nil).want(200)
		s.do("DELETE", "/api/admin/hooks/"+h.ID, ana, nil).want(200)
		s.postHook(h, "deleted", body, time.Now(), "").want(401, parley.CodeUnauthenticated)
		s.do("DELETE", "/api/admin/hooks/"+h.ID, ana, nil).want(404, parley.CodeNotFound)
	})
}

// TestWebhookReply: a webhook may post a reply (reply_to), checked as any
// send's: a seq that is no message of the hook's conversation is
// NOT_FOUND, and the bot's text may mention members.
func TestWebhookReply(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{})
		ana := s.user("ana", parley.RoleAdmin)
		s.do("POST", "/api/admin/users", ana, map[string]any{"id": "ci-bot"}).want(201)
		s.do("POST", "/api/convs", ana, map[string]any{"id": "g", "members": []string{"ci-bot"}}).want(201)
		root := *s.do("POST", "/api/convs/g/messages", ana, map[string]string{"body": "deploy?"}, "Idempotency-Key", "m1").want(201).frame().Seq
		var h hookInfo
		s.do("POST", "/api/admin/hooks", ana, map[string]string{"conv": "g", "bot": "ci-bot"}).want(201).decode(&h)

		body := `{"body":"done @ana","reply_to":` + strconv.FormatInt(root, 10) + `}`
		seq := *s.postHook(h, "b1", body, time.Now(), "").want(201).frame().Seq
		ev := s.do("GET", "/api/convs/g/events/"+strconv.FormatInt(seq, 10), ana, nil).want(200).frame().Ev
		if ev.ReplyTo != root || len(ev.Mentions) != 1 || ev.Mentions[0] != "ana" {
			t.Errorf("hook reply: %+v", ev)
		}
		s.postHook(h, "b2", `{"body":"x","reply_to":99}`, time.Now(), "").want(404, parley.CodeNotFound)
		s.postHook(h, "b3", `{"body":"x","reply_to":-2}`, time.Now(), "").want(400, parley.CodeInvalidArgument)
	})
}
