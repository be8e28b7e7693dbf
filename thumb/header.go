package thumb

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/color"
	_ "image/gif" // registers the decoders image.Decode uses
	_ "image/jpeg"
	_ "image/png"
	"io"

	_ "golang.org/x/image/webp"
)

// header is what Make learns before decoding.
type header struct {
	format        string
	width, height int
	need          int64 // bytes the decode is estimated to allocate
	orientation   int   // EXIF orientation, 1–8
}

// readHeader reads src's header from its start: the format and the pixel
// size (image.DecodeConfig, which reads no pixel data), the refusal above
// MaxPixels, then the few header fields the estimate of the decode's
// memory needs. need is the decoder's alone; Make adds its own (overhead).
func readHeader(src io.ReadSeeker) (header, error) {
	var h header
	size, err := src.Seek(0, io.SeekEnd)
	if err == nil {
		_, err = src.Seek(0, io.SeekStart)
	}
	if err != nil {
		return h, fmt.Errorf("thumb: %w", err)
	}
	br := bufio.NewReaderSize(src, 4096)
	var lead [32]byte
	peek, _ := br.Peek(len(lead))
	copy(lead[:], peek)
	cfg, format, err := image.DecodeConfig(br)
	switch {
	case errors.Is(err, image.ErrFormat):
		return h, ErrFormat
	case err != nil:
		return h, fmt.Errorf("thumb: reading the image header: %w", err)
	}
	h.format, h.width, h.height, h.orientation = format, cfg.Width, cfg.Height, 1
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return h, fmt.Errorf("thumb: the %s image declares %d×%d pixels", format, cfg.Width, cfg.Height)
	}
	// Each side alone first, so the product cannot overflow.
	if cfg.Width > MaxPixels || cfg.Height > MaxPixels || int64(cfg.Width)*int64(cfg.Height) > MaxPixels {
		return h, ErrTooManyPixels
	}
	w, ht := int64(cfg.Width), int64(cfg.Height)
	switch format {
	case "jpeg":
		if _, err := src.Seek(0, io.SeekStart); err != nil {
			return h, fmt.Errorf("thumb: %w", err)
		}
		j, err := scanJPEG(bufio.NewReaderSize(src, 4096))
		if err != nil {
			return h, fmt.Errorf("thumb: reading the jpeg header: %w", err)
		}
		h.need, h.orientation = j.need(w, ht), j.orientation
	case "png":
		h.need = pngNeed(cfg.ColorModel, lead[28] != 0, w, ht)
	case "gif":
		// The first frame, at most the canvas, and its copy when
		// interlaced.
		h.need = 2 * w * ht
	case "webp":
		h.need = webpNeed(lead, w, ht) + size
	default:
		// A format some other package registered: not ours to decode.
		return h, ErrFormat
	}
	return h, nil
}

// overhead is what a thumbnail of a w × h image into box allocates
// besides the decoder's pixels: the decoders' tables and buffers (a
// mebibyte covers them), the scaler's rows (16 bytes a source column, twice
// over) and accumulators (16 bytes a thumbnail pixel), the thumbnail and
// its turned copy (4 bytes a pixel each), and the encoder's buffers.
func overhead(w, h, box int) int64 {
	tw, th := fit(w, h, box)
	return 1<<20 + 32*int64(w) + 32*int64(tw)*int64(th)
}

// pngNeed is what image/png allocates: the image, at the bytes per pixel
// of its colour type (a transparent colour, which the config does not
// show, turns grey and RGB into NRGBA), twice when interlaced (each pass
// is an image of its own before it is merged).
func pngNeed(m color.Model, interlaced bool, w, h int64) int64 {
	var bpp int64
	switch m {
	case color.GrayModel, color.RGBAModel, color.NRGBAModel:
		bpp = 4
	case color.Gray16Model, color.RGBA64Model, color.NRGBA64Model:
		bpp = 8
	default: // a palette
		bpp = 1
	}
	n := bpp * w * h
	if interlaced {
		n *= 2
	}
	return n
}

// webpNeed is what x/image/webp allocates, by the first chunk: a lossy
// image (VP8) is YCbCr 4:2:0 in whole macroblocks; a lossless one (VP8L)
// is NRGBA, and a colour-indexing transform allocates it again; an
// extended one (VP8X) may hold either, and with alpha a lossy image whose
// alpha plane may be lossless-coded. The compressed data a lossy decoder
// reads into memory is added by the caller (the file's size).
func webpNeed(lead [32]byte, w, h int64) int64 {
	yuv := (w + 15) / 16 * 16 * ((h + 15) / 16 * 16) * 3 / 2
	lossless := 8 * w * h
	switch string(lead[12:16]) {
	case "VP8 ":
		return yuv
	case "VP8X":
		const alphaBit = 1 << 4
		if lead[20]&alphaBit != 0 {
			return max(lossless, yuv+lossless+w*h)
		}
	}
	return max(lossless, yuv)
}

// jpegHeader is what a JPEG's markers before its first scan say.
type jpegHeader struct {
	progressive bool
	comps       []jpegComp
	jfif        bool // an APP0 JFIF segment: the components are YCbCr
	adobe       bool // an APP14 Adobe segment, with its transform
	transform   byte
	orientation int
}

type jpegComp struct{ id, h, v byte }

// need is what image/jpeg allocates: the planes of the components in
// whole MCUs (64 bytes a block); a progressive image keeps every block's
// coefficients too (64 int32, 256 bytes a block); an RGB or CMYK image
// is converted to a 4-byte-per-pixel image at the end.
func (j jpegHeader) need(w, h int64) int64 {
	h0, v0 := int64(j.comps[0].h), int64(j.comps[0].v)
	if len(j.comps) == 1 {
		h0, v0 = 1, 1
	}
	mxx, myy := (w+8*h0-1)/(8*h0), (h+8*v0-1)/(8*v0)
	var blocks int64
	for _, c := range j.comps {
		ch, cv := int64(c.h), int64(c.v)
		if len(j.comps) == 1 {
			ch, cv = 1, 1
		}
		blocks += mxx * myy * ch * cv
	}
	n := 64 * blocks
	if j.progressive {
		n += 256 * blocks
	}
	rgb := len(j.comps) == 3 && !j.jfif &&
		(j.adobe && j.transform == 0 || j.comps[0].id == 'R' && j.comps[1].id == 'G' && j.comps[2].id == 'B')
	if len(j.comps) == 4 || rgb {
		n += 4 * w * h
	}
	return n
}

// scanJPEG walks a JPEG's markers up to its first scan (SOS), skipping
// every segment's body but those it reads: APP0 (JFIF), APP1 (Exif, for
// the orientation), APP14 (Adobe) and the frame header (SOFn). At most
// one segment (64 KiB) is held at a time.
func scanJPEG(r *bufio.Reader) (jpegHeader, error) {
	j := jpegHeader{orientation: 1}
	var soi [2]byte
	if _, err := io.ReadFull(r, soi[:]); err != nil || soi != [2]byte{0xff, 0xd8} {
		return j, errors.New("missing SOI marker")
	}
	buf := make([]byte, 0, 1<<16)
	for {
		m, err := nextMarker(r)
		if err != nil {
			return j, err
		}
		if m == 0x01 || 0xd0 <= m && m <= 0xd8 { // markers without a segment
			continue
		}
		if m == 0xd9 {
			return j, errors.New("EOI before the first scan")
		}
		var l [2]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return j, err
		}
		n := int(binary.BigEndian.Uint16(l[:])) - 2
		if n < 0 {
			return j, errors.New("bad segment length")
		}
		switch {
		case m == 0xda: // SOS: the header is over
			if j.comps == nil {
				return j, errors.New("no SOF before the first scan")
			}
			return j, nil
		case m == 0xe0 || m == 0xe1 || m == 0xee || isSOF(m):
			buf = buf[:n]
			if _, err := io.ReadFull(r, buf); err != nil {
				return j, err
			}
			if err := j.segment(m, buf); err != nil {
				return j, err
			}
		default:
			if _, err := r.Discard(n); err != nil {
				return j, err
			}
		}
	}
}

// nextMarker reads the next marker, skipping fill bytes.
func nextMarker(r *bufio.Reader) (byte, error) {
	b, err := r.ReadByte()
	if err != nil {
		return 0, err
	}
	if b != 0xff {
		return 0, errors.New("expected a marker")
	}
	for b == 0xff {
		if b, err = r.ReadByte(); err != nil {
			return 0, err
		}
	}
	return b, nil
}

// isSOF reports whether m is a start-of-frame marker (C0–CF but DHT C4,
// JPG C8 and DAC CC).
func isSOF(m byte) bool { return 0xc0 <= m && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc }

// segment records what one read segment says.
func (j *jpegHeader) segment(m byte, b []byte) error {
	switch {
	case m == 0xe0:
		j.jfif = j.jfif || len(b) >= 5 && string(b[:5]) == "JFIF\x00"
	case m == 0xe1:
		if j.orientation == 1 && len(b) >= 6 && string(b[:6]) == "Exif\x00\x00" {
			j.orientation = exifOrientation(b[6:])
		}
	case m == 0xee:
		if len(b) >= 12 && string(b[:5]) == "Adobe" {
			j.adobe, j.transform = true, b[11]
		}
	default: // SOFn
		if j.comps != nil {
			return errors.New("two SOF markers")
		}
		if len(b) < 6 {
			return errors.New("short SOF")
		}
		n := int(b[5])
		if n != 1 && n != 3 && n != 4 || len(b) < 6+3*n {
			return errors.New("unsupported number of components")
		}
		for i := range n {
			c := b[6+3*i:]
			h, v := c[1]>>4, c[1]&0x0f
			if h < 1 || h > 4 || v < 1 || v > 4 {
				return errors.New("bad sampling factors")
			}
			j.comps = append(j.comps, jpegComp{id: c[0], h: h, v: v})
		}
		// SOF2, SOF6, SOF10, SOF14 are the progressive ones.
		j.progressive = m&0x03 == 0x02
	}
	return nil
}

// exifOrientation finds the Orientation tag (0x0112) in IFD0 of the TIFF
// structure t an Exif segment holds; 1 when absent or malformed.
func exifOrientation(t []byte) int {
	if len(t) < 8 {
		return 1
	}
	var bo binary.ByteOrder
	switch string(t[:4]) {
	case "II*\x00":
		bo = binary.LittleEndian
	case "MM\x00*":
		bo = binary.BigEndian
	default:
		return 1
	}
	off := int64(bo.Uint32(t[4:8]))
	if off+2 > int64(len(t)) {
		return 1
	}
	entries := t[off+2:]
	for i := range int(bo.Uint16(t[off:])) {
		if 12*(i+1) > len(entries) {
			break
		}
		e := entries[12*i:]
		if bo.Uint16(e) != 0x0112 || bo.Uint16(e[2:]) != 3 { // Orientation, SHORT
			continue
		}
		if o := int(bo.Uint16(e[8:])); 1 <= o && o <= 8 {
			return o
		}
		break
	}
	return 1
}
