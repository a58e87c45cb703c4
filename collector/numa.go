package collector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// numaStats maps the keys of node*/numastat to metric names (and the keys
// of node*/vmstat that carry the same counters, used when numastat is
// absent). All count pages.
var numaStats = [...]struct {
	key, vmstat, help string
}{
	{"numa_hit", "numa_hit", "Pages allocated on this NUMA node as intended (numastat numa_hit)."},
	{"numa_miss", "numa_miss", "Pages allocated on this NUMA node although the allocating task preferred another node (numastat numa_miss)."},
	{"numa_foreign", "numa_foreign", "Pages intended for this NUMA node but allocated on another node (numastat numa_foreign)."},
	{"interleave_hit", "numa_interleave", "Interleaved pages allocated on this NUMA node as intended (numastat interleave_hit)."},
	{"local_node", "numa_local", "Pages allocated on this NUMA node while the allocating task ran on it (numastat local_node)."},
	{"other_node", "numa_other", "Pages allocated on this NUMA node while the allocating task ran on another node (numastat other_node)."},
}

type numaCollector struct {
	env    Env
	dir    string
	sysfs  string
	reader *sysfs.Reader
	nodes  map[string]*numaNode
	list   []*numaNode
	gen    uint64
	buf    [2 * sysfs.MaxAttrSize]byte

	stats                  [6]*exposition.Family
	memTotal, memFree, inf *exposition.Family
}

type numaNode struct {
	id, dir          string
	num              int
	gen              uint64
	stats            [6]*exposition.Series
	memTotal, memFre *exposition.Series
	cpulist          string
	info             *exposition.Series
}

func newNumaCollector(env Env, o *Options) (Collector, error) {
	g := prometheus.GaugeValue
	c := &numaCollector{
		env: env, dir: o.sysPath("devices", "system", "node"), sysfs: o.SysfsPath, reader: sysfs.NewReaderIn(o.SysfsPath), nodes: map[string]*numaNode{},
		memTotal: env.Families.NewFamily("fabric_numa_memory_total_bytes", "Memory of the NUMA node (node*/meminfo MemTotal).", g, "numa_node"),
		memFree:  env.Families.NewFamily("fabric_numa_memory_free_bytes", "Free memory of the NUMA node (node*/meminfo MemFree).", g, "numa_node"),
		inf:      env.Families.NewFamily("fabric_numa_node_info", "A NUMA node and its CPUs (node*/cpulist; \"\" for a node without CPUs).", g, "numa_node", "cpulist"),
	}
	for i, s := range numaStats {
		c.stats[i] = env.Families.NewFamily("fabric_numa_"+s.key+"_total", s.help, prometheus.CounterValue, "numa_node")
	}
	return c, nil
}

func (c *numaCollector) Update(ctx context.Context, b *exposition.Batch) error {
	c.gen++
	nodes := c.list[:0]
	err := sysfs.ScanDir(c.dir, func(name []byte) {
		if len(name) < 5 || string(name[:4]) != "node" {
			return
		}
		n := c.nodes[string(name[4:])]
		if n == nil {
			id, ok := nodeID(string(name))
			if !ok {
				return
			}
			n = c.newNode(id)
			c.nodes[id] = n
		}
		n.gen = c.gen
		nodes = append(nodes, n)
	})
	c.list = nodes
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return checkSysfs(c.sysfs, c.dir+" does not exist (kernel without NUMA support)")
		}
		return fmt.Errorf("listing NUMA nodes: %w", err)
	}
	for id, n := range c.nodes {
		if n.gen != c.gen {
			c.reader.ForgetPrefix(n.dir)
			delete(c.nodes, id)
		}
	}
	if len(nodes) == 0 {
		return noHardware("no node* directories in %s", c.dir)
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].num < nodes[j].num })
	for _, n := range nodes {
		c.collectNode(n, b)
	}
	return nil
}

// nodeID returns N of "nodeN".
func nodeID(name string) (string, bool) {
	if len(name) < 5 || name[:4] != "node" {
		return "", false
	}
	for _, ch := range name[4:] {
		if ch < '0' || ch > '9' {
			return "", false
		}
	}
	return name[4:], true
}

func (c *numaCollector) newNode(id string) *numaNode {
	n := &numaNode{id: id, dir: filepath.Join(c.dir, "node"+id), memTotal: c.memTotal.With(id), memFre: c.memFree.With(id)}
	n.num, _ = strconv.Atoi(id)
	for i, f := range c.stats {
		n.stats[i] = f.With(id)
	}
	return n
}

func (c *numaCollector) collectNode(n *numaNode, b *exposition.Batch) {
	// numastat; node*/vmstat carries the same counters under other names.
	path := filepath.Join(n.dir, "numastat")
	raw, err := c.reader.Read(path, c.buf[:])
	vm := false
	if err != nil && sysfs.IsGone(err) {
		path = filepath.Join(n.dir, "vmstat")
		raw, err = c.reader.Read(path, c.buf[:])
		vm = true
	}
	if err != nil {
		if !sysfs.IsGone(err) {
			skipValue(c.env, path, err)
		}
	} else {
		var vals [6]uint64
		var found [6]bool
		eachLine(raw, func(line []byte) {
			k, v, ok := bytes.Cut(line, []byte(" "))
			if !ok {
				return
			}
			for i, s := range numaStats {
				key := s.key
				if vm {
					key = s.vmstat
				}
				if string(k) == key {
					if x, err := sysfs.ParseUint(v); err == nil {
						vals[i], found[i] = x, true
					}
				}
			}
		})
		for i := range vals {
			if found[i] {
				b.Add(n.stats[i], float64(vals[i]))
			}
		}
		if !found[0] {
			skipValue(c.env, path, fmt.Errorf("%w: no numa_hit line", sysfs.ErrGarbage))
		}
	}

	path = filepath.Join(n.dir, "meminfo")
	if raw, err := c.reader.Read(path, c.buf[:]); err == nil {
		total, free, ok := parseNodeMeminfo(raw)
		if ok {
			b.Add(n.memTotal, total)
			b.Add(n.memFre, free)
		} else {
			skipValue(c.env, path, fmt.Errorf("%w: no MemTotal/MemFree", sysfs.ErrGarbage))
		}
	} else if !sysfs.IsGone(err) {
		skipValue(c.env, path, err)
	}

	path = filepath.Join(n.dir, "cpulist")
	if raw, err := c.reader.Read(path, c.buf[:]); err == nil {
		if n.info == nil || string(raw) != n.cpulist {
			n.cpulist = string(raw)
			n.info = c.inf.With(n.id, n.cpulist)
		}
		b.Add(n.info, 1)
	} else if !sysfs.IsGone(err) {
		skipValue(c.env, path, err)
	}
}

// parseNodeMeminfo returns MemTotal and MemFree in bytes from a node's
// meminfo ("Node 0 MemTotal:       1056375896 kB").
func parseNodeMeminfo(raw []byte) (total, free float64, ok bool) {
	var haveT, haveF bool
	eachLine(raw, func(line []byte) {
		var f [6][]byte
		for i := range f {
			f[i], line = firstToken(line)
		}
		if string(f[0]) != "Node" || string(f[4]) != "kB" || len(f[5]) != 0 {
			return
		}
		v, err := sysfs.ParseUint(f[3])
		if err != nil {
			return
		}
		switch string(f[2]) {
		case "MemTotal:":
			total, haveT = float64(v)*1024, true
		case "MemFree:":
			free, haveF = float64(v)*1024, true
		}
	})
	return total, free, haveT && haveF
}

// eachLine calls fn for every line of b (without the newline).
func eachLine(b []byte, fn func(line []byte)) {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		fn(line)
	}
}

// firstToken splits off the first space- or tab-separated token of b.
func firstToken(b []byte) (tok, rest []byte) {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\r' }
	s := 0
	for s < len(b) && isSpace(b[s]) {
		s++
	}
	e := s
	for e < len(b) && !isSpace(b[e]) {
		e++
	}
	return b[s:e], b[e:]
}
