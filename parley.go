// Package parley is a self-hosted chat server's domain: users and their
// devices, conversations with membership periods, the immutable event log of
// each conversation, and the contracts (Store and Bus) that adapters
// implement.
//
// Its promise: a message is never lost, never doubled, never shown to someone
// who may not see it, and every client can always tell what happened to its
// request. The pieces that keep it are here: request keys with fingerprints
// (Send, Recall), membership periods (Periods), forward-only cursors, retention
// tombstones, and one table of error codes (Codes) that says which outcomes are
// final.
//
// Adapters live in their own packages: sqlite and postgres implement Store and
// are held to one behaviour suite, storetest.
package parley

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"time"
)

// Input bounds (docs/design.md#input-bounds): INVALID_ARGUMENT, decided before
// any storage work.
const (
	MaxCMIDChars   = 64    // request key length, in characters
	MaxBodyChars   = 4000  // message body length, in Unicode code points
	MaxPage        = 200   // sync page size cap
	DefaultPage    = 50    // sync page size when the request names none
	MaxConvsPage   = 200   // convs page size cap
	DefaultConvs   = 100   // convs page size when the request names none
	MaxConvIDChars = 64    // conversation id length
	MaxTitleChars  = 200   // conversation title length
	UnreadCap      = 1000  // unread is exact up to this, then capped
	MaxFrameBytes  = 65536 // largest WebSocket frame (the gateway enforces it)
)

// Defaults of the store's policies.
const (
	DefaultRecallWindow = 10 * time.Minute
	DefaultTombstoneTTL = 90 * 24 * time.Hour
)

// Principal is an authenticated device: who is asking, from which device and
// install. Store methods that act for a client take one; it comes from
// Store.Authenticate.
type Principal struct {
	User      string
	Role      Role
	DeviceID  string
	InstallID string
}

// NewID returns a new server id: a UUIDv7 in text form, so ids sort by
// creation time and index well.
func NewID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("parley: crypto/rand failed: " + err.Error())
	}
	ms := uint64(time.Now().UnixMilli())
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], ms)
	copy(b[0:6], ts[2:8])
	b[6] = b[6]&0x0f | 0x70 // version 7
	b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:36], b[10:16])
	return string(s[:])
}
