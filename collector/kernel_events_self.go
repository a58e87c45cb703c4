package collector

import (
	"os"
	"strconv"
	"strings"
)

// The exporter's own side effects in the kernel log: a driver command
// the exporter issued (an ethtool statistics or module read that the
// device refuses) is logged with the exporter's PID (kmsg.IssuerPID);
// such events are counted apart (fabric_kernel_events_self_inflicted_total),
// never as events an alert reads.

// selfPIDs are the exporter's PIDs as the kernel logs them: its PID here,
// and its PID in the initial namespace (the first of NSpid in
// --path.procfs's self/status) when it runs in a PID namespace of its own.
func selfPIDs(procfs string) map[int]bool {
	m := map[int]bool{os.Getpid(): true}
	if procfs == "" {
		procfs = "/proc"
	}
	b, err := os.ReadFile(procfs + "/self/status")
	if err != nil {
		return m
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "NSpid:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				if n, err := strconv.Atoi(f[0]); err == nil {
					m[n] = true
				}
			}
		}
	}
	return m
}
