package upload

import (
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FuzzHashState: whatever the saved hash state file holds, reading it
// never fails or panics on a consistent staged file, and a state it cannot
// use (unparseable, negative, ahead of the bytes) is rebuilt from them:
// the sum is then right. (A well-formed state is trusted: only this
// package writes it, by a rename after the bytes it covers.)
func FuzzHashState(f *testing.F) {
	data := []byte("the staged bytes of an upload, hashed as they arrive")
	for _, at := range []int{0, 10, 30} {
		h := sha256.New()
		h.Write(data[:at])
		st, _ := h.(encoding.BinaryMarshaler).MarshalBinary()
		f.Add(append([]byte(strconv.Itoa(at)+"\n"), st...), 20)
	}
	f.Add([]byte("5\nnot a state"), 20)
	f.Add([]byte("-1\n"), 0)
	f.Add([]byte(""), len(data))
	f.Fuzz(func(t *testing.T, state []byte, size int) {
		if size < 0 || size > len(data) {
			return
		}
		path := filepath.Join(t.TempDir(), "x")
		if err := os.WriteFile(path, data[:size], 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(hashPath(path), state, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := stagedSum(path, int64(size))
		if err != nil {
			t.Fatalf("state %q, %d bytes: %v", state, size, err)
		}
		at, body, _ := strings.Cut(string(state), "\n")
		n, perr := strconv.Atoi(at)
		usable := perr == nil && 0 <= n && n <= size && sha256.New().(encoding.BinaryUnmarshaler).UnmarshalBinary([]byte(body)) == nil
		want := sha256.Sum256(data[:size])
		if !usable && got != hex.EncodeToString(want[:]) {
			t.Fatalf("unusable state %q, %d bytes: sum %s, want %x", state, size, got, want)
		}
	})
}
