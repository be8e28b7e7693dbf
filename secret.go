package parley

import (
	"encoding/base64"
	"errors"
	"fmt"
)

// Secrets at rest (docs/security.md#secrets-at-rest). A store keeps three
// kinds of secret it must be able to read back: webhook secrets (the HMAC
// check needs them), the export link signing key and the Web Push (VAPID)
// private key. With Options.Secrets set, all are kept sealed (AEAD) under
// the server's secret key, so a copy of the database — a backup, a stolen
// disk, a read-only SQL account — does not hand out the means to post as a
// bot, to forge download links or to push as the server.
//
// Contract of a store opened with Options.Secrets (both stores, held by
// storetest):
//   - Open keeps a check value, a sealed fixed text, in the database. A
//     Sealer that cannot open it makes Open fail with an error that wraps
//     ErrSecretKey, before anything is served; so does a nil Sealer on a
//     database that has a check value.
//   - Open seals, in one transaction, every secret still kept in clear (a
//     database from before secrets were sealed), and seals again under the
//     current key every secret (and the check value) that only an older key
//     of the ring opens. It is idempotent, and safe when several servers
//     open one database at once.
//   - Writes seal; reads open. The raw rows hold no secret in clear.
//
// With a nil Sealer a store keeps secrets in clear (tests that do not
// concern secrets; `parley` always passes one).

// Sealer seals and opens the secrets a store keeps. Implementations are
// safe for concurrent use.
type Sealer interface {
	// Seal encrypts plain under the current key, authenticated together
	// with label, which names what the secret is for and whose it is (a
	// sealed value copied to another row or column does not open).
	Seal(plain []byte, label string) ([]byte, error)

	// Open returns the plaintext of sealed, which Seal made with label
	// under any key of the ring; current reports whether it was the
	// current key (false: an older key that still decrypts, so the value
	// should be sealed again). A value no key opens is an error.
	Open(sealed []byte, label string) (plain []byte, current bool, err error)
}

// ErrSecretKey is wrapped by the error of a store's Open when its Sealer
// does not hold the key the database's secrets were sealed with.
var ErrSecretKey = errors.New("the secret key does not open this database's secrets")

// Labels of the sealed values: the AEAD's associated data.
const (
	secretCheckLabel = "parley/secret_check"
	secretCheckText  = "parley secret key check v1"
)

// HookSecretLabel is the label of webhook id's sealed secret.
func HookSecretLabel(id string) string { return "parley/hooks.secret/" + id }

// ExportKeyLabel is the label of the sealed export signing key id.
func ExportKeyLabel(id string) string { return "parley/export_signing_keys.secret/" + id }

// NewSecretCheck returns the check value a store keeps: a fixed text sealed
// under s's current key.
func NewSecretCheck(s Sealer) ([]byte, error) {
	return s.Seal([]byte(secretCheckText), secretCheckLabel)
}

// CheckSecretKey reports whether s opens check (a NewSecretCheck value) and
// whether with its current key. The error wraps ErrSecretKey.
func CheckSecretKey(s Sealer, check []byte) (current bool, err error) {
	if s == nil {
		return false, fmt.Errorf("%w: none was given", ErrSecretKey)
	}
	plain, current, err := s.Open(check, secretCheckLabel)
	if err != nil || string(plain) != secretCheckText {
		return false, ErrSecretKey
	}
	return current, nil
}

// SealSecret returns what a store keeps for plain: sealed under s with
// label, or plain itself (sealed false) when s is nil.
func SealSecret(s Sealer, label string, plain []byte) (stored []byte, sealed bool, err error) {
	if s == nil {
		return plain, false, nil
	}
	b, err := s.Seal(plain, label)
	if err != nil {
		return nil, false, fmt.Errorf("seal %s: %w", label, err)
	}
	return b, true, nil
}

// OpenSecret returns the plaintext of a stored secret (SealSecret).
func OpenSecret(s Sealer, label string, stored []byte, sealed bool) ([]byte, error) {
	if !sealed {
		return stored, nil
	}
	if s == nil {
		return nil, fmt.Errorf("%s: %w", label, ErrSecretKey)
	}
	plain, _, err := s.Open(stored, label)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %v", label, ErrSecretKey, err)
	}
	return plain, nil
}

// ResealSecret returns the stored form a secret should have under s, and
// whether it differs from stored: a secret in clear is sealed, one sealed
// under an older key is sealed again under the current one. A sealed value
// s cannot open is an error wrapping ErrSecretKey.
func ResealSecret(s Sealer, label string, stored []byte, sealed bool) ([]byte, bool, error) {
	if sealed {
		plain, current, err := s.Open(stored, label)
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", label, ErrSecretKey)
		}
		if current {
			return stored, false, nil
		}
		stored = plain
	}
	out, _, err := SealSecret(s, label, stored)
	return out, err == nil, err
}

// SecretText and SecretBytes convert between a sealed value and the text a
// TEXT column (hooks.secret) keeps: unpadded standard base64. A secret in
// clear is kept as is.
func SecretText(stored []byte, sealed bool) string {
	if !sealed {
		return string(stored)
	}
	return base64.RawStdEncoding.EncodeToString(stored)
}

// SecretBytes is the inverse of SecretText.
func SecretBytes(text string, sealed bool) ([]byte, error) {
	if !sealed {
		return []byte(text), nil
	}
	return base64.RawStdEncoding.DecodeString(text)
}

// SealHookSecret returns what a store keeps in hooks.secret for webhook
// id's secret, and whether it is sealed.
func SealHookSecret(s Sealer, id, secret string) (string, bool, error) {
	b, sealed, err := SealSecret(s, HookSecretLabel(id), []byte(secret))
	if err != nil {
		return "", false, err
	}
	return SecretText(b, sealed), sealed, nil
}

// OpenHookSecret is the inverse of SealHookSecret.
func OpenHookSecret(s Sealer, id, stored string, sealed bool) (string, error) {
	b, err := SecretBytes(stored, sealed)
	if err != nil {
		return "", fmt.Errorf("%s: %w", HookSecretLabel(id), err)
	}
	plain, err := OpenSecret(s, HookSecretLabel(id), b, sealed)
	return string(plain), err
}

// OpenSecrets is what a store does with its secrets when it opens, given
// the check value it keeps (nil: none yet): without a key, a stored check
// value is an error (the secrets are sealed and nobody can read them);
// with one, the check value must open (ErrSecretKey otherwise), then
// reseal seals every row in clear or under an older key, and a check value
// not yet under the current key is replaced: newCheck is the value to
// store, nil when the stored one stays. Both stores run it inside the one
// transaction that reads check and writes newCheck.
func OpenSecrets(s Sealer, check []byte, reseal func() error) (newCheck []byte, err error) {
	if s == nil {
		if check != nil {
			_, err = CheckSecretKey(nil, check)
		}
		return nil, err
	}
	current := false
	if check != nil {
		if current, err = CheckSecretKey(s, check); err != nil {
			return nil, err
		}
	}
	if err := reseal(); err != nil {
		return nil, err
	}
	if current {
		return nil, nil
	}
	return NewSecretCheck(s)
}
