// Package password hashes and checks account passwords (argon2id) for
// the stores.
package password

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"strings"
	"sync"

	"golang.org/x/crypto/argon2"

	"github.com/parleychat/parley"
)

// Password hashes are argon2id in the PHC string format, so parameters can
// change without breaking stored hashes.
const (
	argonTime    = 2
	argonMemory  = 19 * 1024 // KiB: the OWASP minimum for argon2id
	argonThreads = 1
	argonKeyLen  = 32
)

// Hash returns an argon2id hash of password in PHC format. It is slow on
// purpose: call it outside any transaction.
func Hash(password string) string {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		panic("password: crypto/rand failed: " + err.Error())
	}
	key := argon2.IDKey([]byte(password), salt, argonTime, argonMemory, argonThreads, argonKeyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemory, argonTime, argonThreads,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key))
}

// Check reports whether password matches hash (from Hash), in constant
// time. An empty or malformed hash never matches, and still
// costs one hash computation, so an unknown login takes as long as a wrong
// password: stores pass "" for a login that names nobody.
func Check(hash, password string) bool {
	if !check(hash, password) {
		if !strings.HasPrefix(hash, "$argon2id$") {
			check(dummyHash(), password)
		}
		return false
	}
	return true
}

var dummyHash = sync.OnceValue(func() string { return Hash("parley-dummy-password") })

func check(hash, password string) bool {
	var version int
	var m uint32
	var t uint32
	var p uint8
	parts := strings.Split(hash, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return false
	}
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return false
	}
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &m, &t, &p); err != nil || m == 0 || m > 1<<20 || t == 0 || t > 16 || p == 0 {
		return false
	}
	salt, err := base64.RawStdEncoding.DecodeString(parts[4])
	if err != nil {
		return false
	}
	want, err := base64.RawStdEncoding.DecodeString(parts[5])
	if err != nil || len(want) == 0 || len(want) > 128 {
		return false
	}
	got := argon2.IDKey([]byte(password), salt, t, m, p, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1
}

// CheckLogin decides a login once the store has looked the user up: found
// reports whether the login named anybody. Unknown login, wrong password
// and disabled account get one answer, at the cost of one hash each.
func CheckLogin(found bool, hash string, disabled bool, password string) error {
	if !found {
		hash = ""
	}
	if !Check(hash, password) || !found || disabled {
		return parley.ErrBadLogin
	}
	return nil
}
