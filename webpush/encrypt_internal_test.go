package webpush

import (
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os"
	"testing"
)

type rfcVector struct {
	Plaintext                                string
	ASPrivate, ASPublic, UAPrivate, UAPublic string
	Salt, Auth, Body                         string
}

func loadVector(t *testing.T) rfcVector {
	t.Helper()
	raw, err := os.ReadFile("testdata/rfc8291.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Plaintext string `json:"plaintext"`
		ASPrivate string `json:"as_private"`
		ASPublic  string `json:"as_public"`
		UAPrivate string `json:"ua_private"`
		UAPublic  string `json:"ua_public"`
		Salt      string `json:"salt"`
		Auth      string `json:"auth"`
		Body      string `json:"body"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return rfcVector{v.Plaintext, v.ASPrivate, v.ASPublic, v.UAPrivate, v.UAPublic, v.Salt, v.Auth, v.Body}
}

func b64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return b
}

// TestEncryptRFC8291 holds encrypt to the RFC's example: the same keys and
// salt give the same body, byte for byte, and the user agent's key opens it.
func TestEncryptRFC8291(t *testing.T) {
	v := loadVector(t)
	as, err := ecdh.P256().NewPrivateKey(b64(t, v.ASPrivate))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(as.PublicKey().Bytes(), b64(t, v.ASPublic)) {
		t.Fatal("the sender's public key differs from the example's")
	}
	got, err := encrypt([]byte(v.Plaintext), b64(t, v.UAPublic), b64(t, v.Auth), as, b64(t, v.Salt))
	if err != nil {
		t.Fatal(err)
	}
	if want := b64(t, v.Body); !bytes.Equal(got, want) {
		t.Errorf("encrypt:\n got %s\nwant %s", base64.RawURLEncoding.EncodeToString(got), v.Body)
	}
	ua, err := ecdh.P256().NewPrivateKey(b64(t, v.UAPrivate))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := Decrypt(b64(t, v.Body), ua, b64(t, v.Auth))
	if err != nil || string(plain) != v.Plaintext {
		t.Errorf("Decrypt of the example = %q, %v; want %q", plain, err, v.Plaintext)
	}
}

// TestEncryptRoundTrip encrypts with fresh keys and decrypts as a browser
// would; a wrong auth secret or key, or a changed byte, does not open.
func TestEncryptRoundTrip(t *testing.T) {
	ua, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	auth := make([]byte, 16)
	rand.Read(auth)
	other, _ := ecdh.P256().GenerateKey(rand.Reader)
	for _, plain := range [][]byte{[]byte(`{"conv":"c-team","seq":42}`), {}, bytes.Repeat([]byte("x"), MaxPayload)} {
		body, err := Encrypt(plain, ua.PublicKey().Bytes(), auth)
		if err != nil {
			t.Fatal(err)
		}
		if len(body) > headerLen+RecordSize {
			t.Errorf("body of %d bytes is more than one record", len(body))
		}
		got, err := Decrypt(body, ua, auth)
		if err != nil || !bytes.Equal(got, plain) {
			t.Errorf("round trip of %d bytes: %d bytes, %v", len(plain), len(got), err)
		}
		if _, err := Decrypt(body, other, auth); err == nil {
			t.Error("another key decrypted the message")
		}
		wrong := bytes.Clone(auth)
		wrong[0] ^= 1
		if _, err := Decrypt(body, ua, wrong); err == nil {
			t.Error("another auth secret decrypted the message")
		}
		flipped := bytes.Clone(body)
		flipped[len(flipped)-1] ^= 1
		if _, err := Decrypt(flipped, ua, auth); err == nil {
			t.Error("a changed byte decrypted")
		}
	}
	if _, err := Encrypt(make([]byte, MaxPayload+1), ua.PublicKey().Bytes(), auth); err == nil {
		t.Error("a payload over one record was encrypted")
	}
	if _, err := Encrypt(nil, ua.PublicKey().Bytes(), auth[:15]); err == nil {
		t.Error("a 15-byte auth secret was accepted")
	}
	if _, err := Encrypt(nil, make([]byte, 65), auth); err == nil {
		t.Error("a point off the curve was accepted")
	}
}
