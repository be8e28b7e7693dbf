package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestMeter: a log gets one line per tenth of a step (not one per call,
// never a carriage return), a terminal a bar redrawn in place, --quiet
// nothing.
func TestMeter(t *testing.T) {
	steps := func(m *meter) {
		for done := int64(0); done <= 40; done++ {
			m.show("export", done/4, 10, "shards")
		}
		m.end()
		for _, n := range []int64{100, 150, 999, 1000} {
			m.show("download", n, 1000, "bytes")
		}
		m.end()
	}
	for _, tc := range []struct {
		name  string
		style meterStyle
		want  string
	}{
		{"log", meterLines, "export: 0/10 shards (0%)\nexport: 1/10 shards (10%)\nexport: 2/10 shards (20%)\n" +
			"export: 3/10 shards (30%)\nexport: 4/10 shards (40%)\nexport: 5/10 shards (50%)\nexport: 6/10 shards (60%)\n" +
			"export: 7/10 shards (70%)\nexport: 8/10 shards (80%)\nexport: 9/10 shards (90%)\nexport: 10/10 shards (100%)\n" +
			"download: 100/1000 bytes (10%)\ndownload: 999/1000 bytes (99%)\ndownload: 1000/1000 bytes (100%)\n"},
		{"quiet", meterQuiet, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			m := &meter{w: &b, style: tc.style, tenth: -1}
			steps(m)
			if b.String() != tc.want {
				t.Errorf("wrote\n%q\nwant\n%q", b.String(), tc.want)
			}
		})
	}
	t.Run("terminal", func(t *testing.T) {
		var b bytes.Buffer
		m := &meter{w: &b, style: meterBar}
		m.show("download", 500, 1000, "bytes")
		m.show("download", 1000, 1000, "bytes")
		m.end()
		m.end() // nothing open: no second newline
		want := "\rdownload [===============               ]  50% 500/1000 bytes" +
			"\rdownload [==============================] 100% 1000/1000 bytes\n"
		if b.String() != want {
			t.Errorf("wrote\n%q\nwant\n%q", b.String(), want)
		}
	})
}

// TestNewMeter: the style follows where stderr goes.
func TestNewMeter(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, tc := range []struct {
		name  string
		m     *meter
		style meterStyle
	}{
		{"a file", newMeter(f, false), meterLines},
		{"a buffer", newMeter(&bytes.Buffer{}, false), meterLines},
		{"quiet", newMeter(f, true), meterQuiet},
	} {
		if tc.m.style != tc.style {
			t.Errorf("%s: style %d, want %d", tc.name, tc.m.style, tc.style)
		}
	}
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		defer tty.Close()
		if m := newMeter(tty, false); m.style != meterBar {
			t.Errorf("a terminal: style %d, want a bar", m.style)
		}
	}
}
