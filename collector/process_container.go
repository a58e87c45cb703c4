package collector

import (
	"fmt"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/proc"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// Container labels: the container of a process from /proc/PID/cgroup
// (proc.ParseCgroupFile, re-read every --collector.process.numa-maps-
// interval) and, with --collector.process.docker-host, its Docker name
// (dockerNames, docker.go).

// readCgroup reads the container of a process. A file that cannot be read
// or parsed leaves the process without a container: no label rather than a
// wrong one.
func (c *processCollector) readCgroup(st *procState) {
	path := st.dir + "/cgroup"
	if c.cgBuf == nil {
		c.cgBuf = make([]byte, proc.MaxCgroupFile+1)
	}
	n, err := proc.ReadInto(c.open, path, c.cgBuf)
	if err == nil && n > proc.MaxCgroupFile {
		err = fmt.Errorf("%w: %s is larger than %d bytes", sysfs.ErrGarbage, path, proc.MaxCgroupFile)
	}
	if err != nil {
		c.readError("cgroup", path, err)
		st.inCont, st.contInfo = false, nil
		return
	}
	ref, ok := proc.ParseCgroupFile(c.cgBuf[:n])
	if !ok {
		st.inCont, st.contInfo = false, nil
		return
	}
	if !st.inCont || ref != st.cont {
		st.cont, st.inCont, st.contName = ref, true, ""
		st.contInfo = c.containerSeries(st)
	}
}

// containerSeries binds a process's container series. container_name is
// always a label of the family (one family per name in this process), empty
// without --collector.process.docker-host.
func (c *processCollector) containerSeries(st *procState) *exposition.Series {
	return c.container.With(st.pidS, st.comm, st.cont.Runtime, st.cont.ID, st.cont.PodUID, st.contName)
}

// containerName refreshes the Docker name of a process's container from
// the cache (never waiting for the daemon) and rebinds its series when it
// changed.
func (c *processCollector) containerName(st *procState) {
	if c.docker == nil || !st.inCont || (st.cont.Runtime != proc.RuntimeDocker && st.cont.Runtime != proc.RuntimePodman) {
		return
	}
	if name := kubeLabel(c.docker.Name(st.cont.ID)); name != st.contName {
		st.contName = name
		st.contInfo = c.containerSeries(st)
	}
}
