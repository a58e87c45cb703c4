package procwatch

import (
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/proc"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// Network namespaces: which one a process lives in (/proc/PID/ns/net) and
// the local addresses of that namespace (/proc/PID/net/fib_trie and
// if_inet6, proc.ParseFibTrieLocal and ParseIfInet6), read once per
// namespace and Refresh. An NCCL rank's RAS host address is one of them:
// it tells on which node (a host, or a pod with its own network) the rank
// runs.

// netns caches the addresses of the namespaces of the selected processes.
type netns struct {
	spaces map[uint64]*nsAddrs
	selfNS uint64    // the exporter's own network namespace (0: unknown)
	selfAt time.Time // when it was read
}

type nsAddrs struct {
	gen   uint64 // the Refresh that read them
	addrs []netip.Addr
	ok    bool
}

func newNetns() netns { return netns{spaces: map[uint64]*nsAddrs{}} }

// refreshSelfNetns reads the exporter's own network namespace: through the
// procfs's self where the exporter is in the procfs's PID namespace (the
// same namespace as /proc/self/ns/net; in a fixture tree, the fixture's
// exporter), else through /proc/self.
func (w *Watcher) refreshSelfNetns() {
	link := "/proc/self/ns/net"
	if w.self != 0 {
		link = w.o.Procfs + "/self/ns/net"
	}
	w.selfNS = 0
	if t, err := os.Readlink(link); err == nil {
		w.selfNS, _ = proc.ParseNSLink("net", t)
	}
}

// readNetns reads a process's network namespace and, once per namespace
// and Refresh, that namespace's addresses through this process.
func (w *Watcher) readNetns(st *procState) {
	link := st.dir + "/ns/net"
	n, err := w.IO.Readlink(link, w.linkBuf[:])
	if err == nil && n >= len(w.linkBuf) {
		err = fmt.Errorf("%w: %s is too long a link", sysfs.ErrGarbage, link)
	}
	var ino uint64
	if err == nil {
		ino, err = proc.ParseNSLink("net", string(w.linkBuf[:n]))
	}
	if err != nil {
		w.readError(FileNet, link, &os.PathError{Op: "readlink", Path: link, Err: err})
		st.NetNS, st.NetAddrs = 0, nil
		return
	}
	st.NetNS = ino
	ns := w.spaces[ino]
	if ns == nil {
		ns = &nsAddrs{}
		w.spaces[ino] = ns
	}
	if ns.gen != w.gen || !ns.ok {
		ns.gen = w.gen
		ns.addrs, ns.ok = w.readAddrs(st.dir)
	}
	st.NetAddrs = nil
	if ns.ok {
		st.NetAddrs = ns.addrs
	}
}

// readAddrs reads the local addresses of a process's network namespace.
// A namespace without IPv6 has no if_inet6: that is no error.
func (w *Watcher) readAddrs(dir string) ([]netip.Addr, bool) {
	if w.netBuf == nil {
		w.netBuf = make([]byte, proc.MaxNetFile+1)
	}
	var out []netip.Addr
	for _, f := range [...]struct {
		name     string
		parse    func([]byte) ([]netip.Addr, error)
		optional bool
	}{{"fib_trie", proc.ParseFibTrieLocal, false}, {"if_inet6", proc.ParseIfInet6, true}} {
		path := dir + "/net/" + f.name
		n, err := proc.ReadInto(w.IO.Open, path, w.netBuf)
		if err == nil && n > proc.MaxNetFile {
			err = fmt.Errorf("%w: %s is larger than %d bytes", sysfs.ErrGarbage, path, proc.MaxNetFile)
		}
		if err != nil && f.optional && sysfs.IsGone(err) {
			continue
		}
		var a []netip.Addr
		if err == nil {
			a, err = f.parse(w.netBuf[:n])
		}
		if err != nil {
			w.readError(FileNet, path, err)
			return nil, false
		}
		out = append(out, a...)
	}
	return out, true
}

// netnsGC forgets the namespaces no process of this Refresh lives in.
func (w *Watcher) netnsGC() {
	for ino, ns := range w.spaces {
		if ns.gen != w.gen {
			delete(w.spaces, ino)
		}
	}
}
