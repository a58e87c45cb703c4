package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docFamily is a metric family, or a set of them, as docs/metrics.md's
// tables name it in their first column.
type docFamily struct {
	name string         // as written
	re   *regexp.Regexp // the family names it stands for
}

var (
	labelBraces = regexp.MustCompile(`^(.*[a-z0-9])\{[a-z_,]+\}$`) // name{label,…}
	braceList   = regexp.MustCompile(`\{([a-z0-9_,]+)\}`)          // _{a,b}_
	placeholder = regexp.MustCompile(`<[a-z_]+>`)                  // _<file>_
	backticked  = regexp.MustCompile("`([^`]+)`")
)

// documentedFamilies parses the tables of docs/metrics.md whose first
// header cell is "metric". Their first column names families: in full
// (`fabric_rdma_port_up`), with labels (`fabric_scrape_collector_success{collector}`),
// alternatives (`fabric_rdma_port_{transmit,receive}_discards_total`), a
// placeholder (`fabric_rdma_hw_<file>_total`: one or more families), a
// glob (`go_*`), or continuing the cell's first name (`…_link_downed_total`
// after `fabric_rdma_port_…`: fabric_rdma_ and any middle part).
func documentedFamilies(t *testing.T, md string) []docFamily {
	t.Helper()
	var out []docFamily
	inTable := false
	for _, line := range strings.Split(md, "\n") {
		if !strings.HasPrefix(line, "|") {
			inTable = false
			continue
		}
		cells := strings.Split(line, "|")
		first := strings.TrimSpace(cells[1])
		if first == "metric" {
			inTable = true
			continue
		}
		if !inTable || strings.HasPrefix(first, "---") {
			continue
		}
		prefix := ""
		for _, m := range backticked.FindAllStringSubmatch(first, -1) {
			name := m[1]
			if l := labelBraces.FindStringSubmatch(name); l != nil {
				name = l[1]
			}
			var expr string
			if rest, ok := strings.CutPrefix(name, "…"); ok {
				if prefix == "" {
					t.Fatalf("docs/metrics.md: %s continues no name: %s", m[1], line)
				}
				expr = regexp.QuoteMeta(prefix) + "(_[a-z0-9_]+)?" + familyExpr(rest)
			} else {
				if !regexp.MustCompile(`^(fabric|go|process|promhttp)_`).MatchString(name) {
					t.Fatalf("docs/metrics.md: %q in a metric column is no family name: %s", m[1], line)
				}
				if prefix == "" {
					p := strings.SplitN(name, "_", 3)
					prefix = p[0] + "_" + p[1]
				}
				expr = familyExpr(name)
			}
			out = append(out, docFamily{name: m[1], re: regexp.MustCompile("^" + expr + "$")})
		}
	}
	if len(out) < 150 {
		t.Fatalf("docs/metrics.md: only %d families found in its metric tables: the parser is broken", len(out))
	}
	return out
}

// familyExpr turns a documented name into a regular expression.
func familyExpr(name string) string {
	var b strings.Builder
	for len(name) > 0 {
		switch {
		case braceList.MatchString(name) && braceList.FindStringIndex(name)[0] == 0:
			m := braceList.FindStringSubmatch(name)
			b.WriteString("(" + strings.ReplaceAll(m[1], ",", "|") + ")")
			name = name[len(m[0]):]
		case placeholder.MatchString(name) && placeholder.FindStringIndex(name)[0] == 0:
			b.WriteString("[a-z0-9_]+")
			name = name[len(placeholder.FindString(name)):]
		case name[0] == '*':
			b.WriteString("[a-z0-9_]*")
			name = name[1:]
		default:
			b.WriteString(regexp.QuoteMeta(name[:1]))
			name = name[1:]
		}
	}
	return b.String()
}

func (d docFamily) matchesAny(families []string) bool {
	return slices.ContainsFunc(families, d.re.MatchString)
}

// fabricName is a family name in docs/metrics.md's text: not part of a
// recording rule's name (name:fabric_…:op), not a prefix (fabric_x_*,
// fabric_x_{a,b}, fabric_x_<file>).
var fabricName = regexp.MustCompile(`(^|[^:a-zA-Z0-9_])(fabric_[a-z0-9_]*[a-z0-9])([^:a-z0-9_*<{]|$)`)

// TestMetricsDocNamesDocumented: every family docs/metrics.md names, in
// its text, PromQL and tables alike, is one its metric tables document (a
// name in passing must not send a reader after a metric that does not
// exist, as `fabric_rail_up` did).
func TestMetricsDocNamesDocumented(t *testing.T) {
	md, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	docs := documentedFamilies(t, string(md))
	seen := map[string]bool{}
	for i, line := range strings.Split(string(md), "\n") {
		for _, m := range fabricName.FindAllStringSubmatch(line, -1) {
			name := m[2]
			if seen[name] || name == "fabric_exporter" || name == "fabric_analyze" {
				continue
			}
			seen[name] = true
			if !slices.ContainsFunc(docs, func(d docFamily) bool { return d.re.MatchString(name) }) {
				t.Errorf("docs/metrics.md:%d names %s, which no metric table documents", i+1, name)
			}
		}
	}
	if len(seen) < 150 {
		t.Errorf("only %d names found in docs/metrics.md: the pattern is broken", len(seen))
	}
}
