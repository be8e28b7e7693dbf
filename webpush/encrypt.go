// Package webpush sends Web Push notifications: the payload encrypted as
// RFC 8291 says (aes128gcm, RFC 8188), the request signed with a VAPID
// key (RFC 8292), delivered to the push service as RFC 8030 says, over
// connections that refuse internal addresses (an endpoint is a URL a
// client chose). Worker turns committed messages into pushes.
package webpush

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// Bounds of the aes128gcm encoding as Parley uses it: one record of
// RecordSize bytes, so a payload is at most MaxPayload bytes.
const (
	RecordSize = 4096
	headerLen  = 16 + 4 + 1 + 65 // salt, rs, idlen, keyid (the sender's public key)
	tagLen     = 16
	// MaxPayload is the largest plaintext one record holds: the record
	// minus the tag and the padding delimiter.
	MaxPayload = RecordSize - tagLen - 1
	authLen    = 16
)

// Encrypt encrypts plain for a subscription whose keys are p256dh (the
// user agent's uncompressed P-256 public key, 65 bytes) and auth (16
// bytes), with a fresh sender key and salt. The result is the request
// body, Content-Encoding aes128gcm.
func Encrypt(plain, p256dh, auth []byte) ([]byte, error) {
	as, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	salt := make([]byte, 16)
	rand.Read(salt)
	return encrypt(plain, p256dh, auth, as, salt)
}

// encrypt is Encrypt with the sender's key and the salt given (the RFC's
// example fixes both).
func encrypt(plain, p256dh, auth []byte, as *ecdh.PrivateKey, salt []byte) ([]byte, error) {
	if len(plain) > MaxPayload {
		return nil, fmt.Errorf("webpush: payload of %d bytes over %d", len(plain), MaxPayload)
	}
	ua, err := ecdh.P256().NewPublicKey(p256dh)
	if err != nil {
		return nil, fmt.Errorf("webpush: p256dh: %w", err)
	}
	if len(auth) != authLen {
		return nil, fmt.Errorf("webpush: auth secret of %d bytes, want %d", len(auth), authLen)
	}
	secret, err := as.ECDH(ua)
	if err != nil {
		return nil, err
	}
	aead, nonce, err := contentKey(secret, auth, ua.Bytes(), as.PublicKey().Bytes(), salt)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, headerLen+len(plain)+1+tagLen)
	out = append(out, salt...)
	out = binary.BigEndian.AppendUint32(out, RecordSize)
	out = append(out, 65)
	out = append(out, as.PublicKey().Bytes()...)
	record := append(append([]byte{}, plain...), 0x02) // the last (only) record's delimiter, no padding
	return aead.Seal(out, nonce, record, nil), nil
}

// contentKey derives the AES-128-GCM key and nonce (RFC 8291 §3.3-3.4).
func contentKey(secret, auth, uaPublic, asPublic, salt []byte) (cipher.AEAD, []byte, error) {
	keyInfo := append(append([]byte("WebPush: info\x00"), uaPublic...), asPublic...)
	ikm, err := hkdf.Key(sha256.New, secret, auth, string(keyInfo), 32)
	if err != nil {
		return nil, nil, err
	}
	prk, err := hkdf.Extract(sha256.New, ikm, salt)
	if err != nil {
		return nil, nil, err
	}
	cek, err := hkdf.Expand(sha256.New, prk, "Content-Encoding: aes128gcm\x00", 16)
	if err != nil {
		return nil, nil, err
	}
	nonce, err := hkdf.Expand(sha256.New, prk, "Content-Encoding: nonce\x00", 12)
	if err != nil {
		return nil, nil, err
	}
	block, err := aes.NewCipher(cek)
	if err != nil {
		return nil, nil, err
	}
	aead, err := cipher.NewGCM(block)
	return aead, nonce, err
}

// ErrDecrypt is every failure of Decrypt.
var ErrDecrypt = errors.New("webpush: the message does not decrypt")

// Decrypt is what a user agent does with a push message: it opens body
// (one or more aes128gcm records) with its private key ua and its auth
// secret, and returns the plaintext with the padding removed. Tests use it
// as the receiving end.
func Decrypt(body []byte, ua *ecdh.PrivateKey, auth []byte) ([]byte, error) {
	if len(body) < 21 {
		return nil, ErrDecrypt
	}
	salt, rs, idLen := body[:16], binary.BigEndian.Uint32(body[16:20]), int(body[20])
	if rs < 18 || len(body) < 21+idLen || idLen != 65 {
		return nil, ErrDecrypt
	}
	as, err := ecdh.P256().NewPublicKey(body[21 : 21+idLen])
	if err != nil {
		return nil, ErrDecrypt
	}
	secret, err := ua.ECDH(as)
	if err != nil {
		return nil, ErrDecrypt
	}
	aead, nonce, err := contentKey(secret, auth, ua.PublicKey().Bytes(), as.Bytes(), salt)
	if err != nil {
		return nil, ErrDecrypt
	}
	return openRecords(aead, nonce, body[21+idLen:], int(rs))
}

// openRecords opens the records of an aes128gcm body: every record but
// the last ends in 0x01, the last in 0x02, then zero padding.
func openRecords(aead cipher.AEAD, nonce, data []byte, rs int) ([]byte, error) {
	var out []byte
	for seq := uint64(0); ; seq++ {
		n := min(rs, len(data))
		if n <= tagLen {
			return nil, ErrDecrypt
		}
		iv := bytes.Clone(nonce)
		x := binary.BigEndian.Uint64(iv[4:]) ^ seq
		binary.BigEndian.PutUint64(iv[4:], x)
		rec, err := aead.Open(nil, iv, data[:n], nil)
		if err != nil {
			return nil, ErrDecrypt
		}
		data = data[n:]
		rec = bytes.TrimRight(rec, "\x00")
		if len(rec) == 0 {
			return nil, ErrDecrypt
		}
		last := len(data) == 0
		switch d := rec[len(rec)-1]; {
		case d == 0x02 && last, d == 0x01 && !last:
			out = append(out, rec[:len(rec)-1]...)
		default:
			return nil, ErrDecrypt
		}
		if last {
			return out, nil
		}
	}
}
