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
	buf, err := readEnvironInto(c.open, path, c.envBuf)
	defer func() { c.envBuf = wipeEnviron(buf) }()
	if err != nil {
		c.readError("environ", path, err)
		return
	}
	st.envVars = st.envVars[:0]
	proc.NCCLEnv(buf, func(name string, value []byte) {
		v := strings.ToValidUTF8(string(value), "\uFFFD")
		st.envVars = append(st.envVars, envVar{name: name, value: v, s: c.nccl.With(st.pidS, st.comm, name, v)})
	})
	var invalid string
	if st.rasAddr, invalid = rasAddrOf(st.envVars); invalid != "" {
		c.env.Once.Debug("ras-addr", "msg", "NCCL_RAS_ADDR is not an IP address or localhost with a port; not queried", "pid", st.pid, "value", invalid)
	}
	// The launcher's sizes give a verdict only; their values are not kept.
	st.need = needFromEnv(st.envVars, proc.MultiNode(buf))
	st.envDone = true
}

// readEnvironInto reads an environment block (/proc/PID/environ, at most
// maxEnviron bytes) into buf's array, growing it and wiping every array it
// leaves behind. The caller hands the result, also on error, to
// wipeEnviron.
func readEnvironInto(open func(string) (proc.File, error), path string, buf []byte) ([]byte, error) {
	if buf == nil {
		buf = make([]byte, 0, 16<<10)
	}
	buf = buf[:0]
	f, err := open(path)
	if err != nil {
		return buf, err
	}
	defer f.Close()
	for len(buf) < maxEnviron {
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

// wipeEnviron clears an environment buffer and returns it for reuse (nil
// when it grew beyond envKeep).
func wipeEnviron(buf []byte) []byte {
	clear(buf[:cap(buf)])
	if cap(buf) > envKeep {
		return nil
	}
	return buf[:0]
}
