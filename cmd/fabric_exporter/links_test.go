package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// The documentation's relative links resolve: every link of README.md,
// docs/*.md and every other Markdown file of the repository (the fixtures'
// and deploy/'s READMEs, DEVELOPERS.md) that is not a URL names a file or
// directory of the repository, and its #anchor, a heading of that Markdown
// file (or of the same file for a bare #anchor) as GitHub makes anchors:
// the heading's text (code spans and links reduced to their text),
// lowercased, every character that is not a letter, digit, space, '-' or
// '_' removed, spaces turned into '-'; the second heading with the same
// anchor gets "-1", the third "-2". An explicit <a name="…"> or id="…" is
// an anchor too. Links in code blocks and code spans are not links.
func TestRelativeLinks(t *testing.T) {
	const root = "../.."
	files := markdownFiles(t, root)
	for _, want := range []string{"README.md", "docs/metrics.md", "DEVELOPERS.md"} {
		if !slices.Contains(files, want) {
			t.Fatalf("no %s among %v", want, files)
		}
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(rel string) map[string]bool {
		if a, ok := anchors[rel]; ok {
			return a
		}
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		a := markdownAnchors(string(b))
		anchors[rel] = a
		return a
	}
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range markdownLinks(string(b)) {
			if isURL(l.target) {
				continue
			}
			n++
			path, anchor, _ := strings.Cut(l.target, "#")
			target := f
			if path != "" {
				target = filepath.Clean(filepath.Join(filepath.Dir(f), path))
				if target == ".." || strings.HasPrefix(target, "../") {
					t.Errorf("%s:%d: link %q leaves the repository", f, l.line, l.target)
					continue
				}
				if _, err := os.Stat(filepath.Join(root, target)); err != nil {
					t.Errorf("%s:%d: link %q: no file %s", f, l.line, l.target, target)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				t.Errorf("%s:%d: link %q: an anchor into a file that is not Markdown", f, l.line, l.target)
				continue
			}
			if !anchorsOf(target)[anchor] {
				t.Errorf("%s:%d: link %q: %s has no heading with anchor #%s", f, l.line, l.target, target, anchor)
			}
		}
	}
	if n < 50 {
		t.Errorf("only %d relative links found; the link parser is broken", n)
	}
}

// markdownFiles returns the repository's Markdown files, relative to root,
// outside hidden directories and build/.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() && rel != "." && (strings.HasPrefix(d.Name(), ".") || rel == "build") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func isURL(s string) bool {
	return regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`).MatchString(s)
}

type mdLink struct {
	target string
	line   int
}

var (
	// [text](target) and ![alt](target), target without spaces, an
	// optional "title" after it.
	inlineLink = regexp.MustCompile(`\]\(\s*<?([^()\s<>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// [label]: target
	refLink  = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$`)
	codeSpan = regexp.MustCompile("`+[^`]*`+")
	fence    = regexp.MustCompile("^\\s*(```|~~~)")
)

// markdownLinks returns the link targets outside code blocks and spans.
func markdownLinks(md string) []mdLink {
	var out []mdLink
	inFence := false
	for i, line := range strings.Split(md, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		if m := refLink.FindStringSubmatch(line); m != nil {
			out = append(out, mdLink{m[1], i + 1})
			continue
		}
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			out = append(out, mdLink{m[1], i + 1})
		}
	}
	return out
}

var (
	heading    = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	mdLinkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// markdownAnchors returns the anchors of a Markdown file's headings, as
// GitHub makes them (see TestRelativeLinks), and its explicit HTML anchors.
func markdownAnchors(md string) map[string]bool {
	out := map[string]bool{}
	count := map[string]int{}
	inFence := false
	for _, line := range strings.Split(md, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		a := githubAnchor(m[2])
		if k := count[a]; k > 0 {
			out[fmt.Sprintf("%s-%d", a, k)] = true
		} else {
			out[a] = true
		}
		count[a]++
	}
	return out
}

// githubAnchor is the anchor GitHub gives a heading's text.
func githubAnchor(text string) string {
	text = mdLinkText.ReplaceAllString(text, "$1")
	text = strings.ReplaceAll(text, "`", "")
	text = strings.NewReplacer("**", "", "*", "").Replace(text)
	text = regexp.MustCompile(`<[^>]+>`).ReplaceAllString(text, "")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
