package procwatch

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

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
	w.readNCCLConf(st)
}

// readNCCLConf adds the allow-listed variables NCCL takes from its
// configuration files (proc.ParseNCCLConf) that the environment does not
// set: NCCL_CONF_FILE's (an absolute path) or the user's ~/.nccl.conf,
// then /etc/nccl.conf, each read inside the process's root only
// (openat2 RESOLVE_IN_ROOT: a tenant's symlink never leads outside it).
// ConfFrom names the variables they set; ConfUnread says why a file
// could not be read (its variables are then unknown, not unset).
func (w *Watcher) readNCCLConf(st *procState) {
	st.ConfFrom, st.ConfUnread = nil, ""
	var files []string
	if f, ok := st.Getenv("NCCL_CONF_FILE"); ok && f != "" {
		if !strings.HasPrefix(f, "/") {
			st.ConfUnread = "NCCL_CONF_FILE is a relative path (read from the process's working directory): not read"
		} else {
			files = append(files, f)
		}
	} else {
		files = append(files, "") // ~/.nccl.conf, once the home is known
	}
	files = append(files, "/etc/nccl.conf")
	root := st.dir + "/root"
	rootFD, err := w.IO.OpenRoot(root)
	if err != nil {
		st.ConfUnread = "its root cannot be opened: " + err.Error()
		return
	}
	defer unix.Close(rootFD)
	for _, f := range files {
		if f == "" {
			var fi unix.Stat_t
			if unix.Stat(st.dir, &fi) != nil {
				continue
			}
			pw, err := w.IO.Roots.ReadFileInRoot(rootFD, root, "etc/passwd", 1<<20)
			if err != nil {
				continue // no passwd: getpwuid fails in NCCL too
			}
			home := proc.PasswdHome(pw, fi.Uid)
			if home == "" || !strings.HasPrefix(home, "/") {
				continue
			}
			f = strings.TrimRight(home, "/") + "/.nccl.conf"
		}
		b, err := w.IO.Roots.ReadFileInRoot(rootFD, root, strings.TrimLeft(f, "/"), proc.MaxNCCLConf)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			st.ConfUnread = f + ": " + err.Error()
			continue
		}
		proc.ParseNCCLConf(b, func(name, value []byte) {
			if !proc.NCCLEnvAllowed(name) || name == nil {
				return
			}
			if _, set := st.Getenv(string(name)); set {
				return // the environment, or an earlier file, wins
			}
			if len(value) > proc.MaxEnvValue {
				value = value[:proc.MaxEnvValue]
			}
			st.Env = append(st.Env, EnvVar{Name: string(name), Value: strings.ToValidUTF8(string(value), "\uFFFD")})
			st.ConfFrom = append(st.ConfFrom, string(name))
		})
	}
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
