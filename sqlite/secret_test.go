package sqlite_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/secretkey"
	"github.com/parleychat/parley/sqlite"
)

// TestSecretsNotInFile: with a key, neither a webhook's secret nor the
// export signing key is anywhere in the bytes of the database file or its
// WAL, in any encoding the store could have written them; and the files
// SQLite creates are readable by their owner alone.
func TestSecretsNotInFile(t *testing.T) {
	ctx := context.Background()
	ring, err := secretkey.New(bytes.Repeat([]byte{7}, secretkey.Size))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "parley.db")
	db, err := sqlite.Open(ctx, file, parley.Options{Secrets: ring})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, u := range []string{"ana", "bot"} {
		if _, err := db.CreateUser(ctx, parley.NewUser{ID: u}); err != nil {
			t.Fatal(err)
		}
	}
	ana := parley.Principal{User: "ana", DeviceID: "d1", InstallID: "i1"}
	if _, err := db.CreateConversation(ctx, ana, parley.NewConversation{ID: "c-ops", Kind: parley.KindGroup, Members: []string{"bot"}}); err != nil {
		t.Fatal(err)
	}
	h, err := db.CreateHook(ctx, parley.NewHook{Conv: "c-ops", Bot: "bot", CreatedBy: "root"})
	if err != nil {
		t.Fatal(err)
	}
	_, key, err := db.ExportSigningKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := base64.RawURLEncoding.DecodeString(h.Secret)
	secrets := map[string][]byte{
		"hook secret":                   []byte(h.Secret),
		"hook secret bytes":             raw,
		"export key":                    key,
		"export key (base64)":           []byte(base64.StdEncoding.EncodeToString(key)[:40]),
		"export key (hex, as SQL text)": []byte(hexOf(key)),
	}
	check := func(when string) {
		t.Helper()
		for _, name := range []string{file, file + "-wal"} {
			b, err := os.ReadFile(name)
			if os.IsNotExist(err) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			for what, s := range secrets {
				if bytes.Contains(b, s) {
					t.Errorf("%s: the %s is in %s", when, what, filepath.Base(name))
				}
			}
		}
	}
	check("open")
	if _, err := os.Stat(file + "-wal"); err != nil {
		t.Errorf("no WAL file while open (the check would read nothing): %v", err)
	}
	for _, name := range []string{file, file + "-wal", file + "-shm"} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Errorf("%s: %v", filepath.Base(name), err)
			continue
		}
		if got := fi.Mode().Perm(); got != 0o600 {
			t.Errorf("%s mode %o, want 600", filepath.Base(name), got)
		}
	}
	db.Close()
	check("closed")
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}
