package procwatch

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/proc"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// NUMA memory: where a process's memory sits (numa_maps, read at most every
// Options.Slow: the kernel walks the page tables of the whole process under
// its mmap lock to write it) and which nodes it may run on and allocate
// from (Cpus_allowed_list against the host's node*/cpulist,
// Mems_allowed_list).

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

// refreshNodes re-reads the CPU lists of the host's NUMA nodes under
// sysfsRoot if they are older than nodeRefresh.
func (h *hostNodes) refreshNodes(sysfsRoot string, now time.Time) {
	if !h.nodesAt.IsZero() && now.Sub(h.nodesAt) < nodeRefresh {
		return
	}
	h.nodesAt = now
	h.nodes = h.nodes[:0]
	dir := filepath.Join(sysfsRoot, "devices", "system", "node")
	names, _ := sysfs.ListDir(dir, false)
	for _, n := range names {
		id, ok := strings.CutPrefix(n, "node")
		num, err := strconv.Atoi(id)
		if !ok || err != nil || id == "" || strings.Trim(id, "0123456789") != "" {
			continue
		}
		cpus, _ := proc.ParseCPUList([]byte(sysfs.ReadSmall(sysfsRoot, filepath.Join(dir, n, "cpulist"))))
		h.nodes = append(h.nodes, sysNode{id: num, name: id, cpus: cpus})
	}
	sort.Slice(h.nodes, func(i, j int) bool { return h.nodes[i].id < h.nodes[j].id })
}

// allowedNodes turns the allowed CPU and memory lists of a status into node
// lists, parsing them only when they changed.
func (w *Watcher) allowedNodes(st *procState, s proc.Status) {
	st.HasAllowed = false
	if s.CpusAllowed != nil && len(w.nodes) > 0 {
		if string(s.CpusAllowed) != st.cpusRaw || st.AllowedNodes == "" {
			st.cpusRaw, st.AllowedNodes = string(s.CpusAllowed), ""
			if cpus, err := proc.ParseCPUList(s.CpusAllowed); err == nil {
				var names []string
				for _, n := range w.nodes {
					if cpus.Intersects(n.cpus) {
						names = append(names, n.name)
					}
				}
				st.AllowedNodes = strings.Join(names, ",")
			} else {
				st.cpusRaw = ""
				w.readError(FileStatus, st.statusPath, err)
			}
		}
		st.HasAllowed = st.cpusRaw != ""
	}
	st.HasMemNodes = false
	if s.MemsAllowed != nil {
		if string(s.MemsAllowed) != st.memsRaw {
			st.memsRaw, st.MemNodes = string(s.MemsAllowed), ""
			if nodes, err := proc.ParseCPUList(s.MemsAllowed); err == nil { // same list format
				st.MemNodes = nodes.Expand()
			} else {
				st.memsRaw = ""
				w.readError(FileStatus, st.statusPath, err)
			}
		}
		st.HasMemNodes = st.memsRaw != ""
	}
}

// readNumaMaps sums /proc/PID/numa_maps per node. Nodes of the host with
// none of the process's memory report 0.
func (w *Watcher) readNumaMaps(st *procState) {
	path := st.dir + "/numa_maps"
	w.nm.Reset()
	f, err := w.IO.Open(path)
	if err == nil {
		total := 0
		for {
			n, rerr := f.Read(w.chunk)
			if rerr != nil {
				err = &os.PathError{Op: "read", Path: path, Err: rerr}
				break
			}
			if n == 0 {
				break
			}
			w.nm.Write(w.chunk[:n])
			if total += n; total > maxNumaMaps {
				err = fmt.Errorf("%w: %s is larger than %d bytes", sysfs.ErrGarbage, path, maxNumaMaps)
				break
			}
		}
		f.Close()
		w.nm.Finish()
	}
	if err != nil {
		w.readError(FileNumaMaps, path, err)
		st.Numa = nil
		return
	}
	// Every node of the host, and any other node numa_maps names.
	var want []int
	for _, n := range w.nodes {
		want = append(want, n.id)
	}
	for node, v := range w.nm.Bytes {
		if v > 0 && !slices.Contains(want, node) {
			want = append(want, node)
		}
	}
	sort.Ints(want)
	numa := make([]NodeMem, 0, len(want))
	for _, node := range want {
		m := NodeMem{Node: strconv.Itoa(node)}
		if node < len(w.nm.Bytes) {
			m.Bytes = w.nm.Bytes[node]
		}
		numa = append(numa, m)
	}
	st.Numa = numa
}
