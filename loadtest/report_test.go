package loadtest

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"
)

// The plot is well-formed SVG with one curve per figure, and the summary
// names the first violations.
func TestReportOutputs(t *testing.T) {
	rep := &Report{
		Devices: 2, Mode: "open", TargetRate: 10, Conversations: map[string]int{"direct": 1},
		Violations:     []Violation{{Kind: VLog, Device: "ana/d0", Conv: "g", Detail: "missing seq 4"}},
		ViolationCount: 1,
		samples:        map[string][]float64{"send → sent": {1, 2, 3, 250}, "commit → push (direct)": {0.5, 4, 9}, "empty": nil},
	}
	var svg bytes.Buffer
	if err := rep.SVG(&svg); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(&svg)
	lines := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("plot is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			lines++
		}
	}
	if lines != 2 {
		t.Fatalf("%d curves, want 2", lines)
	}
	var text strings.Builder
	rep.Text(&text)
	if !strings.Contains(text.String(), "FAIL: 1 violation") || !strings.Contains(text.String(), "missing seq 4") {
		t.Fatalf("summary:\n%s", text.String())
	}
}
