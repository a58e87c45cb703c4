package collector

import (
	"bytes"
	"strconv"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
)

// Verbs fds: evidence that a process uses a rail's RDMA device — its open
// file descriptors on the device's verbs node (/dev/infiniband/uverbsN, one
// per device context a process opens with ibv_open_device), read with
// readlink from /proc/PID/fd and mapped to the device through the host's
// class/infiniband_verbs/uverbsN/ibdev. Read on the slow interval with the
// visibility check (never on every scrape), at most maxVerbsFDs links per
// process.

const (
	maxVerbsFDs = 4096 // fd links read per process and interval
	procFileFD  = "fd" // read-error label for /proc/PID/fd
	verbsDir    = "/dev/infiniband/"
)

// procFDs is the number of a process's open fds on one rail device's
// verbs node.
type procFDs struct {
	device string
	n      int
	s      *exposition.Series
}

// isUverbs reports whether a node under /dev/infiniband is a verbs node,
// uverbsN.
func isUverbs(node []byte) bool {
	n, ok := bytes.CutPrefix(node, []byte("uverbs"))
	if !ok || len(n) == 0 {
		return false
	}
	for _, ch := range n {
		if ch < '0' || ch > '9' {
			return false
		}
	}
	return true
}

// countVerbsFDs counts a process's fds on the verbs node of each device
// (devices have one), and on any verbs node (st.rdma, process_rdma.go). An fd directory that cannot be read leaves the
// process without the series; an fd closed between the listing and its
// readlink is not counted.
func (c *processCollector) countVerbsFDs(st *procState, devices []string) {
	old := st.fds
	st.fds = nil
	dir := st.dir + "/fd"
	c.fdNums = c.fdNums[:0]
	err := c.scanDir(dir, func(name []byte) {
		if len(c.fdNums) < c.maxFDs {
			if fd, err := strconv.Atoi(string(name)); err == nil && fd >= 0 {
				c.fdNums = append(c.fdNums, fd)
			}
		}
	})
	st.rdma.fdOK = err == nil
	st.rdma.verbsFDs = 0
	if err != nil {
		c.readError(procFileFD, dir, err)
		return
	}
	counts := c.fdCounts[:0]
	for range devices {
		counts = append(counts, 0)
	}
	c.fdCounts = counts
	var path []byte
	for _, fd := range c.fdNums {
		path = strconv.AppendInt(append(append(path[:0], dir...), '/'), int64(fd), 10)
		n, err := c.readlink(string(path), c.linkBuf[:])
		if err != nil || n >= len(c.linkBuf) {
			continue
		}
		node, ok := bytes.CutPrefix(c.linkBuf[:n], []byte(verbsDir))
		if !ok || !bytes.HasPrefix(node, []byte("uverbs")) {
			continue
		}
		if isUverbs(node) {
			st.rdma.verbsFDs++
		}
		for i, dev := range devices {
			if string(node) == c.verbs[dev] {
				counts[i]++
				break
			}
		}
	}
	for i, dev := range devices {
		f := procFDs{device: dev, n: counts[i]}
		if i < len(old) && old[i].device == dev {
			f.s = old[i].s
		} else {
			f.s = c.verbsOpen.With(st.pidS, st.comm, dev)
		}
		st.fds = append(st.fds, f)
	}
}
