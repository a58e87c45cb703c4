package proc

import (
	"os"

	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// File is an open /proc file read sequentially (numa_maps, environ,
// cmdline, cgroup: files read whole, unlike stat and status, which a
// sysfs.Reader keeps open and re-reads with pread).
type File interface {
	Read(b []byte) (int, error)
	Close() error
}

// Open opens a /proc file for sequential reads (a sysfs.FD: read(2) on a
// raw descriptor, no os.File, no runtime poller).
func Open(path string) (File, error) {
	f, err := sysfs.Open(path)
	if err != nil {
		return nil, err
	}
	return f.(sysfs.FD), nil
}

// ReadInto reads path, opened with open, into buf until EOF or buf is
// full; it returns the bytes read. A read error is an *os.PathError.
func ReadInto(open func(string) (File, error), path string, buf []byte) (int, error) {
	f, err := open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	for n < len(buf) {
		m, err := f.Read(buf[n:])
		if err != nil {
			return n, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			break
		}
		n += m
	}
	return n, nil
}
