package sysfs

import (
	"errors"
	"os"
	"syscall"
	"testing"
)

// The ioctl source works on this machine's own interfaces: loopback has no
// driver statistics (EOPNOTSUPP), a physical or virtio NIC has some.
func TestIoctlEthtoolOnHost(t *testing.T) {
	src := NewIoctlEthtool()
	if _, err := src.Stats("lo"); err == nil || !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Errorf("Stats(lo) = %v, want EOPNOTSUPP", err)
	}
	if _, err := src.Stats("no-such-if0"); err == nil {
		t.Error("Stats of a missing interface succeeded")
	}
	ifs, _ := os.ReadDir("/sys/class/net")
	for _, i := range ifs {
		if _, err := os.Stat("/sys/class/net/" + i.Name() + "/device"); err != nil {
			continue
		}
		stats, err := src.Stats(i.Name())
		if errors.Is(err, syscall.EOPNOTSUPP) {
			continue
		}
		if err != nil {
			t.Errorf("Stats(%s): %v", i.Name(), err)
			continue
		}
		t.Logf("%s: %d driver statistics", i.Name(), len(stats))
		return
	}
	t.Log("no NIC with driver statistics on this host")
}
