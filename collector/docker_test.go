package collector

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"

	"github.com/fabric-exporter/fabric_exporter/internal/dockerapi"
	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
)

const fixtureDockerID = "f6f6b9c6a78875c26e65a60448dec9ec0d21dcc5e801662a1444eabcdb85255e" // pid 4311's container

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// newDockerProcess is the process collector on proc with
// --collector.process.docker-host=host, logging into the returned buffer.
func newDockerProcess(t *testing.T, proc, host string) (*processCollector, *syncBuf) {
	t.Helper()
	logs := &syncBuf{}
	l := level.NewFilter(log.NewLogfmtLogger(logs), level.AllowDebug())
	env := Env{Logger: l, Families: testFamilies, ReadErrors: &exposition.Counter{}, Once: NewOnceLogger(l, 1024)}
	o := processOptions(t, proc)
	o.Process.DockerHost = host
	c, err := newProcessCollector(env, o)
	if err != nil {
		t.Fatal(err)
	}
	pc := c.(*processCollector)
	t.Cleanup(pc.Close)
	return pc, logs
}

// A dead daemon (no socket) and a slow one (accepts, never answers): every
// scrape returns at once with container_name empty, and the failure costs
// one log line.
func TestDockerNamesDeadAndSlow(t *testing.T) {
	dir, err := os.MkdirTemp("", "dock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	slow := filepath.Join(dir, "slow.sock")
	l, err := net.Listen("unix", slow)
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	for _, host := range []string{"unix://" + filepath.Join(dir, "none.sock"), "unix://" + slow} {
		c, logs := newDockerProcess(t, fixtureProc, host)
		c.docker.timeout = 300 * time.Millisecond
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(logs.String(), "cannot look up container names") {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no warning; log:\n%s", host, logs)
			}
			t0 := time.Now()
			out, err := processScrape(t, c)
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(t0); d > 200*time.Millisecond {
				t.Errorf("%s: a scrape took %s", host, d)
			}
			want := `fabric_process_container_info{comm="sglang::schedul",container_id="` + fixtureDockerID + `",container_name="",pid="4311",pod_uid="",runtime="docker"} 1`
			hasLine(t, out, want)
			time.Sleep(20 * time.Millisecond)
		}
		for range 5 {
			processScrape(t, c)
		}
		if n := strings.Count(logs.String(), "cannot look up container names"); n != 1 {
			t.Errorf("%s: %d warnings, want 1:\n%s", host, n, logs)
		}
		// containerd and cri-o containers are never looked up.
		c.docker.mu.Lock()
		for id := range c.docker.cache {
			if id != fixtureDockerID {
				t.Errorf("%s: looked up %s", host, id)
			}
		}
		c.docker.mu.Unlock()
	}
}

// Against a real dockerd (CI: deploy/docker/test-image.sh sets
// FABRIC_TEST_DOCKER_HOST and FABRIC_TEST_DOCKER_CONTAINER to the container
// it runs): a process whose /proc/PID/cgroup is the container's real one is
// attributed to it, with its name.
func TestDockerNamesRealDaemon(t *testing.T) {
	host, name := os.Getenv("FABRIC_TEST_DOCKER_HOST"), os.Getenv("FABRIC_TEST_DOCKER_CONTAINER")
	if host == "" || name == "" {
		t.Skip("no FABRIC_TEST_DOCKER_HOST/FABRIC_TEST_DOCKER_CONTAINER (deploy/docker/test-image.sh runs this test against a real dockerd)")
	}
	cli, err := dockerapi.New(host)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := cli.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	id := r.ID
	if r.Pid == 0 || r.Name != name {
		t.Fatalf("container %s: %+v (not running, or another name)", name, r)
	}
	// The container's process's real /proc/PID/cgroup, as pid 4311's.
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", r.Pid))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("/proc/%d/cgroup:\n%s", r.Pid, cg)
	proc := copyTree(t, fixtureProc)
	if err := os.WriteFile(filepath.Join(proc, "4311", "cgroup"), cg, 0o644); err != nil {
		t.Fatal(err)
	}
	c, logs := newDockerProcess(t, proc, host)
	want := `fabric_process_container_info{comm="sglang::schedul",container_id="` + id + `",container_name="` + name + `",pid="4311",pod_uid="",runtime="docker"} 1`
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := processScrape(t, c)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s\n%s\nlog:\n%s", want, strings.Join(grepLines(out, "fabric_process_container_info"), "\n"), logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if strings.Contains(logs.String(), "cannot look up") {
		t.Errorf("warning with a working daemon:\n%s", logs)
	}
}
