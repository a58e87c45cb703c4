package main

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// helpFlag is a flag as the binary's --help prints it.
type helpFlag struct {
	name   string // without "--" and "[no-]"
	bool   bool   // printed as --[no-]name: kingpin prints no default
	def    string // the default, when hasDef
	hasDef bool
}

// A flag line of kingpin's --help: "  -h, --[no-]help", "      --path.sysfs="/sys"",
// "      --rail=NAME=DEVICE[:PORT] ...", the value up to two spaces or the
// line's end (descriptions are indented further, and wrapped).
var helpLine = regexp.MustCompile(`^(?:  -[a-zA-Z], |      )--(\[no-\])?([a-z][a-z0-9._-]*)(?:=(.*?))?(?: \.\.\.)?(?:  |$)`)

// placeholderValue is what kingpin prints in place of a default: an
// explicit placeholder (NAME=DEVICE[:PORT], DIR, GLOB) or the upper-cased
// flag name; a default (:10470, 40, 30s, auto) does not start with an
// upper-case letter or has a lower-case one.
var placeholderValue = regexp.MustCompile(`^[A-Z][^a-z]*$`)

// helpFlags runs the built binary with --help and parses its flags. The
// value kingpin prints after '=' is the default, quoted for string flags
// (unquoted here); a placeholder instead (an explicit one such as
// NAME=DEVICE[:PORT] or DIR, or the upper-cased name where there is no
// default, see placeholderValue) is no default; a flag printed with
// "" has the empty default, which counts as none.
func helpFlags(t *testing.T) []helpFlag {
	t.Helper()
	out, code := runBinary(t, "--help")
	if code != 0 {
		t.Fatalf("--help: exit %d\n%s", code, out)
	}
	// The application's flags; a command's own flags are in "help COMMAND".
	_, out, ok := strings.Cut(out, "\nFlags:\n")
	if !ok {
		t.Fatalf("--help has no Flags: section")
	}
	out, _, _ = strings.Cut(out, "\nCommands:\n")
	var flags []helpFlag
	for _, l := range strings.Split(out, "\n") {
		m := helpLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		f := helpFlag{name: m[2], bool: m[1] != ""}
		v := m[3]
		switch {
		case strings.HasPrefix(v, `"`):
			u, err := strconv.Unquote(v)
			if err != nil {
				t.Fatalf("--help: %s: %v", l, err)
			}
			f.def, f.hasDef = u, u != ""
		case v != "" && !placeholderValue.MatchString(v):
			f.def, f.hasDef = v, true
		}
		flags = append(flags, f)
	}
	if len(flags) < 50 {
		t.Fatalf("--help: only %d flags parsed:\n%s", len(flags), out)
	}
	return flags
}

// docFlagRow is a row of a configuration.md flag table.
type docFlagRow struct {
	line     int
	flags    []string // as written, normalized: no "--", "[no-]", "no-", placeholder
	defaults []string // the default cell's code spans
}

var docFlagName = regexp.MustCompile(`^--(?:\[no-\]|no-)?([a-z<][a-z0-9.<>_-]*)`)

// docFlagTables parses the tables of docs/configuration.md whose first
// header cell is "flag".
func docFlagTables(t *testing.T, md string) []docFlagRow {
	t.Helper()
	var rows []docFlagRow
	inTable := false
	for i, line := range strings.Split(md, "\n") {
		if !strings.HasPrefix(line, "|") {
			inTable = false
			continue
		}
		cells := splitRow(line)
		if strings.TrimSpace(cells[0]) == "flag" {
			inTable = true
			continue
		}
		if !inTable || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") {
			continue
		}
		r := docFlagRow{line: i + 1}
		for _, m := range backticked.FindAllStringSubmatch(cells[0], -1) {
			n := docFlagName.FindStringSubmatch(m[1])
			if n == nil {
				t.Errorf("docs/configuration.md:%d: %q in the flag column is no flag", i+1, m[1])
				continue
			}
			r.flags = append(r.flags, n[1])
		}
		for _, m := range backticked.FindAllStringSubmatch(cells[1], -1) {
			r.defaults = append(r.defaults, m[1])
		}
		rows = append(rows, r)
	}
	if len(rows) < 30 {
		t.Fatalf("docs/configuration.md: only %d flag rows", len(rows))
	}
	return rows
}

// splitRow splits a Markdown table row into its cells; "\|" is a pipe in
// a cell.
func splitRow(line string) []string {
	line = strings.Trim(strings.TrimSpace(line), "|")
	cells := strings.Split(strings.ReplaceAll(line, `\|`, "\x00"), "|")
	for i := range cells {
		cells[i] = strings.ReplaceAll(cells[i], "\x00", "|")
	}
	return cells
}

// docFlagMatches reports whether a documented flag names the help flag:
// the same name, or `--collector.<name>` for every collector's own
// --[no-]collector.NAME.
func docFlagMatches(doc string, f helpFlag) bool {
	if doc == "collector.<name>" {
		return f.bool && regexp.MustCompile(`^collector\.[a-z-]+$`).MatchString(f.name) && f.name != "collector.disable-defaults"
	}
	return doc == f.name
}

// sameDefault compares a documented default with --help's: durations as
// durations (`1m` is `60s`, `0` is `0s`), anything else as written.
func sameDefault(doc, help string) bool {
	if doc == help {
		return true
	}
	hd, err := time.ParseDuration(help)
	if err != nil {
		return false
	}
	if doc == "0" {
		return hd == 0
	}
	dd, err := time.ParseDuration(doc)
	return err == nil && dd == hd
}

// TestConfigurationMatchesHelp holds docs/configuration.md's flag tables to
// the binary's --help:
//   - every flag of --help is in a table (a collector's --[no-]collector.NAME
//     by the `--collector.<name>` row), and every flag of a table is in
//     --help;
//   - defaults: a row's default cell gives, as code spans in order, the
//     default of each of its flags that --help prints one for (not a
//     bool: kingpin prints no default for those, so "on"/"off" are
//     words; not a placeholder; not ""), as many as there are such flags
//     and each equal to it (durations compared as durations, `\|` in a
//     cell is a pipe); a flag without one has none, the cell says in
//     words what happens then;
//   - every other `--x.y` the document names is a flag of --help.
func TestConfigurationMatchesHelp(t *testing.T) {
	flags := helpFlags(t)
	raw, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	md := string(raw)
	rows := docFlagTables(t, md)
	documented := map[string]bool{}
	for _, r := range rows {
		var withDef []helpFlag
		for _, d := range r.flags {
			i := slices.IndexFunc(flags, func(f helpFlag) bool { return docFlagMatches(d, f) })
			if i < 0 {
				t.Errorf("docs/configuration.md:%d: --%s is not a flag of --help", r.line, d)
				continue
			}
			for _, f := range flags {
				if docFlagMatches(d, f) {
					documented[f.name] = true
					if f.hasDef && !f.bool {
						withDef = append(withDef, f)
					}
				}
			}
		}
		if len(withDef) != len(r.defaults) {
			var want []string
			for _, f := range withDef {
				want = append(want, "--"+f.name+"="+strconv.Quote(f.def))
			}
			t.Errorf("docs/configuration.md:%d: default cell has %d values %q; --help has defaults %v", r.line, len(r.defaults), r.defaults, want)
			continue
		}
		for i, f := range withDef {
			if !sameDefault(r.defaults[i], f.def) {
				t.Errorf("docs/configuration.md:%d: --%s default %q, --help says %q", r.line, f.name, r.defaults[i], f.def)
			}
		}
	}
	for _, f := range flags {
		if !documented[f.name] {
			t.Errorf("--%s (--help) is in no flag table of docs/configuration.md", f.name)
		}
	}
	// Flags named in the text: a name with a dot (the exporter's), or
	// --rail; --help, --version. Docker's and kubectl's flags have no dot.
	inFixture := false
	for i, line := range strings.Split(md, "\n") {
		// The fixture-only table: hidden flags, not in --help by design.
		if cells := splitRow(line); strings.HasPrefix(line, "|") && strings.TrimSpace(cells[0]) == "fixture flag" {
			inFixture = true
		}
		if !strings.HasPrefix(line, "|") {
			inFixture = false
		}
		if inFixture {
			for _, m := range backticked.FindAllStringSubmatch(splitRow(line)[0], -1) {
				if n := docFlagName.FindStringSubmatch(m[1]); n != nil && slices.ContainsFunc(flags, func(f helpFlag) bool { return f.name == n[1] }) {
					t.Errorf("docs/configuration.md:%d: the fixture-only --%s is in --help", i+1, n[1])
				}
			}
			continue
		}
		for _, m := range backticked.FindAllStringSubmatch(line, -1) {
			for _, w := range strings.Fields(m[1]) {
				n := docFlagName.FindStringSubmatch(w)
				if n == nil || !strings.Contains(n[1], ".") || strings.Contains(n[1], "<") {
					continue
				}
				name := strings.TrimRight(n[1], ".")
				if !slices.ContainsFunc(flags, func(f helpFlag) bool { return f.name == name }) {
					t.Errorf("docs/configuration.md:%d: --%s is not a flag of --help", i+1, name)
				}
			}
		}
	}
}
