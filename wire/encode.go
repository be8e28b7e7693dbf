package wire

import (
	"encoding/json"
	"strconv"

	"github.com/parleychat/parley"
)

// MarshalSent is MarshalFrame of Sent(s) with rid, the reply to every
// send, written without reflection. Ids and rids of printable ASCII, the
// usual ones, are written directly (they need no escape); any other goes
// through MarshalFrame, so the bytes are always MarshalFrame's
// (FuzzMarshalSent compares them).
func MarshalSent(s parley.Sent, rid json.RawMessage) []byte {
	if !plainASCII(s.Conv) || !plainASCII(s.MID) || !plainRID(rid) {
		f := Sent(s)
		f.RID = rid
		return MarshalFrame(f)
	}
	b := make([]byte, 0, 80+len(s.Conv)+len(s.MID)+len(rid))
	b = append(b, `{"t":"sent"`...)
	if len(rid) > 0 {
		b = append(b, `,"rid":`...)
		b = append(b, rid...)
	}
	if s.Conv != "" {
		b = append(b, `,"conv":"`...)
		b = append(b, s.Conv...)
		b = append(b, '"')
	}
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, s.Seq, 10)
	if s.MID != "" {
		b = append(b, `,"mid":"`...)
		b = append(b, s.MID...)
		b = append(b, '"')
	}
	b = append(b, `,"dup":`...)
	b = strconv.AppendBool(b, s.Dup)
	b = append(b, `,"epoch":`...)
	b = strconv.AppendInt(b, s.Epoch, 10)
	return append(b, '}')
}

// plainRID: rid is empty, a string of plainASCII or a number (compacted
// by encoding/json into itself).
func plainRID(rid json.RawMessage) bool {
	if len(rid) == 0 {
		return true
	}
	if rid[0] == '"' {
		return len(rid) >= 2 && rid[len(rid)-1] == '"' && plainASCII(string(rid[1:len(rid)-1]))
	}
	for _, c := range rid {
		if !('0' <= c && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E') {
			return false
		}
	}
	return true
}

// plainASCII: every byte is printable ASCII that JSON writes as itself
// inside a string (no quote, no backslash).
func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
