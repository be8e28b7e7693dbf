package thumb

import (
	"image"
	"image/color"
)

// scale shrinks the canvas of img to tw × th (no larger than the canvas)
// by area averaging: every output pixel is the mean of the source area it
// covers, source pixels on a boundary shared by weight. It reads img one
// row at a time and keeps only a row and the output's accumulators, so its
// memory is that of the thumbnail, not of the image. The mean is taken of
// premultiplied colour, so transparent pixels do not darken their
// neighbours, and the result is composited on white: a JPEG has no alpha.
// (The mean is of gamma-encoded values, as most thumbnailers take it.)
func scale(img image.Image, canvas image.Rectangle, tw, th int) *image.RGBA {
	w, h := canvas.Dx(), canvas.Dy()
	xs, ys := spans(w, tw), spans(h, th)
	acc := make([]float32, 4*tw*th)
	row := make([]float32, 4*w)
	hrow := make([]float32, 4*tw)
	var pal *[256][4]float32
	if m, ok := img.(*image.Paletted); ok {
		pal = palette(m.Palette)
	}
	for y := range h {
		readRow(img, pal, y, row)
		clear(hrow)
		for x, s := range xs {
			p := row[4*x : 4*x+4 : 4*x+4]
			o := hrow[4*s.i : 4*s.i+4 : 4*s.i+4]
			o[0] += p[0] * s.f
			o[1] += p[1] * s.f
			o[2] += p[2] * s.f
			o[3] += p[3] * s.f
			if s.f < 1 {
				o = hrow[4*s.i+4 : 4*s.i+8 : 4*s.i+8]
				g := 1 - s.f
				o[0] += p[0] * g
				o[1] += p[1] * g
				o[2] += p[2] * g
				o[3] += p[3] * g
			}
		}
		s := ys[y]
		addRow(acc[4*tw*s.i:4*tw*(s.i+1)], hrow, s.f)
		if s.f < 1 {
			addRow(acc[4*tw*(s.i+1):4*tw*(s.i+2)], hrow, 1-s.f)
		}
	}
	out := image.NewRGBA(image.Rect(0, 0, tw, th))
	norm := float32(float64(tw) * float64(th) / (float64(w) * float64(h)))
	for i := 0; i < len(acc); i += 4 {
		a := acc[i+3] * norm
		for c := range 3 {
			// Premultiplied colour over white: c + (1 − α)·255.
			out.Pix[i+c] = clamp8(acc[i+c]*norm + 255 - a)
		}
		out.Pix[i+3] = 255
	}
	return out
}

func addRow(dst, src []float32, f float32) {
	for i := range src {
		dst[i] += src[i] * f
	}
}

func clamp8(v float32) uint8 {
	switch {
	case v <= 0:
		return 0
	case v >= 255:
		return 255
	}
	return uint8(v + 0.5)
}

// span says where one source pixel falls in the output: f of it in output
// pixel i, the rest (when f < 1) in i+1.
type span struct {
	i int
	f float32
}

// spans maps each of n source pixels onto m ≤ n output pixels: pixel x
// covers [x·m, (x+1)·m) in units of 1/n output pixel, which crosses at
// most one output boundary since m ≤ n.
func spans(n, m int) []span {
	out := make([]span, n)
	for x := range out {
		lo, hi := int64(x)*int64(m), int64(x+1)*int64(m)
		i := lo / int64(n)
		in := min(hi, (i+1)*int64(n)) - lo
		out[x] = span{i: int(i), f: float32(in) / float32(m)}
	}
	return out
}

// readRow writes row y of img's canvas into row as premultiplied RGBA,
// 0–255, four floats a pixel; pixels outside img's bounds are transparent.
// pal is a paletted image's palette, premultiplied.
func readRow(img image.Image, pal *[256][4]float32, y int, row []float32) {
	b := img.Bounds()
	if y < b.Min.Y || y >= b.Max.Y {
		clear(row)
		return
	}
	if b.Min.X > 0 || 4*b.Max.X < len(row) {
		clear(row)
	}
	switch m := img.(type) {
	case *image.YCbCr:
		yp := m.Y[m.YOffset(b.Min.X, y):]
		c0, shift := m.COffset(b.Min.X, y), chromaShift(m.SubsampleRatio)
		for x := b.Min.X; x < b.Max.X; x++ {
			ci := c0 + x>>shift - b.Min.X>>shift
			if shift < 0 {
				ci = m.COffset(x, y)
			}
			r, g, bl := color.YCbCrToRGB(yp[x-b.Min.X], m.Cb[ci], m.Cr[ci])
			put(row, x, r, g, bl, 255)
		}
	case *image.NYCbCrA:
		for x := b.Min.X; x < b.Max.X; x++ {
			ci := m.COffset(x, y)
			r, g, bl := color.YCbCrToRGB(m.Y[m.YOffset(x, y)], m.Cb[ci], m.Cr[ci])
			putN(row, x, r, g, bl, m.A[m.AOffset(x, y)])
		}
	case *image.RGBA:
		p := m.Pix[m.PixOffset(b.Min.X, y):]
		for x := b.Min.X; x < b.Max.X; x, p = x+1, p[4:] {
			put(row, x, p[0], p[1], p[2], p[3])
		}
	case *image.NRGBA:
		p := m.Pix[m.PixOffset(b.Min.X, y):]
		for x := b.Min.X; x < b.Max.X; x, p = x+1, p[4:] {
			putN(row, x, p[0], p[1], p[2], p[3])
		}
	case *image.Gray:
		p := m.Pix[m.PixOffset(b.Min.X, y):]
		for x := b.Min.X; x < b.Max.X; x++ {
			put(row, x, p[x-b.Min.X], p[x-b.Min.X], p[x-b.Min.X], 255)
		}
	case *image.Paletted:
		p := m.Pix[m.PixOffset(b.Min.X, y):]
		for x := b.Min.X; x < b.Max.X; x++ {
			copy(row[4*x:4*x+4], pal[p[x-b.Min.X]][:])
		}
	case *image.CMYK:
		p := m.Pix[m.PixOffset(b.Min.X, y):]
		for x := b.Min.X; x < b.Max.X; x, p = x+1, p[4:] {
			r, g, bl := color.CMYKToRGB(p[0], p[1], p[2], p[3])
			put(row, x, r, g, bl, 255)
		}
	case *image.Gray16:
		p := m.Pix[m.PixOffset(b.Min.X, y):]
		for x := b.Min.X; x < b.Max.X; x, p = x+1, p[2:] {
			put(row, x, p[0], p[0], p[0], 255) // the high byte
		}
	case *image.NRGBA64:
		p := m.Pix[m.PixOffset(b.Min.X, y):]
		for x := b.Min.X; x < b.Max.X; x, p = x+1, p[8:] {
			putN(row, x, p[0], p[2], p[4], p[6])
		}
	case *image.RGBA64:
		p := m.Pix[m.PixOffset(b.Min.X, y):]
		for x := b.Min.X; x < b.Max.X; x, p = x+1, p[8:] {
			put(row, x, p[0], p[2], p[4], p[6])
		}
	default: // other models (none of our decoders returns one): slower, as correct
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, a := img.At(x, y).RGBA()
			row[4*x], row[4*x+1], row[4*x+2], row[4*x+3] = float32(r)/257, float32(g)/257, float32(bl)/257, float32(a)/257
		}
	}
}

// chromaShift is how far a column (never negative: the image lies in its
// canvas) is shifted right to find its chroma sample in a row of the
// ratio, as COffset does; -1 for a ratio left to COffset.
func chromaShift(r image.YCbCrSubsampleRatio) int {
	switch r {
	case image.YCbCrSubsampleRatio444, image.YCbCrSubsampleRatio440:
		return 0
	case image.YCbCrSubsampleRatio422, image.YCbCrSubsampleRatio420:
		return 1
	case image.YCbCrSubsampleRatio411, image.YCbCrSubsampleRatio410:
		return 2
	}
	return -1
}

// put writes a premultiplied pixel.
func put(row []float32, x int, r, g, b, a uint8) {
	row[4*x], row[4*x+1], row[4*x+2], row[4*x+3] = float32(r), float32(g), float32(b), float32(a)
}

// putN writes a non-premultiplied pixel, premultiplying it.
func putN(row []float32, x int, r, g, b, a uint8) {
	f := float32(a) / 255
	row[4*x], row[4*x+1], row[4*x+2], row[4*x+3] = float32(r)*f, float32(g)*f, float32(b)*f, float32(a)
}

// palette is p premultiplied, 256 entries: an index past p's end (which
// the decoders refuse, but a palette may be short) is transparent.
func palette(p color.Palette) *[256][4]float32 {
	var out [256][4]float32
	for i, c := range p[:min(len(p), 256)] {
		r, g, b, a := c.RGBA()
		out[i] = [4]float32{float32(r) / 257, float32(g) / 257, float32(b) / 257, float32(a) / 257}
	}
	return &out
}

// orient turns m upright by its EXIF orientation o: 2 mirrored, 3 turned
// 180°, 4 flipped, 5 transposed, 6 turned 90° clockwise to show, 7
// transversed, 8 turned 90° anticlockwise to show; 1 (or anything else)
// as it is.
func orient(m *image.RGBA, o int) *image.RGBA {
	if o < 2 || o > 8 {
		return m
	}
	w, h := m.Rect.Dx(), m.Rect.Dy()
	dw, dh := w, h
	if o >= 5 {
		dw, dh = h, w
	}
	out := image.NewRGBA(image.Rect(0, 0, dw, dh))
	for y := range h {
		for x := range w {
			var dx, dy int
			switch o {
			case 2:
				dx, dy = w-1-x, y
			case 3:
				dx, dy = w-1-x, h-1-y
			case 4:
				dx, dy = x, h-1-y
			case 5:
				dx, dy = y, x
			case 6:
				dx, dy = h-1-y, x
			case 7:
				dx, dy = h-1-y, w-1-x
			case 8:
				dx, dy = y, w-1-x
			}
			copy(out.Pix[out.PixOffset(dx, dy):][:4], m.Pix[m.PixOffset(x, y):][:4])
		}
	}
	return out
}
