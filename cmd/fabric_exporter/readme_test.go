package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The README's "What a scrape looks like" lines are lines of the golden
// scrape: a label added to a family (as the rail label was) must not leave
// the README showing output the exporter no longer writes. (That `make
// demo` serves them too is TestDemoFamilies'.)
func TestReadmeSampleLinesInGolden(t *testing.T) {
	golden, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(string(golden), "\n") {
		lines[l] = true
	}
	for _, l := range readmeSampleLines(t) {
		if !lines[l] {
			t.Errorf("README sample line not in %s: %s", goldenPath, l)
		}
	}
}

// readmeSampleLines returns the lines of the README's ```text block after
// "What a scrape looks like".
func readmeSampleLines(t *testing.T) []string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "What a scrape looks like")
	if !ok {
		t.Fatal(`README has no "What a scrape looks like"`)
	}
	_, block, ok := strings.Cut(rest, "```text\n")
	if ok {
		block, _, ok = strings.Cut(block, "```")
	}
	if !ok {
		t.Fatal("README: no ```text block after \"What a scrape looks like\"")
	}
	out := strings.Split(strings.TrimSpace(block), "\n")
	if len(out) < 5 {
		t.Fatalf("README sample has %d lines; want the block of real output lines", len(out))
	}
	return out
}

// The Go version the README and docs/install.md ask for is go.mod's: a
// toolchain older than its go line refuses the module (or downloads
// another), so "Go ≥ 1.26" sent people with 1.26.0 to a failed build.
func TestGoVersionAsGoMod(t *testing.T) {
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	want := string(m[1])
	n := 0
	for _, f := range []string{"README.md", "docs/install.md"} {
		b, err := os.ReadFile("../../" + f)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range regexp.MustCompile(`\bGo\s*(?:≥|>=|version)?\s*([0-9]+\.[0-9]+(?:\.[0-9]+)?)`).FindAllSubmatch(b, -1) {
			n++
			if string(v[1]) != want {
				t.Errorf("%s asks for Go %s; go.mod's go line is %s", f, v[1], want)
			}
		}
	}
	if n < 3 {
		t.Errorf("%d Go versions found in README.md and docs/install.md, want the 3 places that state one", n)
	}
}
