package export

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/parleychat/parley/config"
)

// Errors of Keyring.Verify. A download answers all of them with 403; they
// are distinct for the log.
var (
	ErrLinkMalformed = errors.New("export link: malformed signature parameters")
	ErrLinkKey       = errors.New("export link: unknown signing key id")
	ErrLinkSignature = errors.New("export link: bad signature")
	ErrLinkExpired   = errors.New("export link: expired")
)

// Keyring signs download links with its current key and verifies them with
// any of its keys, so a rotated-out key keeps its live links working until
// it is removed from the ring. A link binds the key id, the job, the user
// and the expiry: HMAC-SHA256 over the four, each length-prefixed, so no
// field can borrow bytes from another.
type Keyring struct {
	keys    map[string][]byte
	current string
}

// NewKeyring returns a ring of keys (by id) signing with current. Every
// key must be at least config.MinSigningSecret bytes and every id a
// non-empty URL-safe token; current must name a key.
func NewKeyring(keys map[string][]byte, current string) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, errors.New("export keyring: no keys")
	}
	ring := &Keyring{keys: make(map[string][]byte, len(keys)), current: current}
	for id, k := range keys {
		if !validKeyID(id) {
			return nil, fmt.Errorf("export keyring: key id %q must be 1–64 characters of [A-Za-z0-9._-]", id)
		}
		if len(k) < config.MinSigningSecret {
			return nil, fmt.Errorf("export keyring: key %q is %d bytes; at least %d are required", id, len(k), config.MinSigningSecret)
		}
		ring.keys[id] = slices.Clone(k)
	}
	if _, ok := ring.keys[current]; !ok {
		return nil, fmt.Errorf("export keyring: the current key %q is not in the ring", current)
	}
	return ring, nil
}

func validKeyID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	return !strings.ContainsFunc(id, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
	})
}

// Current returns the id of the key that signs new links.
func (k *Keyring) Current() string { return k.current }

// Link returns the signed download path of job for user, valid until exp
// (whole seconds): /download/<job>?u=<user>&exp=<unix>&kid=<id>&sig=<hex>.
func (k *Keyring) Link(job, user string, exp time.Time) string {
	e := strconv.FormatInt(exp.Unix(), 10)
	sig := mac(k.keys[k.current], k.current, job, user, e)
	return "/download/" + url.PathEscape(job) + "?u=" + url.QueryEscape(user) + "&exp=" + e +
		"&kid=" + url.QueryEscape(k.current) + "&sig=" + hex.EncodeToString(sig)
}

// Verify checks the signature parameters of a download of job and returns
// the user the link was issued to. The link is valid up to and including
// its exp second. The signature is checked before the expiry, in constant
// time.
func (k *Keyring) Verify(job string, q url.Values, now time.Time) (user string, err error) {
	one := func(name string) (string, bool) {
		v := q[name]
		if len(v) != 1 || v[0] == "" {
			return "", false
		}
		return v[0], true
	}
	user, okU := one("u")
	e, okE := one("exp")
	kid, okK := one("kid")
	sigHex, okS := one("sig")
	if !okU || !okE || !okK || !okS || len(sigHex) != 2*sha256.Size {
		return "", ErrLinkMalformed
	}
	exp, err := strconv.ParseInt(e, 10, 64)
	if err != nil || exp < 0 || strconv.FormatInt(exp, 10) != e {
		return "", ErrLinkMalformed
	}
	sig, err := hex.DecodeString(sigHex)
	if err != nil {
		return "", ErrLinkMalformed
	}
	key, ok := k.keys[kid]
	if !ok {
		return "", ErrLinkKey
	}
	if !hmac.Equal(sig, mac(key, kid, job, user, e)) {
		return "", ErrLinkSignature
	}
	if now.Unix() > exp {
		return "", ErrLinkExpired
	}
	return user, nil
}

// mac is the link signature: HMAC-SHA256 over a domain label and the
// length-prefixed fields.
func mac(key []byte, fields ...string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte("parley-export-link-v1"))
	var n [4]byte
	for _, f := range fields {
		binary.BigEndian.PutUint32(n[:], uint32(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	return h.Sum(nil)
}

// KeyStore is where the deployment's signing key lives (parley.Exports).
type KeyStore interface {
	ExportSigningKey(ctx context.Context) (id string, key []byte, err error)
}

// StoreKeyring returns a ring that signs with the store's key (created on
// first use, the same for every process on the database, so a link one
// gateway hands out verifies on all of them) and also verifies with the
// keys of also (say, the data directory's key, so links it signed before
// keep working until they expire). A key of also with the store key's id
// is ignored.
func StoreKeyring(ctx context.Context, st KeyStore, also map[string][]byte) (*Keyring, error) {
	id, key, err := st.ExportSigningKey(ctx)
	if err != nil {
		return nil, fmt.Errorf("export signing key from the store: %w", err)
	}
	ring := make(map[string][]byte, len(also)+1)
	for k, v := range also {
		ring[k] = v
	}
	ring[id] = key
	return NewKeyring(ring, id)
}

// LocalKeyID is the id of the data directory's own signing key.
const LocalKeyID = "local"

// LocalKeyFile is the name of that key's file in the data directory.
const LocalKeyFile = "export-signing.key"

// LocalKey loads the data directory's signing key, creating it (32 random
// bytes, mode 0600, fsynced) when it does not exist, for a server with no
// configured keys. Two processes starting together agree on one key: the
// file is published with a hard link, which fails if it exists. A key file
// of the wrong size is an error, never silently replaced (that would break
// every live link).
func LocalKey(dataDir string) (map[string][]byte, string, error) {
	path := filepath.Join(dataDir, LocalKeyFile)
	for range 2 {
		k, err := os.ReadFile(path)
		if err == nil {
			if len(k) != 32 {
				return nil, "", fmt.Errorf("export signing key %s: %d bytes, want 32; remove it to create a new key (live links stop working)", path, len(k))
			}
			return map[string][]byte{LocalKeyID: k}, LocalKeyID, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, "", fmt.Errorf("export signing key: %w", err)
		}
		if err := createKey(dataDir, path); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, "", fmt.Errorf("export signing key: %w", err)
		}
	}
	return nil, "", fmt.Errorf("export signing key %s: created but not readable", path)
}

func createKey(dir, path string) error {
	key := make([]byte, 32)
	rand.Read(key)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, LocalKeyFile+tmpInfix+"*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(key); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		return err
	}
	return syncDir(dir)
}
