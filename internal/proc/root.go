package proc

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Lookups inside a process's root (/proc/PID/root, its mount namespace).

// maxSymlinks bounds the symlinks followed resolving a path in a root.
const maxSymlinks = 40

// OpenRoot opens a directory (a process's /proc/PID/root) as an O_PATH
// descriptor for RootResolver.Exists; the caller closes it with unix.Close.
func OpenRoot(path string) (int, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}

// RootResolver looks paths up inside a process's root. openat2(2) with
// RESOLVE_IN_ROOT does it in the kernel; where it is missing (kernel < 5.6)
// or filtered (seccomp: ENOSYS or EPERM), the resolver falls back, for good,
// to LookupInRoot. The zero value is ready; it is not safe for concurrent
// use.
type RootResolver struct {
	// NoOpenat2 is set once openat2 was found missing, or by a caller that
	// wants the lstat walk.
	NoOpenat2 bool
}

// Exists reports whether rel exists, and is not a directory, inside the
// root directory rootFD (path root), resolving symlinks as the process
// sees them: absolute targets from its root, ".." never above it. Nothing
// outside the root is ever looked up.
func (r *RootResolver) Exists(rootFD int, root, rel string) (bool, error) {
	if !r.NoOpenat2 {
		how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
		fd, err := unix.Openat2(rootFD, rel, &how)
		switch {
		case err == nil:
			var st unix.Stat_t
			err = unix.Fstat(fd, &st)
			unix.Close(fd)
			if err != nil {
				return false, &os.PathError{Op: "fstat", Path: root + "/" + rel, Err: err}
			}
			return st.Mode&unix.S_IFMT != unix.S_IFDIR, nil
		case err == unix.ENOSYS || err == unix.EPERM:
			r.NoOpenat2 = true
		case err == unix.ENOENT || err == unix.ENOTDIR || err == unix.ELOOP || err == unix.EXDEV:
			return false, nil
		default:
			return false, &os.PathError{Op: "openat2", Path: root + "/" + rel, Err: err}
		}
	}
	return LookupInRoot(root, rel)
}

// LookupInRoot is RootResolver.Exists by hand: every component is checked
// with lstat and symlinks are resolved against root, never followed by the
// kernel.
func LookupInRoot(root, rel string) (bool, error) {
	var cur []string
	todo := strings.Split(rel, "/")
	links := 0
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			if len(cur) > 0 {
				cur = cur[:len(cur)-1]
			}
			continue
		}
		p := root + "/" + strings.Join(append(cur, name), "/")
		fi, err := os.Lstat(p)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				return false, nil
			}
			return false, err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			if links++; links > maxSymlinks {
				return false, nil
			}
			target, err := os.Readlink(p)
			if err != nil {
				return false, err
			}
			if strings.HasPrefix(target, "/") {
				cur = cur[:0]
			}
			todo = append(strings.Split(target, "/"), todo...)
			continue
		}
		if len(todo) == 0 {
			return !fi.IsDir(), nil
		}
		if !fi.IsDir() {
			return false, nil
		}
		cur = append(cur, name)
	}
	return false, nil
}

// ErrNoSafeRoot: the kernel cannot open a file inside a root with
// RESOLVE_IN_ROOT (openat2 missing before 5.6, or filtered). A file of a
// process's root is then left unread: a tenant's symlink could otherwise
// lead the exporter's open to the host's files.
var ErrNoSafeRoot = errors.New("openat2 with RESOLVE_IN_ROOT is not available")

// ReadFileInRoot reads a regular file of at most max bytes at rel inside
// the root directory rootFD (path root), resolving rel as the process
// sees it (absolute symlinks from its root, ".." never above it), in the
// kernel only. A missing file is os.ErrNotExist; a FIFO, device or
// directory, or a file larger than max, an error: never a blocking read.
func (r *RootResolver) ReadFileInRoot(rootFD int, root, rel string, max int) ([]byte, error) {
	if r.NoOpenat2 {
		return nil, ErrNoSafeRoot
	}
	how := unix.OpenHow{Flags: unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	path := root + "/" + strings.TrimLeft(rel, "/")
	fd, err := unix.Openat2(rootFD, rel, &how)
	switch {
	case err == nil:
	case err == unix.ENOSYS || err == unix.EPERM:
		r.NoOpenat2 = true
		return nil, ErrNoSafeRoot
	case err == unix.ENOENT || err == unix.ENOTDIR || err == unix.ELOOP || err == unix.EXDEV:
		return nil, &os.PathError{Op: "openat2", Path: path, Err: os.ErrNotExist}
	default:
		return nil, &os.PathError{Op: "openat2", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &os.PathError{Op: "read", Path: path, Err: errors.New("not a regular file")}
	}
	buf := make([]byte, max+1)
	n := 0
	for n < len(buf) {
		m, err := f.Read(buf[n:])
		n += m
		if err != nil {
			break
		}
	}
	if n > max {
		return nil, &os.PathError{Op: "read", Path: path, Err: errors.New("larger than " + strconv.Itoa(max) + " bytes")}
	}
	return buf[:n], nil
}
