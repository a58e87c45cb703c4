package collector

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabric-exporter/fabric_exporter/internal/nccl"
	"github.com/fabric-exporter/fabric_exporter/internal/proc"
	"github.com/fabric-exporter/fabric_exporter/internal/procwatch"
)

// The cause of a socket fallback: fabric_nccl_fallback_cause_info{host,
// pid, cause}, one series per NCCL process whose network is Socket, that
// has NET/Socket connections, or whose init failed. cause lists every
// reason that applies, most specific first (causeNames in
// fallback_cause.go, shared with the process collector), "unknown" when none
// does.
//
// What needs the process's /proc (its root's /dev/infiniband, its
// environment) is read by the follower's goroutine after each poll, at most
// every ncclCauseEvery per process and only for processes of this host as
// the Tracker's PID check knows them (nccl.Process.OnThisHost); a scrape
// only reads the result. The rest comes from the log and the rails.

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
	verbs := procwatch.ReadVerbsNodes(k.sysfs)
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
	buf, err := proc.ReadEnviron(k.open, path, k.envBuf)
	defer func() { k.envBuf = proc.WipeEnviron(buf) }()
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
	rails := k.rails.Current(ctx)
	return causeRails{rails: rails, allDown: railsAllDown(k.sysfs, rails), sum: railsSum(rails)}
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
	m |= envCauses(get, cr.rails)
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
