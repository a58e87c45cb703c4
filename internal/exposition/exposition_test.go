package exposition

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func TestWriteTextEscaping(t *testing.T) {
	r := NewRegistry()
	f := r.NewFamily("fabric_test_escape_info", "Help with a \\ backslash\nand a newline.", prometheus.GaugeValue, "z", "a")
	var b Batch
	b.AddWith(f, 1, "quote\" back\\ nl\n", "bad utf8 \xff")
	b.AddWith(f, math.Inf(1), "x", "y")
	var buf bytes.Buffer
	if err := r.WriteText(&buf, []*Batch{&b}); err != nil {
		t.Fatal(err)
	}
	want := `# HELP fabric_test_escape_info Help with a \\ backslash\nand a newline.
# TYPE fabric_test_escape_info gauge
fabric_test_escape_info{a="bad utf8 ` + "\uFFFD" + `",z="quote\" back\\ nl\n"} 1
fabric_test_escape_info{a="y",z="x"} +Inf
`
	if buf.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", buf.String(), want)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	if _, err := parser.TextToMetricFamilies(&buf); err != nil {
		t.Errorf("output does not parse: %v", err)
	}
}

// Label values are bounded, on a UTF-8 boundary.
func TestLabelValueBound(t *testing.T) {
	f := NewRegistry().NewFamily("fabric_test_bound_info", "h", prometheus.GaugeValue, "v")
	long := strings.Repeat("é", 300) // 600 bytes
	s := f.With(long)
	if len(s.values[0]) > maxLabelValue || !utf8.ValidString(s.values[0]) || !strings.HasPrefix(long, s.values[0]) {
		t.Errorf("bounded value: %d bytes, valid %v", len(s.values[0]), utf8.ValidString(s.values[0]))
	}
}
