package sysfs

import (
	"bytes"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

var direntBufs = sync.Pool{New: func() any { return new([32 << 10]byte) }}

// ScanDir calls fn with the name of every entry of dir (not "." and
// ".."), read with raw getdents calls into a pooled buffer: no allocation
// per entry, for directories listed on every scrape (/proc, sysfs class
// directories). name is only valid during the call.
func ScanDir(dir string, fn func(name []byte)) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	buf := direntBufs.Get().(*[32 << 10]byte)
	defer direntBufs.Put(buf)
	for {
		n, err := unix.Getdents(fd, buf[:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "getdents", Path: dir, Err: err}
		}
		if n <= 0 {
			return nil
		}
		for off := 0; off+19 <= n; {
			// struct linux_dirent64: ino 8, off 8, reclen 2, type 1, name.
			reclen := int(buf[off+16]) | int(buf[off+17])<<8
			if reclen < 19 || off+reclen > n {
				break
			}
			name := buf[off+19 : off+reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if !(len(name) == 1 && name[0] == '.') && !(len(name) == 2 && name[0] == '.' && name[1] == '.') {
				fn(name)
			}
			off += reclen
		}
	}
}

// DirHash folds the entry names of dir into an FNV-1a hash (order as the
// kernel lists them, which is stable while the directory is unchanged).
func DirHash(dir string, h uint64) (uint64, error) {
	const prime = 1099511628211
	err := ScanDir(dir, func(name []byte) {
		for _, c := range name {
			h ^= uint64(c)
			h *= prime
		}
		h ^= 0xff
		h *= prime
	})
	return h, err
}
