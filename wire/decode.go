package wire

// decodeFast parses the common shape of a request frame without
// encoding/json's reflection: one JSON object whose keys are spelled
// exactly as Request's, each at most once, whose strings have no \u escape
// and whose numbers are integers of at most 18 digits (rid: a string
// without escapes or such an integer). Anything else — a null, a key in
// another case, an unknown key, a duplicate, a fraction, an error of any
// kind — makes it answer false, and encoding/json decides the frame, so
// the two decoders never differ (FuzzDecodeFast compares them). The frame
// must have passed CheckText (valid UTF-8).
//
// The strings of the request share one copy of the frame, and the rid is
// a copy of its own, as encoding/json's RawMessage is.
func decodeFast(b []byte, r *Request) bool {
	d := fastDecoder{b: b}
	if !d.tok('{') {
		return false
	}
	var seen uint16
	var nums *[7]int64 // one allocation for the integers of a frame
	if d.tok('}') {
		return d.end()
	}
	for {
		d.ws()
		key, ok := d.plainString()
		if !ok || !d.tok(':') {
			return false
		}
		d.ws()
		bit := uint16(0)
		switch string(key) {
		case "t":
			bit = 1 << 0
			r.T, ok = d.str()
		case "rid":
			bit = 1 << 1
			r.RID, ok = d.rid()
		case "conv":
			bit = 1 << 2
			r.Conv, ok = d.str()
		case "cmid":
			bit = 1 << 3
			r.CMID, ok = d.str()
		case "body":
			bit = 1 << 4
			r.Body, ok = d.str()
		case "before":
			bit = 1 << 5
			r.Before, ok = d.str()
		case "state":
			bit = 1 << 13
			r.State, ok = d.str()
		case "after", "limit", "epoch", "seq", "target", "reply_to", "thread":
			if nums == nil {
				nums = new([7]int64)
			}
			bit, ok = d.number(string(key), r, nums)
		}
		if !ok || bit == 0 || seen&bit != 0 {
			return false
		}
		seen |= bit
		if !d.tok(',') {
			return d.eat('}') && d.end()
		}
	}
}

// number reads the integer value of key into r, in its slot of nums, and
// returns key's bit of the seen set.
func (d *fastDecoder) number(key string, r *Request, nums *[7]int64) (uint16, bool) {
	n, ok := d.int()
	if !ok {
		return 0, false
	}
	switch key {
	case "after":
		nums[0] = n
		r.After = &nums[0]
		return 1 << 6, true
	case "limit":
		l := int(n)
		r.Limit = &l
		return 1 << 7, true
	case "epoch":
		nums[2] = n
		r.Epoch = &nums[2]
		return 1 << 8, true
	case "seq":
		nums[3] = n
		r.Seq = &nums[3]
		return 1 << 9, true
	case "target":
		nums[4] = n
		r.Target = &nums[4]
		return 1 << 10, true
	case "reply_to": // a reply is a send: keep it on the fast path
		nums[5] = n
		r.ReplyTo = &nums[5]
		return 1 << 11, true
	case "thread":
		nums[6] = n
		r.Thread = &nums[6]
		return 1 << 12, true
	}
	return 0, false
}

type fastDecoder struct {
	b    []byte
	i    int
	copy string // the frame as a string, made at the first string value
}

// ws skips JSON whitespace.
func (d *fastDecoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *fastDecoder) eat(c byte) bool {
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// tok skips whitespace and eats c if it comes next.
func (d *fastDecoder) tok(c byte) bool {
	d.ws()
	return d.eat(c)
}

// end: nothing but whitespace follows the object.
func (d *fastDecoder) end() bool {
	d.ws()
	return d.i == len(d.b)
}

// plainString reads a string without escapes or control characters and
// returns its bytes (within the frame), quotes excluded.
func (d *fastDecoder) plainString() ([]byte, bool) {
	if !d.eat('"') {
		return nil, false
	}
	start := d.i
	for ; d.i < len(d.b); d.i++ {
		switch c := d.b[d.i]; {
		case c == '"':
			s := d.b[start:d.i]
			d.i++
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// str reads a string value; escapes other than \u are decoded.
func (d *fastDecoder) str() (string, bool) {
	if !d.eat('"') {
		return "", false
	}
	start := d.i
	for ; d.i < len(d.b); d.i++ {
		switch c := d.b[d.i]; {
		case c == '"':
			if d.copy == "" {
				d.copy = string(d.b)
			}
			s := d.copy[start:d.i]
			d.i++
			return s, true
		case c == '\\':
			return d.escaped(start)
		case c < 0x20:
			return "", false
		}
	}
	return "", false
}

// escaped finishes a string that has an escape at d.i, begun at start.
func (d *fastDecoder) escaped(start int) (string, bool) {
	out := make([]byte, 0, len(d.b)-start)
	out = append(out, d.b[start:d.i]...)
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			return string(out), true
		case c < 0x20:
			return "", false
		case c != '\\':
			out = append(out, c)
			d.i++
			continue
		}
		if d.i+1 >= len(d.b) {
			return "", false
		}
		switch d.b[d.i+1] {
		case '"', '\\', '/':
			out = append(out, d.b[d.i+1])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		default: // \u (surrogate pairs, U+FFFD for bad ones: encoding/json's business) or invalid
			return "", false
		}
		d.i += 2
	}
	return "", false
}

// rid reads a rid: a string without escapes or an integer, copied.
func (d *fastDecoder) rid() ([]byte, bool) {
	start := d.i
	if d.i < len(d.b) && d.b[d.i] == '"' {
		if _, ok := d.plainString(); !ok {
			return nil, false
		}
	} else if _, ok := d.int(); !ok {
		return nil, false
	}
	return append([]byte(nil), d.b[start:d.i]...), true
}

// int reads an integer: -?(0|[1-9][0-9]*), at most 18 digits, not followed
// by a fraction or an exponent (those go to encoding/json, which refuses
// them for an integer field with its own message).
func (d *fastDecoder) int() (int64, bool) {
	neg := d.eat('-')
	start := d.i
	var n int64
	for d.i < len(d.b) && '0' <= d.b[d.i] && d.b[d.i] <= '9' {
		n = n*10 + int64(d.b[d.i]-'0')
		d.i++
	}
	digits := d.i - start
	if digits == 0 || digits > 18 || digits > 1 && d.b[start] == '0' {
		return 0, false
	}
	if d.i < len(d.b) {
		switch d.b[d.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	if neg {
		n = -n
	}
	return n, true
}
