// Package sysfs reads the kernel's attribute files under --path.sysfs (and
// small /proc files) the way a scrape every few seconds needs: files kept
// open and re-read with pread(2) (Reader), opens confined to the root where
// the kernel allows it (openat2 RESOLVE_BENEATH), allocation-free directory
// scans (ScanDir), a cache of class-directory entries rebuilt when their link
// changes (ClassCache), the value formats sysfs prints (ParseUint, ParseRate,
// ParseState; "N/A" is ErrNotAvailable, anything else unparsable
// ErrGarbage), and ethtool driver statistics (EthtoolSource). It knows
// nothing about metrics.
package sysfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// File is an open sysfs attribute. ReadAt at offset 0 returns the
// attribute's current value: sysfs runs the attribute's show() again for a
// read from offset 0, so a file can stay open across scrapes.
type File interface {
	ReadAt(b []byte, off int64) (int, error)
	Close() error
}

// FD is an open file descriptor read with pread(2) (ReadAt) or read(2)
// (Read), retrying on EINTR.
type FD int

func (f FD) ReadAt(b []byte, off int64) (int, error) {
	for {
		n, err := unix.Pread(int(f), b, off)
		if err == unix.EINTR {
			continue
		}
		return n, err
	}
}

// Read reads from the current offset (large /proc files read in chunks).
func (f FD) Read(b []byte) (int, error) {
	for {
		n, err := unix.Read(int(f), b)
		if err == unix.EINTR {
			continue
		}
		return n, err
	}
}

func (f FD) Close() error { return unix.Close(int(f)) }

// Open opens path read-only (an FD), following symlinks.
func Open(path string) (File, error) {
	for {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return FD(fd), nil
	}
}

// Reader reads small sysfs attribute files and keeps them open between
// scrapes, so that reading a counter costs one pread(2) instead of
// open+read+close. A failed read closes and forgets the file; a device that
// disappears is re-opened when it comes back. Safe for concurrent use.
type Reader struct {
	mu      sync.Mutex
	files   map[string]File
	maxOpen int
	open    func(path string) (File, error)
	release func() // closes the confinement root's descriptor (NewReaderIn)
}

// fdBudget is the number of attribute files one Reader keeps open. Go
// raises the soft RLIMIT_NOFILE to the hard limit at startup; a quarter of
// it is left to each reader, capped.
// It is computed once, at package initialisation, and never changed.
var fdBudget = func() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur < 256 {
		return 0
	}
	return int(min(rl.Cur/4, 16384))
}()

// NewReader returns a reader that opens any path it is given.
func NewReader() *Reader { return NewReaderFunc(Open) }

// NewReaderFunc returns a reader that opens files with open (a wrapper of
// Open that injects faults, or another file system).
func NewReaderFunc(open func(path string) (File, error)) *Reader {
	return &Reader{files: map[string]File{}, maxOpen: fdBudget, open: open}
}

// NewReaderIn returns a reader confined to root (--path.sysfs) where the
// kernel allows it: a path outside root is refused (EXDEV), and with
// openat2 (Linux 5.6+) so is a path whose resolution leaves root — an
// absolute symlink, or a relative one climbing above it. Without openat2
// (older kernels, or a seccomp filter that refuses it: ENOSYS, EPERM) and
// while root cannot be opened, files are opened with a plain open(2), which
// follows such links: the confinement is then only the lexical check. The
// kernel's own sysfs links are relative and stay inside.
func NewReaderIn(root string) *Reader {
	r := NewReader()
	c := &confined{root: filepath.Clean(root)}
	r.open, r.release = c.open, c.close
	return r
}

type confined struct {
	root   string
	mu     sync.Mutex
	rootFD int // 0 until the root could be opened
}

// close releases the root directory's descriptor.
func (c *confined) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rootFD > 0 {
		unix.Close(c.rootFD)
		c.rootFD = 0
	}
}

// dir returns the root's descriptor, opening it until that succeeds (a
// --path.sysfs mounted after startup is picked up).
func (c *confined) dir() (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rootFD > 0 {
		return c.rootFD, nil
	}
	fd, err := unix.Open(c.root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	c.rootFD = fd
	return fd, nil
}

func (c *confined) open(path string) (File, error) {
	rel, err := filepath.Rel(c.root, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return nil, &os.PathError{Op: "open", Path: path, Err: syscall.EXDEV}
	}
	rootFD, err := c.dir()
	if err != nil {
		return Open(path)
	}
	how := &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS}
	for {
		fd, err := unix.Openat2(rootFD, rel, how)
		switch err {
		case nil:
			return FD(fd), nil
		case unix.EINTR, unix.EAGAIN:
			continue
		case unix.ENOSYS, unix.EPERM:
			// Kernels before 5.6 (or a seccomp filter) lack openat2.
			return Open(path)
		}
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
}

// ReadSmall returns the trimmed content of a small file below root (the
// sysfs root; links leaving it are not followed), "" when unreadable.
func ReadSmall(root, path string) string {
	c := &confined{root: filepath.Clean(root)}
	defer c.close()
	f, err := c.open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var buf [MaxAttrSize]byte
	n, _ := f.ReadAt(buf[:], 0)
	return string(bytes.TrimSpace(buf[:max(n, 0)]))
}

// MaxAttrSize bounds one attribute read; sysfs attributes are at most a page.
const MaxAttrSize = 4096

// Read returns the trimmed content of path, read into buf. The reader's
// lock is held for the whole read, so a file is never closed while another
// goroutine reads it.
func (r *Reader) Read(path string, buf []byte) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, cached := r.files[path]
	if !cached {
		var err error
		if f, err = r.open(path); err != nil {
			return nil, err
		}
	}
	n, err := f.ReadAt(buf, 0)
	if err == nil && n >= len(buf) {
		err = fmt.Errorf("value longer than %d bytes", len(buf))
	}
	if err != nil {
		f.Close()
		if cached {
			delete(r.files, path)
		}
		return nil, &os.PathError{Op: "read", Path: path, Err: err}
	}
	if !cached {
		if len(r.files) < r.maxOpen {
			r.files[path] = f
		} else {
			f.Close()
		}
	}
	return bytes.TrimSpace(buf[:n]), nil
}

// ReadString is Read for values kept as strings (labels).
func (r *Reader) ReadString(path string) (string, error) {
	var buf [MaxAttrSize]byte
	b, err := r.Read(path, buf[:])
	return string(b), err
}

// Forget closes the cached file of path.
func (r *Reader) Forget(path string) {
	r.mu.Lock()
	if f, ok := r.files[path]; ok {
		delete(r.files, path)
		f.Close()
	}
	r.mu.Unlock()
}

// ForgetPrefix closes every cached file below dir (a device that went away).
func (r *Reader) ForgetPrefix(dir string) {
	prefix := dir + string(filepath.Separator)
	r.mu.Lock()
	for p, f := range r.files {
		if strings.HasPrefix(p, prefix) {
			delete(r.files, p)
			f.Close()
		}
	}
	r.mu.Unlock()
}

// Close closes every cached file (and the confinement root); a later Read
// opens them again.
func (r *Reader) Close() {
	r.mu.Lock()
	for p, f := range r.files {
		delete(r.files, p)
		f.Close()
	}
	r.mu.Unlock()
	if r.release != nil {
		r.release()
	}
}

// OpenCount is the number of cached open files (for tests and benchmarks).
func (r *Reader) OpenCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.files)
}

// IsNotAvailable reports read outcomes that are not failures: the kernel
// says the value does not exist for this device (EINVAL for an empty GID
// entry or the speed of a link that is down, EOPNOTSUPP, ENODATA), or the
// driver printed "N/A" (ErrNotAvailable).
func IsNotAvailable(err error) bool {
	return errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EOPNOTSUPP) ||
		errors.Is(err, syscall.ENODATA) || errors.Is(err, ErrNotAvailable)
}

// IsGone reports errors that mean the file or its device went away.
func IsGone(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENODEV) ||
		errors.Is(err, syscall.ENXIO) || errors.Is(err, syscall.ESTALE)
}

// ErrNotAvailable marks a value that the driver reports as not available
// ("N/A", "N/A (no PMA)", an empty read).
var ErrNotAvailable = errors.New("value not available")

// ErrGarbage marks a value that is neither a number nor a known "not
// available" marker.
var ErrGarbage = errors.New("not a number")

// ParseUint parses an unsigned decimal counter as sysfs prints it.
// "N/A", "N/A (no PMA)" and empty values give ErrNotAvailable; anything
// else that is not a decimal number gives ErrGarbage.
func ParseUint(b []byte) (uint64, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || bytes.HasPrefix(b, []byte("N/A")) {
		return 0, ErrNotAvailable
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: %q", ErrGarbage, Truncate(b, 32))
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, fmt.Errorf("%w: %q overflows 64 bits", ErrGarbage, Truncate(b, 32))
		}
		v = v*10 + d
	}
	return v, nil
}

// ParseInt parses a signed decimal value (numa_node, speed).
func ParseInt(b []byte) (int64, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || bytes.HasPrefix(b, []byte("N/A")) {
		return 0, ErrNotAvailable
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q", ErrGarbage, Truncate(b, 32))
	}
	return v, nil
}

// Truncate returns at most the first n bytes of b (for error messages).
func Truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// ParseRate converts an InfiniBand port rate ("400 Gb/sec (4X NDR)",
// "2.5 Gb/sec (1X SDR)") to bytes per second.
func ParseRate(s string) (float64, error) {
	f := strings.Fields(s)
	if len(f) < 2 || f[1] != "Gb/sec" {
		return 0, fmt.Errorf("%w: rate %q", ErrGarbage, s)
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%w: rate %q", ErrGarbage, s)
	}
	return v * 1e9 / 8, nil
}

// ParseState splits "4: ACTIVE" into 4 and "ACTIVE".
func ParseState(s string) (int, string, error) {
	id, name, ok := strings.Cut(s, ":")
	if !ok {
		return 0, "", fmt.Errorf("%w: state %q", ErrGarbage, s)
	}
	n, err := strconv.Atoi(strings.TrimSpace(id))
	if err != nil {
		return 0, "", fmt.Errorf("%w: state %q", ErrGarbage, s)
	}
	return n, strings.TrimSpace(name), nil
}

// ReadLinkBase returns the last element of a symlink's target ("" if path
// is not a link).
func ReadLinkBase(path string) string {
	t, err := os.Readlink(path)
	if err != nil {
		return ""
	}
	return filepath.Base(t)
}

// pciAddressRE matches a PCI function's directory name (domain:bus:dev.fn).
var pciAddressRE = regexp.MustCompile(`^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// IsPCIAddress reports whether s is a PCI function's name (0000:9a:00.0).
func IsPCIAddress(s string) bool { return pciAddressRE.MatchString(s) }

// PCIFunction resolves a device link (class/net/X/device,
// class/infiniband/X/device) to the PCI function it sits on: the device
// itself, or its nearest PCI ancestor for a device on another bus (virtio,
// auxiliary). It returns the address (0000:00:03.0) and the function's
// directory, or "" when the device is not on PCI.
func PCIFunction(link string) (addr, dir string) {
	p, err := filepath.EvalSymlinks(link)
	if err != nil {
		return "", ""
	}
	for d := p; d != "/" && d != "." && d != ""; d = filepath.Dir(d) {
		if base := filepath.Base(d); pciAddressRE.MatchString(base) {
			return base, d
		}
		if filepath.Base(d) == "devices" {
			break
		}
	}
	return "", ""
}

// ListDir returns the names of entries of dir; with regular set, only
// regular files.
func ListDir(dir string, regular bool) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(ents))
	for _, e := range ents {
		if regular && !e.Type().IsRegular() {
			continue
		}
		out = append(out, e.Name())
	}
	return out, nil
}

// SanitizeName turns a kernel file name into a metric name fragment:
// lower case, [a-z0-9_] only. It returns "" for names that cannot become
// one (empty, or longer than 96 bytes).
func SanitizeName(s string) string {
	if s == "" || len(s) > 96 {
		return ""
	}
	b := make([]byte, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_':
			b[i] = c
		case c >= 'A' && c <= 'Z':
			b[i] = c + ('a' - 'A')
		default:
			b[i] = '_'
		}
	}
	return string(b)
}
