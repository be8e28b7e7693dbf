package export

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/postgres/pgtest"
	"github.com/parleychat/parley/sqlite"
)

func TestKeyring(t *testing.T) {
	t.Parallel()
	keys := testKeys(t)
	ring, err := NewKeyring(keys, "k2")
	if err != nil {
		t.Fatal(err)
	}
	old, _ := NewKeyring(map[string][]byte{"k1": keys["k1"]}, "k1")
	stranger, _ := NewKeyring(map[string][]byte{"k3": bytes.Repeat([]byte{3}, 32)}, "k3")
	now := time.Unix(1_800_000_000, 0)
	exp := now.Add(5 * time.Minute)
	job := "0190a5c4-0000-7000-8000-000000000001"
	query := func(link string) (string, url.Values) {
		u, err := url.Parse(link)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimPrefix(u.Path, "/download/"), u.Query()
	}
	edit := func(link, k, v string) url.Values {
		_, q := query(link)
		q.Set(k, v)
		return q
	}
	good := ring.Link(job, "ana", exp)
	if !strings.HasPrefix(good, "/download/"+job+"?u=ana&exp=1800000300&kid=k2&sig=") {
		t.Errorf("link %s", good)
	}
	sig := edit(good, "x", "").Get("sig")
	flipped := sig[:10] + string("01"[(sig[10]-'0'+1)%2]) + sig[11:]
	for _, tc := range []struct {
		name string
		job  string
		q    url.Values
		now  time.Time
		user string
		err  error
	}{
		{"valid", job, edit(good, "x", ""), now, "ana", nil},
		{"valid at its last second", job, edit(good, "x", ""), exp, "ana", nil},
		{"rotated-out key still verifies", job, edit(old.Link(job, "ana", exp), "x", ""), now, "ana", nil},
		{"expired", job, edit(good, "x", ""), exp.Add(time.Second), "", ErrLinkExpired},
		{"tampered sig", job, edit(good, "sig", flipped), now, "", ErrLinkSignature},
		{"other user", job, edit(good, "u", "ben"), now, "", ErrLinkSignature},
		{"other job", "0190a5c4-0000-7000-8000-000000000002", edit(good, "x", ""), now, "", ErrLinkSignature},
		{"later exp", job, edit(good, "exp", "1900000000"), now, "", ErrLinkSignature},
		{"kid swapped", job, edit(good, "kid", "k1"), now, "", ErrLinkSignature},
		{"unknown kid", job, edit(stranger.Link(job, "ana", exp), "x", ""), now, "", ErrLinkKey},
		{"missing sig", job, url.Values{"u": {"ana"}, "exp": {"1800000300"}, "kid": {"k2"}}, now, "", ErrLinkMalformed},
		{"short sig", job, edit(good, "sig", "abcd"), now, "", ErrLinkMalformed},
		{"non-hex sig", job, edit(good, "sig", strings.Repeat("zz", 32)), now, "", ErrLinkMalformed},
		{"exp with a sign", job, edit(good, "exp", "+1800000300"), now, "", ErrLinkMalformed},
		{"two users", job, func() url.Values { q := edit(good, "x", ""); q.Add("u", "ben"); return q }(), now, "", ErrLinkMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			user, err := ring.Verify(tc.job, tc.q, tc.now)
			if user != tc.user || !errors.Is(err, tc.err) {
				t.Errorf("Verify: %q, %v; want %q, %v", user, err, tc.user, tc.err)
			}
		})
	}
}

func TestNewKeyring(t *testing.T) {
	t.Parallel()
	k := bytes.Repeat([]byte{1}, 32)
	for _, tc := range []struct {
		name    string
		keys    map[string][]byte
		current string
	}{
		{"empty", nil, ""},
		{"current missing", map[string][]byte{"a": k}, "b"},
		{"short key", map[string][]byte{"a": k[:31]}, "a"},
		{"bad id", map[string][]byte{"a b": k}, "a b"},
	} {
		if _, err := NewKeyring(tc.keys, tc.current); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	// The ring keeps its own copy.
	keys := map[string][]byte{"a": bytes.Clone(k)}
	ring, err := NewKeyring(keys, "a")
	if err != nil {
		t.Fatal(err)
	}
	link := ring.Link("j", "ana", time.Unix(100, 0))
	keys["a"][0] = 9
	if ring.Link("j", "ana", time.Unix(100, 0)) != link {
		t.Error("the ring shares the caller's key bytes")
	}
}

func TestLocalKey(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	keys, id, err := LocalKey(dir)
	if err != nil || id != LocalKeyID || len(keys[LocalKeyID]) != 32 {
		t.Fatalf("LocalKey: %v %q %v", keys, id, err)
	}
	info, err := os.Stat(filepath.Join(dir, LocalKeyFile))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v %v, want mode 0600", info, err)
	}
	again, _, err := LocalKey(dir)
	if err != nil || !bytes.Equal(again[LocalKeyID], keys[LocalKeyID]) {
		t.Errorf("second LocalKey: %v, a different key", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("data dir holds %d entries, want the key only", len(entries))
	}
	if _, err := NewKeyring(keys, id); err != nil {
		t.Errorf("a ring of the local key: %v", err)
	}
	os.WriteFile(filepath.Join(dir, LocalKeyFile), []byte("short"), 0o600)
	if _, _, err := LocalKey(dir); err == nil {
		t.Error("a damaged key file was accepted")
	}
}

// TestStoreKeyring: two processes on one database (two store handles),
// with different data-directory keys and nothing configured, sign with the
// store's key and verify each other's links; a link the data directory's
// key signed before still verifies on its own process, and only there.
func TestStoreKeyring(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		open func(t *testing.T) (parley.Store, parley.Store)
	}{
		{"sqlite", func(t *testing.T) (parley.Store, parley.Store) {
			file := filepath.Join(t.TempDir(), "parley.db")
			return openSQLite(t, file), openSQLite(t, file)
		}},
		{"postgres", func(t *testing.T) (parley.Store, parley.Store) {
			dsn := pgtest.DSN(t)
			return openPostgres(t, dsn), openPostgres(t, dsn)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st1, st2 := tc.open(t)
			local1, _, err := LocalKey(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			local2, _, err := LocalKey(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			r1, err := StoreKeyring(ctxT(t), st1, local1)
			if err != nil {
				t.Fatal(err)
			}
			r2, err := StoreKeyring(ctxT(t), st2, local2)
			if err != nil {
				t.Fatal(err)
			}
			if r1.Current() != parley.ExportSigningKeyID || r2.Current() != parley.ExportSigningKeyID {
				t.Errorf("current keys %q, %q; want the store's %q", r1.Current(), r2.Current(), parley.ExportSigningKeyID)
			}
			now := time.Now()
			job := parley.NewID()
			verify := func(r *Keyring, link string) error {
				u, err := url.Parse(link)
				if err != nil {
					t.Fatal(err)
				}
				user, err := r.Verify(job, u.Query(), now)
				if err == nil && user != "ana" {
					t.Errorf("verified user %q, want ana", user)
				}
				return err
			}
			for _, c := range []struct {
				what string
				sign *Keyring
				on   *Keyring
			}{{"1 on 2", r1, r2}, {"2 on 1", r2, r1}} {
				if err := verify(c.on, c.sign.Link(job, "ana", now.Add(time.Minute))); err != nil {
					t.Errorf("link %s: %v", c.what, err)
				}
			}
			old, err := NewKeyring(local1, LocalKeyID)
			if err != nil {
				t.Fatal(err)
			}
			link := old.Link(job, "ana", now.Add(time.Minute))
			if err := verify(r1, link); err != nil {
				t.Errorf("a link of the data directory's key on its own process: %v", err)
			}
			if err := verify(r2, link); err == nil {
				t.Error("a link of another data directory's key verified")
			}
		})
	}
}

func openSQLite(t *testing.T, file string) parley.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), file, parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func openPostgres(t *testing.T, dsn string) parley.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), dsn, parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
