package proc

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// RootResolver.Exists (openat2) and LookupInRoot (lstat walk) resolve paths inside
// a process root the same way, and never outside it.
func TestExistsInRoot(t *testing.T) {
	tmp := t.TempDir()
	root := filepath.Join(tmp, "root")
	outside := filepath.Join(tmp, "outside")
	mk := func(p string) {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ln := func(target, p string) {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	mk(filepath.Join(outside, "uverbs0"))
	mk(filepath.Join(root, "dev/infiniband/uverbs0"))
	mk(filepath.Join(root, "run/ib/uverbs9"))
	os.MkdirAll(filepath.Join(root, "dev/infiniband/uverbs5"), 0o755)
	ln(outside+"/uverbs0", filepath.Join(root, "dev/infiniband/uverbs1"))                                                    // absolute, escapes
	ln(strings.Repeat("../", 12)+strings.TrimPrefix(outside, "/")+"/uverbs0", filepath.Join(root, "dev/infiniband/uverbs2")) // relative, escapes
	ln("/run/ib/uverbs9", filepath.Join(root, "dev/infiniband/uverbs3"))                                                     // absolute, in the root
	ln("../../run/ib/uverbs9", filepath.Join(root, "dev/infiniband/rdma_cm"))                                                // relative, in the root
	ln("uverbs4", filepath.Join(root, "dev/infiniband/uverbs4"))                                                             // loop
	ln("/proc/self/root/"+strings.TrimPrefix(outside, "/")+"/uverbs0", filepath.Join(root, "dev/infiniband/uverbs6"))
	ln(outside, filepath.Join(root, "dev/ib2")) // a directory outside
	want := map[string]bool{
		"dev/infiniband/uverbs0": true, "dev/infiniband/uverbs1": false, "dev/infiniband/uverbs2": false,
		"dev/infiniband/uverbs3": true, "dev/infiniband/rdma_cm": true, "dev/infiniband/uverbs4": false,
		"dev/infiniband/uverbs5": false, "dev/infiniband/uverbs6": false, "dev/infiniband/uverbs7": false,
		"dev/ib2/uverbs0": false, "dev/infiniband/uverbs0/x": false, "../outside/uverbs0": false,
	}
	var c RootResolver
	fd, err := OpenRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	for rel, w := range want {
		got, err := LookupInRoot(root, rel)
		if err != nil || got != w {
			t.Errorf("LookupInRoot(%s) = %v, %v; want %v", rel, got, err, w)
		}
		got, err = c.Exists(fd, root, rel)
		if err != nil || got != w {
			t.Errorf("Exists(%s) = %v, %v; want %v", rel, got, err, w)
		}
	}
	if c.NoOpenat2 {
		t.Log("openat2 not available here: Exists used the lstat walk")
	}
	// Through the real magic link of this process's root.
	fd2, err := OpenRoot("/proc/self/root")
	if err != nil {
		t.Skip(err)
	}
	defer syscall.Close(fd2)
	for rel, w := range map[string]bool{"dev/null": true, "dev": false, "dev/infiniband/no-such-node": false} {
		if got, err := c.Exists(fd2, "/proc/self/root", rel); err != nil || got != w {
			t.Errorf("/proc/self/root %s: %v, %v; want %v", rel, got, err, w)
		}
		if got, err := LookupInRoot("/proc/self/root", rel); err != nil || got != w {
			t.Errorf("LookupInRoot /proc/self/root %s: %v, %v; want %v", rel, got, err, w)
		}
	}
}
