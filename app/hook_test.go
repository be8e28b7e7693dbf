package app_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/parleychat/parley/app"
)

func FuzzVerifyHook(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	ts := strconv.FormatInt(now.Unix(), 10)
	f.Add("secret", ts, "key", []byte(`{"body":"x"}`), app.SignHook("secret", ts, "key", []byte(`{"body":"x"}`)))
	f.Add("secret", "-1", "", []byte{}, "sha256=")
	f.Add("", "99999999999999999999", "k", []byte{0xff}, "sha256=zz")
	f.Fuzz(func(t *testing.T, secret, ts, key string, body []byte, sig string) {
		err := app.VerifyHook(secret, ts, key, body, sig, now)
		if err != nil {
			return
		}
		// Accepted: the signature must be the real one and the time within
		// the skew.
		if sig != app.SignHook(secret, ts, key, body) {
			t.Fatalf("accepted a signature that is not the HMAC: %q", sig)
		}
		n, perr := strconv.ParseInt(ts, 10, 64)
		if perr != nil || now.Sub(time.Unix(n, 0)).Abs() > app.HookMaxSkew {
			t.Fatalf("accepted timestamp %q", ts)
		}
		// And any change to the key breaks it.
		if app.VerifyHook(secret, ts, key+"x", body, sig, now) == nil {
			t.Fatal("signature does not bind the key")
		}
	})
}
