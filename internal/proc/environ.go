package proc

import "bytes"

// ncclEnvAllowed is the allow-list of NCCL variables exported from a
// process environment. Nothing else from an environment ever reaches a
// metric or a log: environments hold secrets (HF_TOKEN, cloud keys). An
// array, never written: no package-level mutable state.
var ncclEnvAllowed = [...]string{
	"NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_CROSS_NIC", "NCCL_IB_DISABLE", "NCCL_NET",
	"NCCL_NET_GDR_LEVEL", "NCCL_IB_GID_INDEX", "NCCL_IB_TC", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE",
	"NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS", "NCCL_ALGO", "NCCL_PROTO",
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
