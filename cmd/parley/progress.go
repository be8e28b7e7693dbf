package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// meter shows the progress of a command's steps on stderr in the form the
// reader can use: on a terminal a bar redrawn in place; in a log or a pipe
// one line when a step starts, at every tenth of it and when it is done
// (a redrawn bar would be one endless line there); nothing with --quiet.
type meter struct {
	w     io.Writer
	style meterStyle
	step  string // the step shown last
	tenth int64  // lines: the last tenth printed of step; -1 none yet
	open  bool   // bar: a bar is drawn and its line not ended
}

type meterStyle int

const (
	meterLines meterStyle = iota
	meterBar
	meterQuiet
)

// newMeter picks the style for w: a bar when w is a terminal.
func newMeter(w io.Writer, quiet bool) *meter {
	m := &meter{w: w, style: meterLines, tenth: -1}
	switch {
	case quiet:
		m.style = meterQuiet
	case isTerminalFile(w):
		m.style = meterBar
	}
	return m
}

// isTerminalFile reports whether w is a character device (a terminal).
func isTerminalFile(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// show reports done of total units of step.
func (m *meter) show(step string, done, total int64, unit string) {
	pct := int64(0)
	if total > 0 {
		pct = min(done*100/total, 100)
	}
	switch m.style {
	case meterBar:
		const width = 30
		fill := int(pct) * width / 100
		fmt.Fprintf(m.w, "\r%-8s [%s%s] %3d%% %d/%d %s", step, strings.Repeat("=", fill), strings.Repeat(" ", width-fill), pct, done, total, unit)
		m.open = true
	case meterLines:
		tenth := pct / 10
		if step == m.step && tenth == m.tenth {
			return
		}
		fmt.Fprintf(m.w, "%s: %d/%d %s (%d%%)\n", step, done, total, unit, pct)
		m.tenth = tenth
	}
	m.step = step
}

// end finishes the current step's bar line, so what follows starts on a
// line of its own.
func (m *meter) end() {
	if m.open {
		fmt.Fprintln(m.w)
		m.open = false
	}
}
