package collector

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabric-exporter/fabric_exporter/internal/nccl"
	"github.com/fabric-exporter/fabric_exporter/internal/proc"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// The cause of a socket fallback: fabric_nccl_fallback_cause_info{host,
// pid, cause}, one series per NCCL process whose network is Socket, that
// has NET/Socket connections, or whose init failed. cause lists every
// reason that applies, most specific first (causeOrder), "unknown" when
// none does.
//
// What needs the process's /proc (its root's /dev/infiniband, its
// environment) is read by the follower's goroutine after each poll, at most
// every ncclCauseEvery per process and only for processes of this host as
// the Tracker's PID check knows them (nccl.Process.OnThisHost); a scrape
// only reads the result. The rest comes from the log and the rails.

// The causes, in the order they are listed.
const (
	causeNoVerbs      = "no_verbs_devices_in_container" // the process's root has no uverbs node of a rail device
	causeIBDisable    = "nccl_ib_disable"               // NCCL_IB_DISABLE non-zero
	causeNetSocket    = "nccl_net_socket"               // NCCL_NET=Socket
	causeHCANoRail    = "nccl_ib_hca_matches_no_rail"   // NCCL_IB_HCA selects no rail device
	causeIBNoDevice   = "ib_no_device_found"            // "NET/IB : No device found."
	causeVerbsLib     = "libibverbs_missing"            // "Failed to open libibverbs.so[.1]"
	causeIfnameNoRail = "socket_ifname_not_a_rail"      // the socket interfaces include no rail netdev
	causeRailDown     = "rail_down"                     // every rail down or gone
	causeUnknown      = "unknown"
)

// causeNames are the causes in their order; a causeMask has bit i for
// causeNames[i].
var causeNames = [...]string{causeNoVerbs, causeIBDisable, causeNetSocket, causeHCANoRail,
	causeIBNoDevice, causeVerbsLib, causeIfnameNoRail, causeRailDown}

type causeMask uint16

const (
	maskNoVerbs causeMask = 1 << iota
	maskIBDisable
	maskNetSocket
	maskHCANoRail
	maskIBNoDevice
	maskVerbsLib
	maskIfnameNoRail
	maskRailDown
)

// ncclCauseEvery bounds how often one process's root and environment are
// read.
const ncclCauseEvery = 5 * time.Second

// ncclCauses holds what the fallback cause needs from outside the log.
type ncclCauses struct {
	rails         *Rails
	sysfs, procfs string
	open          func(string) (proc.File, error)
	openRoot      func(string) (int, error)
	now           func() time.Time
	readErr       func(path string, err error)

	// the follower's goroutine only
	roots  proc.RootResolver
	envBuf []byte

	mu    sync.Mutex
	facts map[*nccl.Process]*procFacts // never changed once stored: replaced
}

// procFacts is what /proc said of one local process.
type procFacts struct {
	checkedAt time.Time
	noVerbs   bool // its root has none of the rails' verbs nodes
	envRead   bool // env was read (once: environ is the environment at exec)
	env       []nccl.KV
}

// isFallback reports whether p gets a cause series: its network is
// Socket, it has NET/Socket connections, or its init failed.
func isFallback(p *nccl.Process) bool {
	if p.InitFailure != "" || p.Net == "Socket" {
		return true
	}
	for _, c := range p.Conns {
		if c.Transport == "NET/Socket" {
			return true
		}
	}
	return false
}

type causeCand struct {
	p   *nccl.Process
	pid string
}

// refresh reads the root and the environment of the local fallback
// processes that are due (the follower's goroutine, after Expire).
func (k *ncclCauses) refresh(ctx context.Context, t *nccl.Tracker) {
	var cands []causeCand
	t.View(func(procs []*nccl.Process, _ nccl.Stats) {
		for _, p := range procs {
			if isFallback(p) && p.OnThisHost() {
				cands = append(cands, causeCand{p, p.PID})
			}
		}
	})
	now := k.now()
	k.mu.Lock()
	old := k.facts
	next := make(map[*nccl.Process]*procFacts, len(cands))
	var due []causeCand
	for _, c := range cands {
		f := old[c.p]
		if f != nil {
			next[c.p] = f
		}
		if f == nil || now.Sub(f.checkedAt) >= ncclCauseEvery || now.Before(f.checkedAt) {
			due = append(due, c)
		}
	}
	k.facts = next // processes gone or healed are forgotten
	k.mu.Unlock()
	if len(due) == 0 {
		return
	}
	nodes := k.verbsNodes(ctx)
	for _, c := range due {
		k.mu.Lock()
		prev := k.facts[c.p]
		k.mu.Unlock()
		f := &procFacts{checkedAt: now}
		if prev != nil {
			f.envRead, f.env = prev.envRead, prev.env
		}
		dir := filepath.Join(k.procfs, c.pid)
		f.noVerbs = k.noVerbsInRoot(dir+"/root", nodes)
		if !f.envRead {
			f.env, f.envRead = k.readEnv(dir + "/environ")
		}
		k.mu.Lock()
		k.facts[c.p] = f
		k.mu.Unlock()
	}
}

// verbsNodes returns the uverbs nodes of the rail devices the host has now.
func (k *ncclCauses) verbsNodes(ctx context.Context) []string {
	if k.rails == nil {
		return nil
	}
	verbs := readVerbsNodes(k.sysfs)
	var nodes []string
	for _, r := range k.rails.Current(ctx) {
		if n := verbs[r.Device]; r.Present && n != "" && !slices.Contains(nodes, n) {
			nodes = append(nodes, n)
		}
	}
	return nodes
}

// noVerbsInRoot reports whether none of nodes exists under /dev/infiniband
// in the root (looked up without leaving it); false when the host has no
// such node or the root cannot be read (no verdict).
func (k *ncclCauses) noVerbsInRoot(root string, nodes []string) bool {
	if len(nodes) == 0 {
		return false
	}
	fd, err := k.openRoot(root)
	if err != nil {
		if !procGone(err) {
			k.readErr(root, err)
		}
		return false
	}
	defer unix.Close(fd)
	for _, n := range nodes {
		ok, err := k.roots.Exists(fd, root, "dev/infiniband/"+n)
		if err != nil {
			k.readErr(root, err)
			return false
		}
		if ok {
			return false
		}
	}
	return true
}

// readEnv reads the variables the causes need from an environment block
// (the allow-list of proc.NCCLEnv); the buffer is wiped.
func (k *ncclCauses) readEnv(path string) ([]nccl.KV, bool) {
	buf, err := readEnvironInto(k.open, path, k.envBuf)
	defer func() { k.envBuf = wipeEnviron(buf) }()
	if err != nil {
		if !procGone(err) {
			k.readErr(path, err)
		}
		return nil, false
	}
	var env []nccl.KV
	proc.NCCLEnv(buf, func(name string, value []byte) {
		switch name {
		case "NCCL_IB_DISABLE", "NCCL_NET", "NCCL_IB_HCA":
			env = append(env, nccl.KV{Name: name, Value: string(value)})
		}
	})
	return env, true
}

// procGone reports whether err says the process exited.
func procGone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// causeRails is what the rails say, computed once per scrape.
type causeRails struct {
	rails   []Rail
	allDown bool
	sum     uint64 // FNV-1a of the rails' devices, ports and netdevs
}

// railsNow returns the rails of this scrape and whether every one is down
// (port not ACTIVE) or its device gone.
func (k *ncclCauses) railsNow(ctx context.Context) causeRails {
	if k.rails == nil {
		return causeRails{}
	}
	cr := causeRails{rails: k.rails.Current(ctx), allDown: true, sum: 14695981039346656037}
	for _, r := range cr.rails {
		for _, v := range [...]string{r.Device, r.Port, r.Netdev} {
			for i := 0; i < len(v); i++ {
				cr.sum = (cr.sum ^ uint64(v[i])) * 1099511628211
			}
			cr.sum = (cr.sum ^ 0xff) * 1099511628211
		}
		if cr.allDown && r.Present && strings.HasSuffix(sysfs.ReadSmall(k.sysfs,
			filepath.Join(k.sysfs, "class", "infiniband", r.Device, "ports", r.Port, "state")), "ACTIVE") {
			cr.allDown = false
		}
	}
	cr.allDown = cr.allDown && len(cr.rails) > 0
	return cr
}

// causeCache is the last cause of a process and what it was computed
// from, so that an unchanged process costs no allocation per scrape.
type causeCache struct {
	valid   bool
	gen     uint64
	facts   *procFacts
	sum     uint64
	allDown bool
	mask    causeMask
	label   string
}

// label returns the cause label of p (under the Tracker's lock), from the
// cache when nothing it depends on changed.
func (k *ncclCauses) label(p *nccl.Process, cr causeRails, cc *causeCache) (string, bool) {
	k.mu.Lock()
	f := k.facts[p]
	k.mu.Unlock()
	if cc.valid && cc.gen == p.Gen && cc.facts == f && cc.sum == cr.sum && cc.allDown == cr.allDown {
		return cc.label, false
	}
	m := k.causes(p, f, cr)
	changed := !cc.valid || m != cc.mask
	if changed {
		cc.label = joinCauses(m)
	}
	*cc = causeCache{valid: true, gen: p.Gen, facts: f, sum: cr.sum, allDown: cr.allDown, mask: m, label: cc.label}
	return cc.label, changed
}

// causes returns the causes of p's fallback.
func (k *ncclCauses) causes(p *nccl.Process, f *procFacts, cr causeRails) causeMask {
	var m causeMask
	if f != nil && f.noVerbs {
		m |= maskNoVerbs
	}
	// The log's "NCCL_X set by environment to V" is what NCCL read; the
	// environment at exec stands in when the log does not say.
	get := func(name string) (string, bool) {
		for _, e := range p.Env {
			if e.Name == name {
				return e.Value, true
			}
		}
		if f != nil {
			for _, e := range f.env {
				if e.Name == name {
					return e.Value, true
				}
			}
		}
		return "", false
	}
	if v, ok := get("NCCL_IB_DISABLE"); ok {
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 0, 64); err == nil && n != 0 {
			m |= maskIBDisable
		}
	}
	if v, ok := get("NCCL_NET"); ok && strings.EqualFold(v, "Socket") {
		m |= maskNetSocket
	}
	if v, ok := get("NCCL_IB_HCA"); ok && len(cr.rails) > 0 {
		hca := proc.ParseIBHCA(v)
		sel := false
		for _, r := range cr.rails {
			port, _ := strconv.Atoi(r.Port)
			sel = sel || hca.Selects(r.Device, port)
		}
		if !sel {
			m |= maskHCANoRail
		}
	}
	if p.IBNoDevice {
		m |= maskIBNoDevice
	}
	if p.VerbsLibMissing {
		m |= maskVerbsLib
	}
	if len(p.Interfaces) > 0 && ifnameNoRail(p.Interfaces, cr.rails) {
		m |= maskIfnameNoRail
	}
	if cr.allDown {
		m |= maskRailDown
	}
	return m
}

// ifnameNoRail reports whether the node has rails with netdevs and none of
// the interfaces is one of them.
func ifnameNoRail(ifaces []string, rails []Rail) bool {
	has := false
	for _, r := range rails {
		if r.Netdev == "" {
			continue
		}
		has = true
		if slices.Contains(ifaces, r.Netdev) {
			return false
		}
	}
	return has
}

// joinCauses joins the causes of m with commas, in their order, leaving
// out from the end (the least specific) those that do not fit in a label
// value of maxCauseLabel bytes; "unknown" when m is empty.
func joinCauses(m causeMask) string {
	var b []byte
	for i, c := range causeNames {
		if m&(1<<i) == 0 {
			continue
		}
		if len(b) > 0 {
			if len(b)+1+len(c) > maxCauseLabel {
				break
			}
			b = append(b, ',')
		}
		b = append(b, c...)
	}
	if len(b) == 0 {
		return causeUnknown
	}
	return string(b)
}

const maxCauseLabel = 128
