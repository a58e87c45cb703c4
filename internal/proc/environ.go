package proc

import (
	"bytes"
	"os"
	"strings"
)

// ncclEnvAllowed is the allow-list of NCCL variables exported from a
// process environment. Nothing else from an environment ever reaches a
// metric or a log (but MultiNode's verdict): environments hold secrets
// (HF_TOKEN, cloud keys). Every name here holds a setting, never a secret:
// NCCL_RAS_ADDR is the host:port the process's RAS service listens on (the
// nccl-ras collector queries it) and NCCL_RAS_ENABLE=0 turns that service
// off. An array, never written: no package-level mutable state.
var ncclEnvAllowed = [...]string{
	"NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_CROSS_NIC", "NCCL_IB_DISABLE", "NCCL_NET",
	"NCCL_NET_GDR_LEVEL", "NCCL_IB_GID_INDEX", "NCCL_IB_TC", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE",
	"NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS", "NCCL_ALGO", "NCCL_PROTO",
	"NCCL_RAS_ADDR", "NCCL_RAS_ENABLE", "NCCL_CONF_FILE",
}

// NCCLEnvAllowed reports whether a variable is on the allow-list.
func NCCLEnvAllowed(name []byte) bool {
	for _, a := range ncclEnvAllowed {
		if string(name) == a {
			return true
		}
	}
	return false
}

// MaxEnvValue bounds an exported NCCL value; longer values are cut.
const MaxEnvValue = 1024

// NCCLEnv calls fn for each allow-listed NCCL variable of a NUL-separated
// environment block (/proc/PID/environ), the first definition of a name
// winning (as getenv). value aliases environ; the caller copies what it
// keeps and wipes environ.
func NCCLEnv(environ []byte, fn func(name string, value []byte)) {
	var seen [len(ncclEnvAllowed)]bool
	for len(environ) > 0 {
		entry := environ
		if i := bytes.IndexByte(environ, 0); i >= 0 {
			entry, environ = environ[:i], environ[i+1:]
		} else {
			environ = nil
		}
		if len(entry) < 5 || string(entry[:5]) != "NCCL_" {
			continue
		}
		name, value, ok := bytes.Cut(entry, []byte("="))
		if !ok {
			continue
		}
		for i, allowed := range ncclEnvAllowed {
			if !seen[i] && string(name) == allowed {
				seen[i] = true
				if len(value) > MaxEnvValue {
					value = value[:MaxEnvValue]
				}
				fn(allowed, value)
				break
			}
		}
	}
}

// launcherSizeVars are the job-size variables of the launchers: torchrun's
// WORLD_SIZE and LOCAL_WORLD_SIZE, Open MPI's OMPI_COMM_WORLD_SIZE and
// OMPI_COMM_WORLD_LOCAL_SIZE. They are read only to judge whether a job
// spans nodes (MultiNode); their values never leave this package. An
// array, never written.
var launcherSizeVars = [...]string{"WORLD_SIZE", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"}

// MultiNode reports whether the launcher's variables of a NUL-separated
// environment block say the job spans nodes: more ranks in the world than
// on this node (WORLD_SIZE > LOCAL_WORLD_SIZE, or OMPI_COMM_WORLD_SIZE >
// OMPI_COMM_WORLD_LOCAL_SIZE). The first definition of a name wins, as
// getenv; a missing or malformed size says nothing.
func MultiNode(environ []byte) bool {
	var size [len(launcherSizeVars)]int // 0: unset or malformed
	var seen [len(launcherSizeVars)]bool
	for len(environ) > 0 {
		entry := environ
		if i := bytes.IndexByte(environ, 0); i >= 0 {
			entry, environ = environ[:i], environ[i+1:]
		} else {
			environ = nil
		}
		name, value, ok := bytes.Cut(entry, []byte("="))
		if !ok {
			continue
		}
		for i, v := range launcherSizeVars {
			if !seen[i] && string(name) == v {
				seen[i] = true
				size[i] = positiveInt(value)
				break
			}
		}
	}
	return size[0] > 0 && size[1] > 0 && size[0] > size[1] ||
		size[2] > 0 && size[3] > 0 && size[2] > size[3]
}

// positiveInt parses a decimal size (1 to 2^31-1); 0 when it is not one.
func positiveInt(b []byte) int {
	if len(b) == 0 || len(b) > 10 {
		return 0
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	if n > 1<<31-1 {
		return 0
	}
	return n
}

// maxIBHCAEntries is how many NCCL_IB_HCA entries NCCL reads (MAX_IB_DEVS).
const maxIBHCAEntries = 32

// IBHCA is an NCCL_IB_HCA value as NCCL reads it (src/transport/net_ib.cc,
// parseStringList and matchIfList in src/misc/utils.cc): a leading '^'
// excludes the listed devices (all others are used), then a leading '='
// asks for exact names instead of prefixes; entries are comma-separated
// name[:port], without trimming; an empty list matches every device.
type IBHCA struct {
	exclude, exact bool
	entries        []ibHCAEntry
}

type ibHCAEntry struct {
	prefix string
	port   int // -1: any port
}

// ParseIBHCA parses an NCCL_IB_HCA value.
func ParseIBHCA(v string) IBHCA { return parseIfList(v, maxIBHCAEntries) }

// parseIfList parses a list in NCCL's syntax, keeping at most max entries
// (the size of the array NCCL parses into).
func parseIfList(v string, max int) IBHCA {
	var h IBHCA
	v, h.exclude = strings.CutPrefix(v, "^")
	v, h.exact = strings.CutPrefix(v, "=")
	for v != "" && len(h.entries) < max {
		var e string
		e, v, _ = strings.Cut(v, ",")
		name, port, hasPort := strings.Cut(e, ":")
		if name == "" {
			continue // NCCL skips an entry without a name
		}
		p := -1
		if hasPort {
			if port, _, _ = strings.Cut(port, ":"); port != "" {
				p = atoi(port)
			}
		}
		h.entries = append(h.entries, ibHCAEntry{prefix: name, port: p})
	}
	return h
}

// atoi is C's atoi on a port: optional leading blanks and sign, then
// digits up to the first other byte; 0 when there are none.
func atoi(s string) int {
	s = strings.TrimLeft(s, " \t\n\v\f\r")
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg, s = s[0] == '-', s[1:]
	}
	n := 0
	for i := 0; i < len(s) && s[i] >= '0' && s[i] <= '9' && n < 1<<20; i++ {
		n = n*10 + int(s[i]-'0')
	}
	if neg {
		return -n
	}
	return n
}

// Selects reports whether NCCL uses port of device under this NCCL_IB_HCA.
func (h IBHCA) Selects(device string, port int) bool {
	return h.matches(device, port) != h.exclude
}

func (h IBHCA) matches(device string, port int) bool {
	if len(h.entries) == 0 {
		return true
	}
	for _, e := range h.entries {
		name := strings.HasPrefix(device, e.prefix)
		if h.exact {
			name = device == e.prefix
		}
		if name && (e.port == -1 || port == -1 || e.port == port) {
			return true
		}
	}
	return false
}

// Reading an environment: it holds secrets (tokens, keys), so the buffer
// is wiped after use and never kept beyond envKeep.
const (
	MaxEnviron = 1 << 20   // bytes of an environment read
	envKeep    = 256 << 10 // environment buffer kept between reads
)

// ReadEnviron reads an environment block (/proc/PID/environ, at most
// MaxEnviron bytes)
// into buf's array, growing it and wiping every array it leaves behind.
// The caller hands the result, also on error, to WipeEnviron.
func ReadEnviron(open func(string) (File, error), path string, buf []byte) ([]byte, error) {
	if buf == nil {
		buf = make([]byte, 0, 16<<10)
	}
	buf = buf[:0]
	f, err := open(path)
	if err != nil {
		return buf, err
	}
	defer f.Close()
	for len(buf) < MaxEnviron {
		if len(buf) == cap(buf) { // grow, wiping the old array
			nb := make([]byte, len(buf), 2*cap(buf))
			copy(nb, buf)
			clear(buf)
			buf = nb
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		if err != nil {
			return buf, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			break
		}
		buf = buf[:len(buf)+n]
	}
	return buf, nil
}

// WipeEnviron clears an environment buffer and returns it for reuse (nil
// when it grew beyond envKeep).
func WipeEnviron(buf []byte) []byte {
	clear(buf[:cap(buf)])
	if cap(buf) > envKeep {
		return nil
	}
	return buf[:0]
}
