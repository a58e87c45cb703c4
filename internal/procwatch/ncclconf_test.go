package procwatch

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
)

// NCCL's configuration files, as NCCL reads them: the environment wins,
// then NCCL_CONF_FILE (or ~/.nccl.conf), then /etc/nccl.conf; each read
// inside the process's root, so a tenant's symlink to a host path reads
// the tenant's own file (or nothing), never the host's.
func TestNCCLConfFiles(t *testing.T) {
	tr := newTree(t)
	host := filepath.Join(t.TempDir(), "host-secret")
	os.WriteFile(host, []byte("NCCL_RAS_ADDR=10.0.0.1:10250\n"), 0o644)
	write := func(pid, rel, body string) {
		p := filepath.Join(tr.dir, pid, "root", rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(body), 0o644)
	}
	env := func(pid, body string) { os.WriteFile(filepath.Join(tr.dir, pid, "environ"), []byte(body), 0o644) }

	// 100: /etc/nccl.conf sets RAS's address and a socket interface; the
	// environment sets the interface itself (it wins).
	tr.proc(100, 100, "serve")
	env("100", "NCCL_SOCKET_IFNAME=eth0\x00HOME=/root\x00")
	write("100", "etc/nccl.conf", "# site defaults\nNCCL_SOCKET_IFNAME=bond0\nNCCL_RAS_ADDR=0.0.0.0:28100\nNCCL_RAS_ADDR=0.0.0.0:1\nGARBAGE LINE\n")
	// 200: NCCL_CONF_FILE names a file that wins over /etc/nccl.conf.
	tr.proc(200, 200, "serve")
	env("200", "NCCL_CONF_FILE=/opt/job/nccl.conf\x00")
	write("200", "opt/job/nccl.conf", "NCCL_RAS_ENABLE=0\n")
	write("200", "etc/nccl.conf", "NCCL_RAS_ENABLE=1\nNCCL_IB_HCA=mlx5_0\n")
	// 300: ~/.nccl.conf of its user (from the root's /etc/passwd; the
	// fixture's files belong to the test's uid).
	tr.proc(300, 300, "serve")
	env("300", "")
	uid := os.Getuid() // the fixture's /proc/300 belongs to the test's user
	write("300", "etc/passwd", "serve:x:"+strconv.Itoa(uid)+":100::/home/serve:/bin/sh\n")
	write("300", "home/serve/.nccl.conf", "NCCL_RAS_ADDR=127.0.0.1:28300\n")
	write("300", "etc/nccl.conf", "NCCL_RAS_ADDR=127.0.0.1:1\n")
	// 400: a tenant's /etc/nccl.conf is an absolute symlink to a host
	// path; a relative NCCL_CONF_FILE is not read.
	tr.proc(400, 400, "serve")
	env("400", "")
	os.MkdirAll(filepath.Join(tr.dir, "400", "root", "etc"), 0o755)
	os.Symlink(host, filepath.Join(tr.dir, "400", "root", "etc", "nccl.conf"))
	tr.proc(500, 500, "serve")
	env("500", "NCCL_CONF_FILE=job/nccl.conf\x00")
	// 600: /etc/nccl.conf is a FIFO: never a blocking read.
	tr.proc(600, 600, "serve")
	env("600", "")
	os.MkdirAll(filepath.Join(tr.dir, "600", "root", "etc"), 0o755)
	if err := mkfifo(filepath.Join(tr.dir, "600", "root", "etc", "nccl.conf")); err != nil {
		t.Fatal(err)
	}

	w := New(Options{Procfs: tr.dir, Cmdline: regexp.MustCompile(`^serve`), Max: 8}, Sources{})
	w.IO.Getpid = func() int { return 1 }
	w.Refresh(context.Background())
	s := w.Snapshot()
	get := func(pid int, name string) string {
		p := s.Process(pid, 0)
		if p == nil {
			t.Fatalf("process %d not in the table", pid)
		}
		v, ok := p.Getenv(name)
		if !ok {
			return "<unset>"
		}
		return v
	}
	for _, c := range []struct {
		pid        int
		name, want string
	}{
		{100, "NCCL_SOCKET_IFNAME", "eth0"},
		{100, "NCCL_RAS_ADDR", "0.0.0.0:28100"},
		{200, "NCCL_RAS_ENABLE", "0"},
		{200, "NCCL_IB_HCA", "mlx5_0"},
		{300, "NCCL_RAS_ADDR", "127.0.0.1:28300"},
		{400, "NCCL_RAS_ADDR", "<unset>"},
		{500, "NCCL_RAS_ADDR", "<unset>"},
		{600, "NCCL_RAS_ADDR", "<unset>"},
	} {
		if got := get(c.pid, c.name); got != c.want {
			t.Errorf("pid %d %s = %q, want %q", c.pid, c.name, got, c.want)
		}
	}
	if p := s.Process(100, 0); !slices.Equal(p.ConfFrom, []string{"NCCL_RAS_ADDR"}) || p.ConfUnread != "" {
		t.Errorf("100: from the files %v, unread %q", p.ConfFrom, p.ConfUnread)
	}
	if p := s.Process(500, 0); p.ConfUnread == "" {
		t.Error("500: a relative NCCL_CONF_FILE is not said unread")
	}
	if p := s.Process(600, 0); p.ConfUnread == "" {
		t.Error("600: a FIFO is not said unread")
	}
}
