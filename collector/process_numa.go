package collector

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/proc"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// NUMA memory: where a process's memory sits (numa_maps, read at most every
// --collector.process.numa-maps-interval: the kernel walks the page tables
// of the whole process under its mmap lock to write it) and which nodes it
// may run on and allocate from (Cpus_allowed_list against the host's
// node*/cpulist, Mems_allowed_list).

const (
	nodeRefresh = time.Minute // NUMA node CPU lists are re-read after this
	maxNumaMaps = 64 << 20    // bytes of a numa_maps read
	procChunk   = 64 << 10    // read size for numa_maps
)

// hostNodes are the host's NUMA nodes and their CPUs.
type hostNodes struct {
	nodes   []sysNode
	nodesAt time.Time
}

type sysNode struct {
	id   int
	name string
	cpus proc.CPUSet
}

// procNuma is a process's memory on one node.
type procNuma struct {
	node string
	v    float64
	s    *exposition.Series
}

// refreshNodes re-reads the CPU lists of the host's NUMA nodes under sysfsRoot
// if they are older than nodeRefresh.
func (h *hostNodes) refreshNodes(sysfsRoot string, now time.Time) {
	if !h.nodesAt.IsZero() && now.Sub(h.nodesAt) < nodeRefresh {
		return
	}
	h.nodesAt = now
	h.nodes = h.nodes[:0]
	dir := filepath.Join(sysfsRoot, "devices", "system", "node")
	names, _ := sysfs.ListDir(dir, false)
	for _, n := range names {
		id, ok := nodeID(n)
		if !ok {
			continue
		}
		num, _ := strconv.Atoi(id)
		cpus, _ := proc.ParseCPUList([]byte(sysfs.ReadSmall(sysfsRoot, filepath.Join(dir, n, "cpulist"))))
		h.nodes = append(h.nodes, sysNode{id: num, name: id, cpus: cpus})
	}
	sort.Slice(h.nodes, func(i, j int) bool { return h.nodes[i].id < h.nodes[j].id })
}

// addAllowed adds the NUMA nodes a process may run on and allocate from.
func (c *processCollector) addAllowed(st *procState, s proc.Status, b *exposition.Batch) {
	if s.CpusAllowed != nil && len(c.nodes) > 0 {
		if st.allowed == nil || string(s.CpusAllowed) != st.cpusRaw {
			st.cpusRaw, st.allowed = string(s.CpusAllowed), nil
			if cpus, err := proc.ParseCPUList(s.CpusAllowed); err == nil {
				var names []string
				for _, n := range c.nodes {
					if cpus.Intersects(n.cpus) {
						names = append(names, n.name)
					}
				}
				st.allowed = c.allowed.With(st.pidS, st.comm, strings.Join(names, ","))
			} else {
				c.readError("status", st.statusPath, err)
			}
		}
		b.Add(st.allowed, 1)
	}
	if s.MemsAllowed != nil {
		if st.memAllowed == nil || string(s.MemsAllowed) != st.memsRaw {
			st.memsRaw, st.memAllowed = string(s.MemsAllowed), nil
			if nodes, err := proc.ParseCPUList(s.MemsAllowed); err == nil { // same list format
				st.memAllowed = c.memAllowed.With(st.pidS, st.comm, nodes.Expand())
			} else {
				c.readError("status", st.statusPath, err)
			}
		}
		b.Add(st.memAllowed, 1)
	}
}

// readNumaMaps sums /proc/PID/numa_maps per node. Nodes of the host with
// none of the process's memory report 0.
func (c *processCollector) readNumaMaps(st *procState) {
	path := st.dir + "/numa_maps"
	c.nm.Reset()
	f, err := c.open(path)
	if err == nil {
		total := 0
		for {
			n, rerr := f.Read(c.chunk)
			if rerr != nil {
				err = &os.PathError{Op: "read", Path: path, Err: rerr}
				break
			}
			if n == 0 {
				break
			}
			c.nm.Write(c.chunk[:n])
			if total += n; total > maxNumaMaps {
				err = fmt.Errorf("%w: %s is larger than %d bytes", sysfs.ErrGarbage, path, maxNumaMaps)
				break
			}
		}
		f.Close()
		c.nm.Finish()
	}
	if err != nil {
		c.readError("numa_maps", path, err)
		st.numa = st.numa[:0]
		return
	}
	// Every node of the host, and any other node numa_maps names.
	var want []int
	for _, n := range c.nodes {
		want = append(want, n.id)
	}
	for node, v := range c.nm.Bytes {
		if v > 0 && !slices.Contains(want, node) {
			want = append(want, node)
		}
	}
	sort.Ints(want)
	same := len(want) == len(st.numa)
	for i := 0; same && i < len(want); i++ {
		same = st.numa[i].node == strconv.Itoa(want[i])
	}
	if !same {
		st.numa = st.numa[:0]
		for _, node := range want {
			id := strconv.Itoa(node)
			st.numa = append(st.numa, procNuma{node: id, s: c.numaMem.With(st.pidS, st.comm, id)})
		}
	}
	for i, node := range want {
		st.numa[i].v = 0
		if node < len(c.nm.Bytes) {
			st.numa[i].v = float64(c.nm.Bytes[node])
		}
	}
}
