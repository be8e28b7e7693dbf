package webpush

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"strings"
	"time"
)

// VAPID (RFC 8292): every push request carries a JWT signed with the
// server's P-256 key, whose public half the browser was given as
// applicationServerKey when it subscribed; the push service accepts only
// requests signed by that key.

// MaxTokenLifetime bounds a VAPID token's exp (RFC 8292 §2: at most 24
// hours). Tokens are made for 12 hours.
const (
	MaxTokenLifetime = 24 * time.Hour
	tokenLifetime    = 12 * time.Hour
)

// DefaultSubject is the sub claim when none is configured: a contact the
// push service may use. Operators set their own (--push-subject).
const DefaultSubject = "mailto:postmaster@localhost"

// Key is a VAPID key pair.
type Key struct {
	priv   *ecdsa.PrivateKey
	public []byte // uncompressed point, 65 bytes
}

// ParseKey returns the key pair of a raw P-256 private scalar (32 bytes,
// as the store keeps it).
func ParseKey(private []byte) (*Key, error) {
	k, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), private)
	if err != nil {
		return nil, fmt.Errorf("webpush: vapid key: %w", err)
	}
	pub, err := k.PublicKey.Bytes()
	if err != nil {
		return nil, fmt.Errorf("webpush: vapid key: %w", err)
	}
	return &Key{priv: k, public: pub}, nil
}

// Public returns the public key as the browser's applicationServerKey
// takes it: the uncompressed point, unpadded base64url.
func (k *Key) Public() string { return base64.RawURLEncoding.EncodeToString(k.public) }

// Authorization returns the Authorization header value of a push request
// to endpoint: "vapid t=<JWT>, k=<public key>", the token's aud the
// endpoint's origin, exp now + 12 h, sub subject (DefaultSubject when
// empty).
func (k *Key) Authorization(endpoint *url.URL, subject string, now time.Time) (string, error) {
	if subject == "" {
		subject = DefaultSubject
	}
	claims, err := json.Marshal(struct {
		Aud string `json:"aud"`
		Exp int64  `json:"exp"`
		Sub string `json:"sub"`
	}{Origin(endpoint), now.Add(tokenLifetime).Unix(), subject})
	if err != nil {
		return "", err
	}
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString([]byte(`{"typ":"JWT","alg":"ES256"}`)) + "." + enc.EncodeToString(claims)
	sum := sha256.Sum256([]byte(signing))
	r, s, err := ecdsa.Sign(rand.Reader, k.priv, sum[:])
	if err != nil {
		return "", err
	}
	sig := make([]byte, 64) // JWS ES256: r and s as 32 bytes each
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return "vapid t=" + signing + "." + enc.EncodeToString(sig) + ", k=" + k.Public(), nil
}

// Origin is the ASCII serialisation of an endpoint's origin: scheme and
// host, the port only when it is not the scheme's default.
func Origin(u *url.URL) string {
	host := strings.ToLower(u.Hostname())
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	port := u.Port()
	if (u.Scheme == "https" && port == "443") || (u.Scheme == "http" && port == "80") {
		port = ""
	}
	if port != "" {
		host += ":" + port
	}
	return strings.ToLower(u.Scheme) + "://" + host
}

// VerifyAuthorization checks a VAPID Authorization header as a push
// service does: the token is signed by the key it names, its aud is
// origin, and it expires in the future but within MaxTokenLifetime of now.
// It returns the public key (base64url) and the sub claim. Tests use it as
// the receiving end.
func VerifyAuthorization(header, origin string, now time.Time) (key, subject string, err error) {
	rest, ok := strings.CutPrefix(header, "vapid ")
	if !ok {
		return "", "", errors.New("not a vapid authorization")
	}
	var tok string
	for _, part := range strings.Split(rest, ",") {
		name, val, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch name {
		case "t":
			tok = val
		case "k":
			key = val
		}
	}
	pubRaw, err := base64.RawURLEncoding.DecodeString(key)
	if err != nil {
		return "", "", errors.New("k is not base64url")
	}
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), pubRaw)
	if err != nil {
		return "", "", fmt.Errorf("k: %w", err)
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "", "", errors.New("t is not a JWT")
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(sig) != 64 {
		return "", "", errors.New("the signature is not 64 bytes of base64url")
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if !ecdsa.Verify(pub, sum[:], newInt(sig[:32]), newInt(sig[32:])) {
		return "", "", errors.New("the signature does not verify")
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", "", errors.New("the claims are not base64url")
	}
	var c struct {
		Aud string `json:"aud"`
		Exp int64  `json:"exp"`
		Sub string `json:"sub"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return "", "", errors.New("the claims are not JSON")
	}
	exp := time.Unix(c.Exp, 0)
	switch {
	case c.Aud != origin:
		return "", "", fmt.Errorf("aud %q, want %q", c.Aud, origin)
	case !exp.After(now) || exp.After(now.Add(MaxTokenLifetime)):
		return "", "", fmt.Errorf("exp %v is not within 24 h of %v", exp, now)
	case !strings.HasPrefix(c.Sub, "mailto:") && !strings.HasPrefix(c.Sub, "https:"):
		return "", "", fmt.Errorf("sub %q is neither a mailto: nor an https: URI", c.Sub)
	}
	return key, c.Sub, nil
}

func newInt(b []byte) *big.Int { return new(big.Int).SetBytes(b) }
