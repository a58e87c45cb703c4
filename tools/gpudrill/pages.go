// The notifications the webhook got, read for the two-node trials: the
// first page of each alert after a moment, and the pages that must not
// have come.

package main

import (
	"fmt"
	"strings"
	"time"
)

// waitPages waits until every alert of names has a firing notification
// matching match at or after from, or timeout passes; once the first has
// come the others get at most grace more.
func waitPages(w *webhook, names []string, match func(map[string]string) bool, from time.Time, timeout, grace time.Duration) map[string]notification {
	deadline := from.Add(timeout)
	for {
		got := firstPages(w.all(), names, match, from)
		if len(got) == len(names) || time.Now().After(deadline) {
			return got
		}
		if f, ok := earliest(got); ok && f.at.Add(grace).Before(deadline) {
			deadline = f.at.Add(grace)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// firstPages returns, per alert of names, its first firing notification
// matching match at or after from.
func firstPages(notes []notification, names []string, match func(map[string]string) bool, from time.Time) map[string]notification {
	out := map[string]notification{}
	for _, n := range notes {
		a := n.labels["alertname"]
		if n.status != "firing" || n.at.Before(from) || !match(n.labels) {
			continue
		}
		for _, want := range names {
			if a == want {
				if o, ok := out[a]; !ok || n.at.Before(o.at) {
					out[a] = n
				}
			}
		}
	}
	return out
}

func earliest(m map[string]notification) (notification, bool) {
	var first notification
	ok := false
	for _, n := range m {
		if !ok || n.at.Before(first.at) {
			first, ok = n, true
		}
	}
	return first, ok
}

// pagesBefore splits the pages (severity page, firing) before t into
// unexpected ones and NCCLSocketFallback from kernel evidence, which is
// right on a host where the job has no RDMA resource (every two-node
// job of the lent machine).
func pagesBefore(notes []notification, t time.Time) (unexpected, expected []notification) {
	for _, n := range notes {
		if n.status != "firing" || n.labels["severity"] != "page" || !n.at.Before(t) {
			continue
		}
		if n.labels["alertname"] == "NCCLSocketFallback" && n.labels["evidence"] == "kernel" {
			expected = append(expected, n)
		} else {
			unexpected = append(unexpected, n)
		}
	}
	return unexpected, expected
}

func listNotes(ns []notification) string {
	if len(ns) == 0 {
		return ""
	}
	var s []string
	for _, n := range ns {
		s = append(s, n.labels["alertname"]+"{pid="+n.labels["pid"]+"}")
	}
	return " (" + strings.Join(s, ", ") + ")"
}

func expectedNote(ns []notification) string {
	if len(ns) == 0 {
		return ""
	}
	return fmt.Sprintf("; and %d NCCLSocketFallback with evidence kernel, expected (the job is on sockets)", len(ns))
}
