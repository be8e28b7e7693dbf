// Package secretkey reads the server's secret key file and seals secrets
// with it (AES-256-GCM): it implements parley.Sealer, which the stores use
// to keep webhook secrets and the export link signing key encrypted at rest.
//
// The file is text: one key per line, each the standard base64 encoding of
// 32 random bytes. The first key is the current one; Seal uses it. Further
// lines are older keys that still open what they sealed, for rotation.
// Blank lines and lines starting with '#' are ignored. Load creates a file
// with one new key, mode 0600, when none exists.
//
// A sealed value is a version byte, a random 96-bit nonce, and the GCM
// ciphertext with its tag; the label is the associated data. Which key
// sealed a value is found by trying the keys in order (GCM authenticates,
// so a wrong key fails): no key id is stored.
package secretkey

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/parleychat/parley"
)

// Size is the length of a key in bytes (AES-256).
const Size = 32

// version is the first byte of a sealed value.
const version = 1

// Ring is a current key and older keys that still open.
type Ring struct {
	aeads []cipher.AEAD // [0] is current
}

var _ parley.Sealer = (*Ring)(nil)

// New returns a ring of keys, the first being the current one. Each key is
// Size bytes.
func New(keys ...[]byte) (*Ring, error) {
	if len(keys) == 0 {
		return nil, errors.New("secret key: no key")
	}
	r := &Ring{}
	for i, k := range keys {
		if len(k) != Size {
			return nil, fmt.Errorf("secret key %d: %d bytes, want %d", i+1, len(k), Size)
		}
		block, err := aes.NewCipher(k)
		if err != nil {
			return nil, err
		}
		a, err := cipher.NewGCM(block)
		if err != nil {
			return nil, err
		}
		r.aeads = append(r.aeads, a)
	}
	return r, nil
}

// Seal implements parley.Sealer.
func (r *Ring) Seal(plain []byte, label string) ([]byte, error) {
	a := r.aeads[0]
	out := make([]byte, 1+a.NonceSize(), 1+a.NonceSize()+len(plain)+a.Overhead())
	out[0] = version
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, err
	}
	return a.Seal(out, out[1:], plain, []byte(label)), nil
}

// ErrOpen is the error of Open when no key of the ring opens a value.
var ErrOpen = errors.New("secret key: no key of the ring opens the value")

// Open implements parley.Sealer.
func (r *Ring) Open(sealed []byte, label string) ([]byte, bool, error) {
	for i, a := range r.aeads {
		n := a.NonceSize()
		if len(sealed) < 1+n+a.Overhead() || sealed[0] != version {
			return nil, false, ErrOpen
		}
		plain, err := a.Open(nil, sealed[1:1+n], sealed[1+n:], []byte(label))
		if err == nil {
			return plain, i == 0, nil
		}
	}
	return nil, false, ErrOpen
}

// Parse reads a key file's text (see the package comment).
func Parse(text []byte) (*Ring, error) {
	var keys [][]byte
	sc := bufio.NewScanner(bytes.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(line)
		if err != nil || len(k) != Size {
			return nil, fmt.Errorf("line %d: want the base64 of %d bytes", n, Size)
		}
		keys = append(keys, k)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, errors.New("no key in the file")
	}
	return New(keys...)
}

// Generate returns the text of a new key file: one new key.
func Generate() []byte {
	k := make([]byte, Size)
	if _, err := rand.Read(k); err != nil {
		panic("secretkey: crypto/rand failed: " + err.Error())
	}
	return []byte(base64.StdEncoding.EncodeToString(k) + "\n")
}

// Load reads the key file at path, creating it (one new key, mode 0600,
// fsynced, its directory 0700 if missing) when it does not exist. Two
// processes starting together agree on one key: the file is published with
// a hard link, which fails when it exists. created reports whether this call
// made the file. A file that does not parse is an error, never replaced:
// the secrets sealed with it would be lost.
func Load(path string) (r *Ring, created bool, err error) {
	for range 2 {
		text, err := os.ReadFile(path)
		if err == nil {
			r, err := Parse(text)
			if err != nil {
				return nil, false, fmt.Errorf("%s: %w", path, err)
			}
			return r, created, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, false, err
		}
		err = create(path)
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, false, fmt.Errorf("create %s: %w", path, err)
		}
		created = err == nil
	}
	return nil, false, fmt.Errorf("%s: created but not readable", path)
}

func create(path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(Generate())
	if err == nil {
		err = tmp.Chmod(0o600)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Link(tmp.Name(), path)
}

// LooseMode reports whether path's permissions let anyone but its owner
// read or write it (the caller warns: the key opens every sealed secret).
func LooseMode(path string) (bool, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	return fi.Mode().Perm()&0o077 != 0, nil
}
