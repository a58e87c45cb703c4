package kmsg

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Relay copies the kernel log into a FIFO, record by record, for a reader
// that may not open the kernel's device itself (fabric_exporter
// relay-kmsg: a privileged container next to an unprivileged exporter,
// which reads the FIFO as a recording). It starts after the newest record,
// as Open does without fromStart, and writes each record whole, its
// dictionary lines included, as `cat /dev/kmsg` writes it.
//
// The reader may go away (the exporter restarts): the write then fails
// with EPIPE (Go reports EPIPE rather than dying of SIGPIPE on a
// descriptor other than stdout and stderr). The relay keeps its end of the
// FIFO open, so what the reader left unread stays in the pipe, waits for
// the next reader, writes the rest of the record and goes on from where it
// was in the kernel log: no record is lost or written twice while the
// kernel still holds it. Records the kernel overwrote meanwhile are
// skipped (EPIPE on the kernel's device; Stats.Lost), and logged.
type Relay struct {
	Input  string // the kernel log: /dev/kmsg, or a recording (tests)
	Output string // the FIFO; created mode 0644 where nothing is
	// Log gets key-value pairs (go-kit style) of what the relay does;
	// nil: nothing is logged.
	Log func(keyvals ...any)
	// Interval is how long the relay waits before looking again for a
	// reader of the FIFO, for more of a recording, and for a stop while
	// a write waits for the reader; 0: 200ms. The kernel's device is
	// waited on with poll(2), without a timeout.
	Interval time.Duration

	wait func(ctx context.Context) error // waits for input (tests); nil: by the input's kind
}

// Run relays until ctx is done (nil) or an error: the input cannot be
// opened or read, the FIFO cannot be made or opened. It opens the input
// first, so that a relay without the privilege fails before it creates
// anything.
func (rl *Relay) Run(ctx context.Context) error {
	src, err := Open(rl.Input, false)
	if err != nil {
		return inputError(err)
	}
	defer src.Close()
	if err := MakeFIFO(rl.Output); err != nil {
		return err
	}
	return rl.relay(ctx, src)
}

// inputError says what an input that cannot be opened needs.
func inputError(err error) error {
	switch {
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("%w: reading the kernel log needs CAP_SYSLOG where kernel.dmesg_restrict is 1, and in a container a device cgroup that allows the device: "+
			"run the relay as root in a privileged container (a hostPath device is denied to any other)", err)
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%w: mount the host's /dev/kmsg into the relay's container (hostPath, type CharDevice) or correct --input", err)
	}
	return err
}

// MakeFIFO creates a FIFO at path, mode 0644 whatever the umask (the
// reader runs as another user), unless a FIFO is there already. Anything
// else at path is an error: it is never replaced.
func MakeFIFO(path string) error {
	err := unix.Mkfifo(path, 0o644)
	if err == nil {
		return os.Chmod(path, 0o644)
	}
	if !errors.Is(err, unix.EEXIST) {
		return &os.PathError{Op: "mkfifo", Path: path, Err: err}
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if fi.Mode().Type() != os.ModeNamedPipe {
		return fmt.Errorf("%s exists and is not a FIFO (%s): the relay replaces nothing; remove it or choose another output", path, kindOf(fi.Mode()))
	}
	return nil
}

func kindOf(m os.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&os.ModeSymlink != 0:
		return "a symbolic link"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	}
	return m.Type().String()
}

func (rl *Relay) log(keyvals ...any) {
	if rl.Log != nil {
		rl.Log(keyvals...)
	}
}

func (rl *Relay) interval() time.Duration {
	if rl.Interval > 0 {
		return rl.Interval
	}
	return 200 * time.Millisecond
}

// sleep waits d or until ctx is done (its error).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// relay copies src to the FIFO until ctx is done or an error.
func (rl *Relay) relay(ctx context.Context, src *Reader) error {
	wait := rl.wait
	if wait == nil {
		w, done, err := rl.waitFor(ctx, src)
		if err != nil {
			return err
		}
		defer done()
		wait = w
	}
	rl.log("msg", "waiting for the reader of the FIFO", "input", rl.Input, "output", rl.Output)
	w, err := rl.openWriter(ctx)
	if err != nil {
		return stopped(err)
	}
	defer func() { w.Close() }()
	rl.log("msg", "relaying the kernel log", "input", rl.Input, "output", rl.Output)
	var rec []byte
	lost := src.Stats().Lost
	for {
		rec = rec[:0]
		if _, err := src.Poll(1, func(r *Record) { rec = append(rec, r.Raw...) }); err != nil {
			return fmt.Errorf("reading %s: %w", rl.Input, err)
		}
		if l := src.Stats().Lost; l > lost {
			rl.log("msg", "records lost: the kernel overwrote them before the relay read them", "records", l-lost)
			lost = l
		}
		if len(rec) == 0 {
			if err := wait(ctx); err != nil {
				return stopped(err)
			}
			continue
		}
		if rec[len(rec)-1] != '\n' {
			rec = append(rec, '\n')
		}
		if w, err = rl.write(ctx, w, rec); err != nil {
			return stopped(err)
		}
	}
}

// stopped is nil for the end of ctx, else err.
func stopped(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}

// waitFor returns how to wait for more input, and what to call when the
// relay is done with it: poll(2) on the kernel's device, woken by an
// eventfd when ctx ends; a pause of Interval for a recording (a regular
// file or FIFO is always readable, or hung up).
func (rl *Relay) waitFor(ctx context.Context, src *Reader) (wait func(context.Context) error, done func(), err error) {
	if !src.Device() {
		return func(ctx context.Context) error { return sleep(ctx, rl.interval()) }, func() {}, nil
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, nil, fmt.Errorf("eventfd: %w", err)
	}
	var mu sync.Mutex // the wake-up never writes to a closed (and reused) descriptor
	closed := false
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !closed {
			unix.Write(efd, binary.NativeEndian.AppendUint64(nil, 1))
		}
	})
	done = func() {
		stop()
		mu.Lock()
		defer mu.Unlock()
		closed = true
		unix.Close(efd)
	}
	fds := []unix.PollFd{{Fd: int32(src.fd), Events: unix.POLLIN}, {Fd: int32(efd), Events: unix.POLLIN}}
	wait = func(ctx context.Context) error {
		for {
			_, err := unix.Poll(fds, -1)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return fmt.Errorf("poll %s: %w", rl.Input, err)
			}
			return ctx.Err()
		}
	}
	return wait, done, nil
}

// openWriter opens the FIFO for writing once a reader has it open
// (without a reader a non-blocking open fails with ENXIO: tried again
// every Interval).
func (rl *Relay) openWriter(ctx context.Context) (*os.File, error) {
	for {
		f, err := os.OpenFile(rl.Output, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			if fi, err := f.Stat(); err != nil || fi.Mode().Type() != os.ModeNamedPipe {
				f.Close()
				return nil, fmt.Errorf("%s is no longer a FIFO", rl.Output)
			}
			return f, nil
		}
		if !errors.Is(err, unix.ENXIO) {
			return nil, err
		}
		if err := sleep(ctx, rl.interval()); err != nil {
			return nil, err
		}
	}
}

// write writes rec whole to w. When the reader has gone (EPIPE) it waits
// for the next one, keeping w open meanwhile so that what the reader left
// in the pipe stays there for the next, and writes the rest of rec into
// the writer it then returns. A full pipe blocks the write (the reader is
// slow), looking at ctx every Interval.
func (rl *Relay) write(ctx context.Context, w *os.File, rec []byte) (*os.File, error) {
	for len(rec) > 0 {
		if err := w.SetWriteDeadline(time.Now().Add(rl.interval())); err != nil {
			return w, err
		}
		n, err := w.Write(rec)
		rec = rec[n:]
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			if err := ctx.Err(); err != nil {
				return w, err
			}
		case errors.Is(err, syscall.EPIPE):
			rl.log("msg", "the reader closed the FIFO; waiting for the next one, then relaying on from where the relay is in the kernel log")
			next, err := rl.openWriter(ctx)
			if err != nil {
				return w, err
			}
			w.Close()
			w = next
			rl.log("msg", "a reader opened the FIFO; relaying")
		default:
			return w, fmt.Errorf("writing %s: %w", rl.Output, err)
		}
	}
	return w, nil
}
