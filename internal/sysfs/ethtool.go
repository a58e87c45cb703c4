package sysfs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/safchain/ethtool"
)

// EthtoolSource returns the driver statistics of a network interface, as
// `ethtool -S` prints them (raw driver names).
type EthtoolSource interface {
	Stats(netdev string) (map[string]uint64, error)
}

// ioctlEthtool reads statistics with the ETHTOOL_GSTATS ioctl through one
// long-lived socket (safchain/ethtool), opened on first use.
type ioctlEthtool struct {
	mu  sync.Mutex
	e   *ethtool.Ethtool
	err error
}

// NewIoctlEthtool returns the ioctl implementation of EthtoolSource.
func NewIoctlEthtool() EthtoolSource { return &ioctlEthtool{} }

func (s *ioctlEthtool) Stats(netdev string) (map[string]uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.e == nil {
		s.e, s.err = ethtool.NewEthtool()
		if s.err != nil {
			e := s.err
			s.e, s.err = nil, nil // try again next scrape
			return nil, fmt.Errorf("opening ethtool socket: %w", e)
		}
	}
	return s.e.Stats(netdev)
}

// FileEthtool reads `ethtool -S <netdev>` output saved as DIR/<netdev>. It
// stands in for the ioctl in tests and in `make demo`; a missing file
// behaves like a driver without statistics (EOPNOTSUPP).
type FileEthtool struct{ Dir string }

func (f FileEthtool) Stats(netdev string) (map[string]uint64, error) {
	if netdev == "" || strings.ContainsAny(netdev, "/\x00") {
		return nil, fmt.Errorf("bad interface name %q", netdev)
	}
	b, err := os.ReadFile(filepath.Join(f.Dir, netdev))
	if err != nil {
		if os.IsNotExist(err) {
			return nil, syscall.EOPNOTSUPP
		}
		return nil, err
	}
	return ParseEthtoolStats(b)
}

// ParseEthtoolStats parses `ethtool -S` text: a "NIC statistics:" header and
// "name: value" lines. Names may hold spaces and dots; the value follows the
// last ": ". Lines that are not stats are skipped; a later duplicate name
// wins, as in the ioctl library.
func ParseEthtoolStats(b []byte) (map[string]uint64, error) {
	out := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		i := strings.LastIndex(line, ": ")
		if i <= 0 {
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSpace(line[i+2:]), 10, 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
