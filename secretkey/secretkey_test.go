package secretkey_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/parleychat/parley/secretkey"
)

func key(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, secretkey.Size)
	rand.Read(k)
	return k
}

func ring(t *testing.T, keys ...[]byte) *secretkey.Ring {
	t.Helper()
	r, err := secretkey.New(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSealOpen(t *testing.T) {
	k1, k2 := key(t), key(t)
	cur := ring(t, k1)
	sealed, err := cur.Seal([]byte("hunter2"), "hooks/1")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("hunter2")) {
		t.Fatal("sealed value holds the plaintext")
	}
	tests := []struct {
		name        string
		ring        *secretkey.Ring
		label       string
		wantCurrent bool
		wantErr     bool
	}{
		{"same key", cur, "hooks/1", true, false},
		{"old key of a rotated ring", ring(t, k2, k1), "hooks/1", false, false},
		{"another label", cur, "hooks/2", false, true},
		{"another key", ring(t, k2), "hooks/1", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plain, current, err := tt.ring.Open(sealed, tt.label)
			if tt.wantErr {
				if !errors.Is(err, secretkey.ErrOpen) {
					t.Fatalf("Open: got %v, want ErrOpen", err)
				}
				return
			}
			if err != nil || string(plain) != "hunter2" || current != tt.wantCurrent {
				t.Fatalf("Open = %q, %v, %v; want hunter2, %v, nil", plain, current, err, tt.wantCurrent)
			}
		})
	}
	again, _ := cur.Seal([]byte("hunter2"), "hooks/1")
	if bytes.Equal(sealed, again) {
		t.Error("two seals of one value are equal: the nonce is not fresh")
	}
	for _, bad := range [][]byte{nil, {1}, append([]byte{9}, sealed[1:]...)} {
		if _, _, err := cur.Open(bad, "hooks/1"); err == nil {
			t.Errorf("Open(%x) succeeded", bad)
		}
	}
}

func TestParse(t *testing.T) {
	k1, k2 := key(t), key(t)
	b64 := base64.StdEncoding.EncodeToString
	tests := []struct {
		name string
		text string
		ok   bool
	}{
		{"one key", b64(k1) + "\n", true},
		{"rotation with comments", "# new\n" + b64(k2) + "\n\n# old\n" + b64(k1) + "\n", true},
		{"empty", "", false},
		{"comments only", "# nothing\n", false},
		{"short key", b64(k1[:16]) + "\n", false},
		{"raw bytes", string(k1), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := secretkey.Parse([]byte(tt.text))
			if (err == nil) != tt.ok {
				t.Fatalf("Parse: err %v, want ok %v", err, tt.ok)
			}
		})
	}
	// The old key of a rotated file still opens; the new one seals.
	old, _ := ring(t, k1).Seal([]byte("s"), "l")
	r, err := secretkey.Parse([]byte(b64(k2) + "\n" + b64(k1) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, current, err := r.Open(old, "l"); err != nil || current {
		t.Fatalf("Open of an old seal: current %v, err %v", current, err)
	}
}

func TestLoadCreatesPrivateFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "secret.key")
	var (
		wg    sync.WaitGroup
		rings [8]*secretkey.Ring
		made  [8]bool
	)
	for i := range rings {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, created, err := secretkey.Load(path)
			if err != nil {
				t.Error(err)
			}
			rings[i], made[i] = r, created
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	n := 0
	for _, m := range made {
		if m {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d loads created the file, want 1", n)
	}
	sealed, _ := rings[0].Seal([]byte("x"), "l")
	for i, r := range rings {
		if _, _, err := r.Open(sealed, "l"); err != nil {
			t.Errorf("load %d has another key: %v", i, err)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Errorf("mode %o, want 600", got)
	}
	if loose, _ := secretkey.LooseMode(path); loose {
		t.Error("LooseMode of a 0600 file")
	}
	os.Chmod(path, 0o644)
	if loose, _ := secretkey.LooseMode(path); !loose {
		t.Error("LooseMode of a 0644 file is false")
	}
	os.WriteFile(path, []byte("garbage\n"), 0o600)
	if _, _, err := secretkey.Load(path); err == nil {
		t.Error("Load of a garbage file succeeded (it must never be replaced)")
	}
}

// FuzzParse: a key file is outside input; Parse never panics, and a ring
// it returns seals and opens.
func FuzzParse(f *testing.F) {
	f.Add([]byte(base64.StdEncoding.EncodeToString(make([]byte, 32)) + "\n"))
	f.Add([]byte("# c\n\n"))
	f.Add([]byte("AAAA\n"))
	f.Fuzz(func(t *testing.T, text []byte) {
		r, err := secretkey.Parse(text)
		if err != nil {
			return
		}
		s, err := r.Seal([]byte("p"), "l")
		if err != nil {
			t.Fatal(err)
		}
		if p, current, err := r.Open(s, "l"); err != nil || !current || string(p) != "p" {
			t.Fatalf("round trip: %q %v %v", p, current, err)
		}
	})
}
