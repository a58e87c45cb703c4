package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestMakefileHelp: `make` alone runs `make help`, which lists every target
// with the text after "## " on its rule line; every phony target has one,
// and every listed target is phony.
func TestMakefileHelp(t *testing.T) {
	raw, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	mk := string(raw)
	if !regexp.MustCompile(`(?m)^\.DEFAULT_GOAL\s*:=\s*help\s*$`).MatchString(mk) {
		t.Error("Makefile: .DEFAULT_GOAL is not help")
	}
	phony := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\.PHONY:(.*)$`).FindAllStringSubmatch(mk, -1) {
		for _, p := range strings.Fields(m[1]) {
			phony[p] = true
		}
	}
	described := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-zA-Z_-]+):[^=\n]*?## (.*)$`).FindAllStringSubmatch(mk, -1) {
		described[m[1]] = true
		if !phony[m[1]] {
			t.Errorf("Makefile: %s is listed by make help but not .PHONY", m[1])
		}
		if strings.TrimSpace(m[2]) == "" {
			t.Errorf("Makefile: %s has an empty ## description", m[1])
		}
	}
	for p := range phony {
		if !described[p] {
			t.Errorf("Makefile: .PHONY target %s has no \"## description\" on its rule line: make help does not list it", p)
		}
	}
	if len(described) < 20 {
		t.Errorf("only %d described targets found: the parser is broken", len(described))
	}
}
