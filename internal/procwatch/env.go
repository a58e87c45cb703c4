package procwatch

import (
	"fmt"
	"strings"

	"github.com/fabric-exporter/fabric_exporter/internal/proc"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// The environment and the container of a process.
//
// Environments hold secrets: only the allow-listed NCCL variables
// (proc.NCCLEnv) are kept, and the buffer that held the rest is wiped. The
// environment is the one at exec and does not change: read once per
// process. The container comes from /proc/PID/cgroup
// (proc.ParseCgroupFile), re-read every Options.Slow.

// readEnviron reads the allow-listed NCCL variables and the launcher's
// multi-node verdict of a process. The buffer is wiped after use.
func (w *Watcher) readEnviron(st *procState) {
	path := st.dir + "/environ"
	buf, err := proc.ReadEnviron(w.IO.Open, path, w.envBuf)
	defer func() { w.envBuf = proc.WipeEnviron(buf) }()
	if err != nil {
		w.readError(FileEnviron, path, err)
		return
	}
	var env []EnvVar
	proc.NCCLEnv(buf, func(name string, value []byte) {
		env = append(env, EnvVar{Name: name, Value: strings.ToValidUTF8(string(value), "\uFFFD")})
	})
	// The launcher's sizes give a verdict only; their values are not kept.
	st.Env, st.MultiNode, st.EnvRead = env, proc.MultiNode(buf), true
}

// readCgroup reads the container of a process. A file that cannot be read
// or parsed leaves the process without a container: no label rather than a
// wrong one.
func (w *Watcher) readCgroup(st *procState) {
	path := st.dir + "/cgroup"
	if w.cgBuf == nil {
		w.cgBuf = make([]byte, proc.MaxCgroupFile+1)
	}
	n, err := proc.ReadInto(w.IO.Open, path, w.cgBuf)
	if err == nil && n > proc.MaxCgroupFile {
		err = fmt.Errorf("%w: %s is larger than %d bytes", sysfs.ErrGarbage, path, proc.MaxCgroupFile)
	}
	if err != nil {
		w.readError(FileCgroup, path, err)
		st.InContainer, st.Container = false, proc.Container{}
		return
	}
	st.Container, st.InContainer = proc.ParseCgroupFile(w.cgBuf[:n])
}
