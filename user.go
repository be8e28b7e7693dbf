package parley

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"time"
)

// Role is a user's role: admin may use the operations API.
type Role string

const (
	RoleUser  Role = "user"
	RoleAdmin Role = "admin"
)

// User is an account. ID is canonical: [a-z0-9][a-z0-9._-]{0,31}.
type User struct {
	ID        string
	Email     string // lower case; empty when none
	Role      Role
	Disabled  bool
	CreatedAt time.Time
	// DisplayName is the name the user chose (Store.SetDisplayName);
	// empty when none is set, and clients then show the ID.
	DisplayName string
}

// NewUser is the input of Store.CreateUser. An empty Password creates an
// account that cannot log in (a bot that posts through webhooks).
type NewUser struct {
	ID       string
	Email    string
	Password string
	Role     Role
}

// LoginRequest is the input of Store.Login.
type LoginRequest struct {
	Login     string // any form the identity resolver accepts
	Password  string
	DeviceID  string
	InstallID string
}

// Session is what a successful login returns. Token is shown once; the
// store keeps only its hash.
type Session struct {
	Principal
	Token string
	// Replaced is true when this login replaced another install of the
	// device (whose tokens now answer STALE_INSTALL): only then must the
	// gateways re-check the user's sockets. A device's first login and a
	// login with the device's current install replace nothing.
	Replaced bool
}

// MinPasswordChars is the shortest password an account may be given
// (Unicode code points); logging in with an older, shorter one still works.
const MinPasswordChars = 8

// Device ids and install ids are opaque client strings of 1–64 characters.
const MaxDeviceIDChars = 64

// Login kinds returned by ResolveLogin.
const (
	LoginByID    = "id"
	LoginByEmail = "email"
)

// ResolveLogin is the identity resolver: the only place that turns a login
// as typed ("ana", "Ana", " Ana@Example.COM ") into the key a store looks up.
// It returns the kind (LoginByID or LoginByEmail) and the canonical value: a
// user id in lower case, or an email in lower case. Anything else is
// INVALID_ARGUMENT.
func ResolveLogin(login string) (kind, value string, err error) {
	s := strings.ToLower(strings.TrimSpace(login))
	if at := strings.IndexByte(s, '@'); at >= 0 {
		if !validEmail(s) {
			return "", "", Errorf(CodeInvalidArgument, "login %q is not a valid email address", truncate(login, 80))
		}
		return LoginByEmail, s, nil
	}
	if !ValidUserID(s) {
		return "", "", Errorf(CodeInvalidArgument, "login %q is not a valid user id or email", truncate(login, 80))
	}
	return LoginByID, s, nil
}

// ValidUserID reports whether id is a canonical user id:
// [a-z0-9][a-z0-9._-]{0,31}.
func ValidUserID(id string) bool {
	if len(id) < 1 || len(id) > 32 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// validEmail accepts a lower-case address with one '@', a non-empty local
// part, a dotted domain, no spaces or control characters, at most 254 bytes.
func validEmail(s string) bool {
	if len(s) > 254 {
		return false
	}
	at := strings.IndexByte(s, '@')
	if at <= 0 || at != strings.LastIndexByte(s, '@') {
		return false
	}
	domain := s[at+1:]
	if len(domain) < 3 || !strings.Contains(domain, ".") || strings.HasPrefix(domain, ".") || strings.HasSuffix(domain, ".") || strings.Contains(domain, "..") {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f || r == '"' || r == '<' || r == '>' || r == ',' || r == ';' {
			return false
		}
	}
	return true
}

// ValidateNewUser checks a NewUser and returns it normalised (email lower
// case, role defaulted to user).
func ValidateNewUser(u NewUser) (NewUser, error) {
	if !ValidUserID(u.ID) {
		return u, Errorf(CodeInvalidArgument, "user id %q must match [a-z0-9][a-z0-9._-]{0,31}", truncate(u.ID, 80))
	}
	if u.Email != "" {
		e := strings.ToLower(strings.TrimSpace(u.Email))
		if !validEmail(e) {
			return u, Errorf(CodeInvalidArgument, "email %q is not a valid address", truncate(u.Email, 80))
		}
		u.Email = e
	}
	switch u.Role {
	case "":
		u.Role = RoleUser
	case RoleUser, RoleAdmin:
	default:
		return u, Errorf(CodeInvalidArgument, "role must be user or admin")
	}
	if len(u.Password) > 1024 {
		return u, Errorf(CodeInvalidArgument, "password longer than 1024 bytes")
	}
	if err := ValidateNewPassword(u.Password); u.Password != "" && err != nil {
		return u, err
	}
	return u, nil
}

// ValidateNewPassword checks a password about to be set: at least
// MinPasswordChars characters of valid UTF-8, at most 1024 bytes. Every
// path that sets a password calls it (through ValidateNewUser for
// accounts); violations are INVALID_ARGUMENT.
func ValidateNewPassword(pw string) error {
	if len(pw) > 1024 {
		return Errorf(CodeInvalidArgument, "password longer than 1024 bytes")
	}
	if n := charCount(pw); n < MinPasswordChars {
		return Errorf(CodeInvalidArgument, "password must be at least %d characters of valid UTF-8 without NUL", MinPasswordChars)
	}
	return nil
}

// ValidateLogin checks the shape of a login request before any storage work.
func ValidateLogin(r LoginRequest) error {
	if r.Password == "" || len(r.Password) > 1024 {
		return Errorf(CodeInvalidArgument, "password must be 1–1024 bytes")
	}
	if err := validOpaque("device_id", r.DeviceID); err != nil {
		return err
	}
	return validOpaque("install_id", r.InstallID)
}

func validOpaque(field, v string) error {
	if n := charCount(v); n < 1 || n > MaxDeviceIDChars {
		return Errorf(CodeInvalidArgument, "%s must be 1–%d characters of valid UTF-8 without NUL", field, MaxDeviceIDChars)
	}
	return nil
}

// NewToken returns a fresh device token (32 random bytes, base64url) and the
// hash the store keeps in its place.
func NewToken() (token string, hash []byte) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("parley: crypto/rand failed: " + err.Error())
	}
	token = base64.RawURLEncoding.EncodeToString(b)
	return token, HashToken(token)
}

// HashToken returns the stored form of a token: sha256 of its text. Tokens
// carry 256 bits of entropy, so a fast hash is enough.
func HashToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// truncate shortens s for an error message, keeping valid UTF-8.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

// CheckTokenShape refuses a token no store could have issued, before any
// lookup.
func CheckTokenShape(token string) error {
	if token == "" || len(token) > 256 {
		return ErrBadToken
	}
	return nil
}

// Token lifetime defaults (Options): a token unused for 30 days stops
// working; an install replaced by a new login keeps answering STALE_INSTALL
// for 7 days so its client learns to drop its local state.
const (
	DefaultTokenIdle         = 30 * 24 * time.Hour
	DefaultTokenRefresh      = time.Hour
	DefaultStaleInstallGrace = 7 * 24 * time.Hour
	// DefaultTokenMax is the absolute lifetime of a token: however busy,
	// a token this old stops working and its device logs in again.
	DefaultTokenMax = 90 * 24 * time.Hour
)

// tokenDefaults fills the token lifetime fields of o. The refresh interval
// is at most half the idle lifetime, so a token in use never expires
// between two refreshes.
func (o Options) tokenDefaults() Options {
	if o.TokenIdle <= 0 {
		o.TokenIdle = DefaultTokenIdle
	}
	if o.TokenRefresh <= 0 {
		o.TokenRefresh = DefaultTokenRefresh
	}
	o.TokenRefresh = min(o.TokenRefresh, o.TokenIdle/2)
	if o.StaleInstallGrace <= 0 {
		o.StaleInstallGrace = DefaultStaleInstallGrace
	}
	if o.TokenMax <= 0 {
		o.TokenMax = DefaultTokenMax
	}
	return o
}

// TokenRecord is what a store read for a token: the principal it was issued
// to (Role from the user), whether that user is disabled, the device's
// current install ("" when the device row is gone), and the token's ages by
// the database clock.
type TokenRecord struct {
	Principal
	Disabled      bool
	DeviceInstall string
	Idle          time.Duration // since the token's last refresh
	Age           time.Duration // since the token was issued (its login)
	Replaced      bool          // a login replaced the token's install
	ReplacedFor   time.Duration // since that login (Replaced only)
}

// TokenAction is what a store must write after CheckToken.
type TokenAction int

const (
	TokenKeep    TokenAction = iota // nothing
	TokenRefresh                    // refresh the token's last use
	TokenDelete                     // delete the token: it is past its lifetime
)

// CheckToken decides a token lookup under the lifetime of o (with its
// defaults applied): an unknown token, a disabled user, a token idle
// longer than TokenIdle or older than TokenMax, and a replaced install's token past
// StaleInstallGrace are UNAUTHENTICATED (the last two to be deleted); a
// token of an install its device replaced is STALE_INSTALL; a valid token
// last refreshed TokenRefresh ago or more is to be refreshed.
func (o Options) CheckToken(found bool, r TokenRecord) (Principal, TokenAction, error) {
	o = o.tokenDefaults()
	switch {
	case !found:
		return Principal{}, TokenKeep, ErrBadToken
	case r.Idle > o.TokenIdle, r.Age > o.TokenMax, r.Replaced && r.ReplacedFor > o.StaleInstallGrace:
		return Principal{}, TokenDelete, ErrBadToken
	case r.Disabled:
		return Principal{}, TokenKeep, ErrBadToken
	case r.Replaced, r.DeviceInstall != r.InstallID:
		return Principal{}, TokenKeep, ErrStaleInstall
	case r.Idle >= o.TokenRefresh:
		return r.Principal, TokenRefresh, nil
	}
	return r.Principal, TokenKeep, nil
}

// CheckSweep validates the limit of Store.SweepTokens.
func CheckSweep(limit int) error {
	if limit < 1 {
		return Errorf(CodeInvalidArgument, "sweep limit must be at least 1")
	}
	return nil
}

// CheckSetPassword validates the arguments of Store.SetPassword: a
// canonical user id and a password ValidateNewPassword accepts.
func CheckSetPassword(id, password string) error {
	if !ValidUserID(id) {
		return Errorf(CodeInvalidArgument, "user id %q is not valid", truncate(id, 80))
	}
	return ValidateNewPassword(password)
}
