package collector

import (
	"github.com/fabric-exporter/fabric_exporter/internal/proc"
	"github.com/fabric-exporter/fabric_exporter/internal/procwatch"
)

// Container labels: the container of a process comes from its cgroup file
// (procwatch, re-read every --collector.process.numa-maps-interval) and,
// with --collector.process.docker-host, its Docker name (dockerNames,
// docker.go).

// containerName returns the Docker name of a process's container from the
// cache (never waiting for the daemon): "" without
// --collector.process.docker-host, for other runtimes, or until known.
func (c *processCollector) containerName(p *procwatch.Process) string {
	if c.docker == nil || !p.InContainer || (p.Container.Runtime != proc.RuntimeDocker && p.Container.Runtime != proc.RuntimePodman) {
		return ""
	}
	return kubeLabel(c.docker.Name(p.Container.ID))
}
