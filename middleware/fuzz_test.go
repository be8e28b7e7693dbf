package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/middleware"
	"github.com/parleychat/parley/wire"
)

func FuzzClientAddr(f *testing.F) {
	for _, seed := range [][3]string{
		{"192.0.2.10:443", "1.2.3.4, 10.0.0.9", "192.0.2.10/32"},
		{"192.0.2.10:443", "1.2.3.4, 198.51.100.7, 10.1.1.1", "192.0.2.10/32,10.0.0.0/8"},
		{"192.0.2.10:443", "10.9.9.9, 10.1.1.1", "192.0.2.10/32,10.0.0.0/8"},
		{"192.0.2.10:443", "1.2.3.4, unknown, 10.1.1.1", "192.0.2.10/32,10.0.0.0/8"},
		{"192.0.2.10:443", "1.2.3.4\n198.51.100.7\n10.1.1.1", "192.0.2.10/32,10.0.0.0/8"},
		{"[2001:db8::1]:443", "[2001:db8:1::5]:8080, 2001:db8::2", "2001:db8::/64"},
		{"[::ffff:192.0.2.10]:443", "::ffff:198.51.100.7", "192.0.2.10/32"},
		{"[fe80::1%eth0]:443", "[fe80::2%eth1]:1", "fe80::/10"},
		{"not an address", "1.2.3.4", "0.0.0.0/0"},
		{"203.0.113.5:4000", "1.2.3.4", ""},
		{"192.0.2.10:443", ",,,", "192.0.2.10/32"},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	f.Fuzz(func(t *testing.T, remote, xff, trustedList string) {
		var trusted []netip.Prefix
		for s := range strings.SplitSeq(trustedList, ",") {
			if p, err := netip.ParsePrefix(strings.TrimSpace(s)); err == nil {
				trusted = append(trusted, p)
			}
		}
		var lines []string
		if xff != "" {
			lines = strings.Split(xff, "\n")
		}
		got := middleware.ClientAddr(remote, lines, trusted)

		peer := middleware.ParseHop(remote)
		if !peer.IsValid() || !middleware.IsTrusted(peer, trusted) {
			if got != peer {
				t.Fatalf("peer %q not trusted: got %v, want the peer %v", remote, got, peer)
			}
			return
		}
		if got == peer {
			return
		}
		// got is a hop, and every hop to the right of (one occurrence of)
		// it parses and is a trusted proxy: a hop the client wrote to the
		// left of the address a trusted proxy saw is never taken.
		var hops []string // right to left
		for i := len(lines) - 1; i >= 0; i-- {
			parts := strings.Split(lines[i], ",")
			for j := len(parts) - 1; j >= 0; j-- {
				hops = append(hops, strings.TrimSpace(parts[j]))
			}
		}
		for _, h := range hops {
			a := middleware.ParseHop(h)
			if a == got {
				return
			}
			if !a.IsValid() || !middleware.IsTrusted(a, trusted) {
				t.Fatalf("ClientAddr(%q, %q, %v) = %v: passes hop %q, which is not a trusted proxy", remote, lines, trusted, got, h)
			}
		}
		t.Fatalf("ClientAddr(%q, %q, %v) = %v: neither zero, the peer nor a hop", remote, lines, trusted, got)
	})
}

// FuzzIdentify drives arbitrary credentials and addresses through the
// chain's identify step. It calls ServeHTTP directly: a real socket cannot
// carry an arbitrary RemoteAddr or header bytes the client refuses to send.
// "{valid}" and "{stale}" in an input stand for this process's real tokens.
func FuzzIdentify(f *testing.F) {
	fx := newFixture(f)
	valid, stale := fx.ana, fx.stale
	cfg := parseConfig(f, `trusted_proxies: [127.0.0.1, 10.0.0.0/8, "::1"]`)
	chain := fx.chain(cfg, nil)
	expand := func(s string) string {
		return strings.NewReplacer("{valid}", valid, "{stale}", stale).Replace(s)
	}

	f.Add("Bearer {valid}", "", "", "192.0.2.1:1234")
	f.Add("bearer {valid}", "", "198.51.100.7", "127.0.0.1:1234")
	f.Add("", wire.SessionCookie+"={valid}", "1.2.3.4, 10.0.0.9", "127.0.0.1:1")
	f.Add("", wire.SessionCookie+`="{valid}"; other=x`, "", "[::1]:1")
	f.Add("Bearer {stale}", "", "", "[2001:db8::1]:443")
	f.Add("Basic {valid}", wire.SessionCookie+"={valid}", "", "192.0.2.1:1")
	f.Add("Bearer ", "", "garbage\n198.51.100.7", "127.0.0.1:80")
	f.Add("Bearer {valid}x", "", "", "no port")
	f.Add("Bearer "+strings.Repeat("x", 300), "", "", "")
	f.Fuzz(func(t *testing.T, authz, cookie, xff, remote string) {
		authz, cookie = expand(authz), expand(cookie)
		req := httptest.NewRequest(http.MethodGet, "/x", nil)
		req.RemoteAddr = remote
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		if cookie != "" {
			req.Header.Set("Cookie", cookie)
		}
		if xff != "" {
			req.Header["X-Forwarded-For"] = strings.Split(xff, "\n")
		}
		var caller parley.Caller
		ran := false
		h := chain.Wrap(middleware.Policy{Pattern: "GET /x", Access: middleware.Public}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ran = true
			caller = parley.CallerFromContext(r.Context())
		}))
		h.ServeHTTP(httptest.NewRecorder(), req)
		if !ran {
			t.Fatal("a public route did not run")
		}

		token := wire.BearerToken(req)
		if caller.Token != token {
			t.Errorf("Token %q, want %q", caller.Token, token)
		}
		if want := middleware.ClientAddr(remote, req.Header.Values("X-Forwarded-For"), cfg.TrustedProxies()); caller.Addr != want {
			t.Errorf("Addr %v, want %v", caller.Addr, want)
		}
		if caller.Known != (token == valid) {
			t.Fatalf("Known = %v for token %q", caller.Known, token)
		}
		if caller.Known {
			if caller.Principal.User != "ana" || caller.Code != "" || middleware.Subject(caller) != "ana" {
				t.Errorf("known caller: %+v, subject %q", caller, middleware.Subject(caller))
			}
			return
		}
		wantCode := parley.CodeUnauthenticated
		if token == stale {
			wantCode = parley.CodeStaleInstall
		}
		if caller.Code != wantCode || caller.Principal != (parley.Principal{}) {
			t.Errorf("anonymous caller: %+v, want code %s and no principal", caller, wantCode)
		}
		if s := middleware.Subject(caller); s != "ip:"+middleware.AddrSubject(caller.Addr) {
			t.Errorf("subject %q, want ip:%v", s, middleware.AddrSubject(caller.Addr))
		}
	})
}
