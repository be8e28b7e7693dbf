package parley_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/secretkey"
)

func TestResealSecret(t *testing.T) {
	oldKey, newKey := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	ring := func(keys ...[]byte) parley.Sealer {
		r, err := secretkey.New(keys...)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	rotated := ring(newKey, oldKey)
	label := parley.HookSecretLabel("h1")
	underOld, _, _ := parley.SealSecret(ring(oldKey), label, []byte("s3cret"))
	underNew, _, _ := parley.SealSecret(ring(newKey), label, []byte("s3cret"))
	tests := []struct {
		name        string
		stored      []byte
		sealed      bool
		wantChanged bool
		wantErr     bool
	}{
		{"in clear", []byte("s3cret"), false, true, false},
		{"under the old key", underOld, true, true, false},
		{"under the current key", underNew, true, false, false},
		{"under no key of the ring", underOld[:len(underOld)-1], true, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, changed, err := parley.ResealSecret(rotated, label, tt.stored, tt.sealed)
			if tt.wantErr {
				if !errors.Is(err, parley.ErrSecretKey) {
					t.Fatalf("err %v, want ErrSecretKey", err)
				}
				return
			}
			if err != nil || changed != tt.wantChanged {
				t.Fatalf("changed %v, err %v; want changed %v", changed, err, tt.wantChanged)
			}
			plain, current, err := rotated.Open(out, label)
			if err != nil || !current || string(plain) != "s3cret" {
				t.Fatalf("the result opens as %q, current %v, err %v; want s3cret under the current key", plain, current, err)
			}
		})
	}
	text := parley.SecretText(underNew, true)
	back, err := parley.SecretBytes(text, true)
	if err != nil || !bytes.Equal(back, underNew) {
		t.Errorf("SecretBytes(SecretText) = %x, %v", back, err)
	}
	if _, err := parley.CheckSecretKey(nil, underNew); !errors.Is(err, parley.ErrSecretKey) {
		t.Errorf("CheckSecretKey without a Sealer: %v", err)
	}
}
