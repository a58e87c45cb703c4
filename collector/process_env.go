package collector

import (
	"os"
	"strings"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/proc"
)

// NCCL settings: the allow-listed NCCL variables of a process's environment
// (proc.NCCLEnv). Environments hold secrets: only the allow-list is kept,
// and the buffer that held the rest is wiped.

const (
	maxEnviron = 1 << 20   // bytes of an environment read
	envKeep    = 256 << 10 // environment buffer kept between scrapes
)

type envVar struct {
	name, value string
	s           *exposition.Series
}

// readEnviron reads the allow-listed NCCL variables of a process, once per
// process (environ is the environment at exec and does not change). The
// buffer is wiped after use: the rest of the environment is never kept.
func (c *processCollector) readEnviron(st *procState) {
	path := st.dir + "/environ"
	f, err := c.open(path)
	if err != nil {
		c.readError("environ", path, err)
		return
	}
	defer f.Close()
	if c.envBuf == nil {
		c.envBuf = make([]byte, 0, 16<<10)
	}
	buf := c.envBuf[:0]
	defer func() {
		clear(buf[:cap(buf)])
		if cap(buf) > envKeep {
			buf = nil
		}
		c.envBuf = buf[:0]
	}()
	for len(buf) < maxEnviron {
		if len(buf) == cap(buf) { // grow, wiping the old array
			nb := make([]byte, len(buf), 2*cap(buf))
			copy(nb, buf)
			clear(buf)
			buf = nb
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		if err != nil {
			c.readError("environ", path, &os.PathError{Op: "read", Path: path, Err: err})
			return
		}
		if n == 0 {
			break
		}
		buf = buf[:len(buf)+n]
	}
	st.envVars = st.envVars[:0]
	proc.NCCLEnv(buf, func(name string, value []byte) {
		v := strings.ToValidUTF8(string(value), "\uFFFD")
		st.envVars = append(st.envVars, envVar{name: name, value: v, s: c.nccl.With(st.pidS, st.comm, name, v)})
	})
	// The launcher's sizes give a verdict only; their values are not kept.
	st.need = needFromEnv(st.envVars, proc.MultiNode(buf))
	st.envDone = true
}
