package storetest

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/app"
	"github.com/parleychat/parley/secretkey"
)

// Secrets at rest (parley.Sealer). The suite's keys are fixed: keyA is the
// key of the behaviours that run with sealing on.
var (
	keyA = bytes.Repeat([]byte{0xa1}, secretkey.Size)
	keyB = bytes.Repeat([]byte{0xb2}, secretkey.Size)
)

func sealer(keys ...[]byte) parley.Sealer {
	r, err := secretkey.New(keys...)
	if err != nil {
		panic(err)
	}
	return r
}

// sealedOpts are the options of the behaviours that run with sealing on.
var sealedOpts = parley.Options{Secrets: sealer(keyA)}

// with returns o with s as its Sealer.
func with(o parley.Options, s parley.Sealer) parley.Options {
	o.Secrets = s
	return o
}

// hookWithSecret creates a conversation with a bot and a webhook of it.
func (e *env) hookWithSecret(t *testing.T) parley.Hook {
	t.Helper()
	ana := e.member(t, "ana")
	e.bystander(t, "bot")
	e.group(t, ana, "c-hook", "bot")
	h, err := e.st.CreateHook(ctx(t), parley.NewHook{Conv: "c-hook", Bot: "bot", CreatedBy: "root"})
	ok(t, err, "create hook")
	return h
}

// verifies checks that the secret st returns for hook h verifies a request
// signed with h's secret, and one signed with another secret does not.
func verifies(t *testing.T, st parley.Store, h parley.Hook) {
	t.Helper()
	got, err := st.Hook(ctx(t), h.ID)
	ok(t, err, "read hook")
	if got.Secret != h.Secret {
		t.Fatalf("hook secret read back %q, want the one created", got.Secret)
	}
	now := time.Now()
	ts := strconv.FormatInt(now.Unix(), 10)
	body := []byte(`{"body":"deploy done"}`)
	if err := app.VerifyHook(got.Secret, ts, "k1", body, app.SignHook(h.Secret, ts, "k1", body), now); err != nil {
		t.Errorf("a request signed with the hook's secret does not verify: %v", err)
	}
	if err := app.VerifyHook(got.Secret, ts, "k1", body, app.SignHook(parley.NewHookSecret(), ts, "k1", body), now); err == nil {
		t.Error("a request signed with another secret verifies")
	}
}

// noPlaintext checks the raw rows: the hook's secret and the export key are
// sealed, and neither appears in them.
func noPlaintext(t *testing.T, e *env, h parley.Hook, key []byte) {
	t.Helper()
	raw := e.db.Text(t, `SELECT secret FROM hooks WHERE id = ?`, h.ID)
	if strings.Contains(raw, h.Secret) || e.db.Int(t, `SELECT sealed FROM hooks WHERE id = ?`, h.ID) != 1 {
		t.Errorf("hooks row not sealed: secret column %q", raw)
	}
	if key == nil {
		return
	}
	raw = e.db.Text(t, `SELECT secret FROM export_signing_keys WHERE id = ?`, parley.ExportSigningKeyID)
	if strings.Contains(raw, string(key)) || e.db.Int(t, `SELECT sealed FROM export_signing_keys WHERE id = ?`, parley.ExportSigningKeyID) != 1 {
		t.Error("export_signing_keys row not sealed")
	}
}

// testSecretsSealed: with a Sealer, a webhook's secret and the export
// signing key read back as created (the secret verifies a signed request),
// on this store and on another opened with the same key, and the raw rows
// hold neither.
func testSecretsSealed(t *testing.T, e *env) {
	h := e.hookWithSecret(t)
	_, key, err := e.st.ExportSigningKey(ctx(t))
	ok(t, err, "export signing key")
	verifies(t, e.st, h)
	noPlaintext(t, e, h, key)
	other := e.db.Open(t)
	verifies(t, other, h)
	_, again, err := other.ExportSigningKey(ctx(t))
	ok(t, err, "export signing key from another store")
	if !bytes.Equal(again, key) {
		t.Error("another store with the same key reads another export signing key")
	}
}

// testSecretsWrongKeyRefused: a store opened on the database with another
// key, or with none, fails to open with ErrSecretKey, and changes nothing.
func testSecretsWrongKeyRefused(t *testing.T, e *env) {
	h := e.hookWithSecret(t)
	before := e.db.Text(t, `SELECT secret FROM hooks WHERE id = ?`, h.ID)
	for _, tc := range []struct {
		name string
		s    parley.Sealer
	}{
		{"another_key", sealer(keyB)},
		{"no_key", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := e.db.OpenWith(t, with(sealedOpts, tc.s)); !errors.Is(err, parley.ErrSecretKey) {
				t.Fatalf("open with %s: got %v, want ErrSecretKey", tc.name, err)
			}
		})
	}
	if got := e.db.Text(t, `SELECT secret FROM hooks WHERE id = ?`, h.ID); got != before {
		t.Error("a refused open changed the hooks row")
	}
	verifies(t, e.st, h)
}

// testSecretsSealedAtOpen: rows written in clear (a database from before
// sealing) are sealed by the first open with a key, also when several
// stores open at once (each then reads them), and a later open changes
// nothing.
func testSecretsSealedAtOpen(t *testing.T, e *env) {
	h := e.hookWithSecret(t) // this env has no Sealer: in clear
	_, key, err := e.st.ExportSigningKey(ctx(t))
	ok(t, err, "export signing key in clear")
	if raw := e.db.Text(t, `SELECT secret FROM hooks WHERE id = ?`, h.ID); raw != h.Secret {
		t.Fatalf("without a Sealer the secret column holds %q, want the secret", raw)
	}
	stores := make([]parley.Store, 4)
	errs := make([]error, len(stores))
	var wg sync.WaitGroup
	for i := range stores {
		wg.Go(func() { stores[i], errs[i] = e.db.OpenWith(t, sealedOpts) })
	}
	wg.Wait()
	for i, err := range errs {
		ok(t, err, "concurrent open with a key")
		verifies(t, stores[i], h)
		_, got, err := stores[i].ExportSigningKey(ctx(t))
		ok(t, err, "export signing key after sealing")
		if !bytes.Equal(got, key) {
			t.Fatal("sealing changed the export signing key")
		}
	}
	noPlaintext(t, e, h, key)
	raw := e.db.Text(t, `SELECT secret FROM hooks WHERE id = ?`, h.ID)
	check := e.db.Text(t, `SELECT sealed FROM secret_check WHERE id = 1`)
	st, err := e.db.OpenWith(t, sealedOpts)
	ok(t, err, "open again")
	verifies(t, st, h)
	if e.db.Text(t, `SELECT secret FROM hooks WHERE id = ?`, h.ID) != raw || e.db.Text(t, `SELECT sealed FROM secret_check WHERE id = 1`) != check {
		t.Error("a second open with the same key sealed again")
	}
}

// testSecretsRotation: a ring whose current key is new and whose second is
// the database's opens it and seals everything again under the new key, so
// the new key alone opens it afterwards and the old one alone no longer
// does.
func testSecretsRotation(t *testing.T, e *env) {
	h := e.hookWithSecret(t)
	_, key, err := e.st.ExportSigningKey(ctx(t))
	ok(t, err, "export signing key")
	before := e.db.Text(t, `SELECT secret FROM hooks WHERE id = ?`, h.ID)
	st, err := e.db.OpenWith(t, with(sealedOpts, sealer(keyB, keyA)))
	ok(t, err, "open with the rotated ring")
	verifies(t, st, h)
	if e.db.Text(t, `SELECT secret FROM hooks WHERE id = ?`, h.ID) == before {
		t.Error("the rotated ring left the hook sealed under the old key")
	}
	st, err = e.db.OpenWith(t, with(sealedOpts, sealer(keyB)))
	ok(t, err, "open with the new key alone")
	verifies(t, st, h)
	_, got, err := st.ExportSigningKey(ctx(t))
	ok(t, err, "export signing key under the new key")
	if !bytes.Equal(got, key) {
		t.Error("rotation changed the export signing key")
	}
	noPlaintext(t, e, h, key)
	if _, err := e.db.OpenWith(t, sealedOpts); !errors.Is(err, parley.ErrSecretKey) {
		t.Errorf("open with the old key alone after rotation: got %v, want ErrSecretKey", err)
	}
}
