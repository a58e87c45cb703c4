package main

import (
	"os"
	"strings"
	"testing"
)

// The README's "What a scrape looks like" lines are lines of the golden
// scrape: a label added to a family (as the rail label was) must not leave
// the README showing output the exporter no longer writes.
func TestReadmeSampleLinesInGolden(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	golden, err := os.ReadFile(goldenPath)
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
	lines := map[string]bool{}
	for _, l := range strings.Split(string(golden), "\n") {
		lines[l] = true
	}
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(block), "\n") {
		n++
		if !lines[l] {
			t.Errorf("README sample line not in %s: %s", goldenPath, l)
		}
	}
	if n < 5 {
		t.Errorf("README sample has %d lines; want the block of real output lines", n)
	}
}
