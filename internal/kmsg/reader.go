package kmsg

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

const (
	// recordBuf is the read buffer of the device: the kernel formats a
	// /dev/kmsg record into CONSOLE_EXT_LOG_MAX (8 KiB) bytes and
	// answers EINVAL to a smaller read.
	recordBuf = 8 << 10
	// streamChunk is what one read of a recording takes; maxLine bounds
	// a line of a recording (a longer one is dropped as malformed).
	streamChunk = 64 << 10
	maxLine     = 16 << 10
)

// Stats counts what a Reader read since it was opened.
type Stats struct {
	Records   uint64 // records parsed
	Lost      uint64 // records missing from the sequence: overwritten in the kernel's buffer before they were read
	Malformed uint64 // reads or lines that are not a record
}

// Reader reads /dev/kmsg records from a path: the kernel's device, or a
// regular file or FIFO holding records as `cat /dev/kmsg` writes them (a
// recording, for tests and demos). It is not safe for concurrent use.
type Reader struct {
	fd     int
	device bool // a character device: one record per read
	buf    []byte
	// recording: the unparsed bytes (in buf), from the start of a record
	pend   []byte
	eof    bool
	seq    uint64 // the last record's sequence number
	seen   bool
	stats  Stats
	rec    Record // handed to the callback (one, so it does not escape per record)
	read   func(fd int, p []byte) (int, error)
	closed bool
}

// Open opens path without blocking. On the kernel's device it starts
// after the newest record, so that only what the kernel logs from now on
// is read, unless fromStart is set: then it starts with the oldest record
// the kernel's buffer still holds. A recording is always read from its
// start. The errors are the open's (os.IsPermission: no CAP_SYSLOG while
// kernel.dmesg_restrict is 1, or a device cgroup that denies it).
func Open(path string, fromStart bool) (*Reader, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	r := &Reader{fd: fd, read: unix.Read}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		r.device = true
		r.buf = make([]byte, recordBuf)
		if !fromStart {
			if _, err := unix.Seek(fd, 0, unix.SEEK_END); err != nil {
				unix.Close(fd)
				return nil, &os.PathError{Op: "seek", Path: path, Err: err}
			}
		}
	case unix.S_IFREG, unix.S_IFIFO:
		r.buf = make([]byte, 2*streamChunk)
	default:
		unix.Close(fd)
		return nil, fmt.Errorf("%s: neither the kernel's log device nor a recording of it", path)
	}
	return r, nil
}

// Device reports whether the Reader reads the kernel's device (not a
// recording).
func (r *Reader) Device() bool { return r.device }

// Stats returns the counts so far.
func (r *Reader) Stats() Stats { return r.stats }

// Close closes the descriptor.
func (r *Reader) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	return unix.Close(r.fd)
}

// Poll hands every record readable now to fn, at most max of them, and
// reports whether more were left (max reached). The Record and its bytes
// are valid only during the call. An error other than "nothing more now"
// is returned after the records read before it.
func (r *Reader) Poll(max int, fn func(*Record)) (more bool, err error) {
	if r.device {
		return r.pollDevice(max, fn)
	}
	return r.pollStream(max, fn)
}

func (r *Reader) pollDevice(max int, fn func(*Record)) (bool, error) {
	for n := 0; n < max; {
		k, err := r.read(r.fd, r.buf)
		switch {
		case errors.Is(err, unix.EAGAIN):
			return false, nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EPIPE):
			// The kernel overwrote records this reader had not read; the
			// next read returns the oldest one left, and the gap in the
			// sequence numbers says how many were lost.
			continue
		case err != nil:
			return false, err
		case k == 0:
			return false, nil
		}
		n++
		r.emit(r.buf[:k], fn)
	}
	return true, nil
}

// pollStream reads a recording: lines, a record being a header line and
// the dictionary lines (starting with a space) after it. A record is
// complete when the next header line starts or when nothing more can be
// read now; a writer writes whole records.
func (r *Reader) pollStream(max int, fn func(*Record)) (bool, error) {
	n := 0
	for {
		// Hand out the complete records of what is buffered.
		for n < max {
			end := r.recordEnd()
			if end < 0 {
				break
			}
			r.emit(r.pend[:end], fn)
			r.pend = r.pend[end:]
			n++
		}
		if n >= max {
			return true, nil
		}
		if r.eof {
			r.eof = false // a file may grow, a FIFO get a writer: try again next poll
			return false, nil
		}
		if err := r.fill(); err != nil {
			return false, err
		}
	}
}

// recordEnd returns the length of the first complete record in pend, -1
// when there is none yet. Bytes before a header line (dictionary lines
// without one, an over-long line) are dropped as malformed.
func (r *Reader) recordEnd() int {
	for len(r.pend) > 0 && r.pend[0] == ' ' {
		i := bytes.IndexByte(r.pend, '\n')
		if i < 0 {
			return -1
		}
		r.stats.Malformed++
		r.pend = r.pend[i+1:]
	}
	i := bytes.IndexByte(r.pend, '\n')
	if i < 0 {
		return -1
	}
	end := i + 1
	for end < len(r.pend) && r.pend[end] == ' ' {
		j := bytes.IndexByte(r.pend[end:], '\n')
		if j < 0 {
			return -1 // a dictionary line still being written
		}
		end += j + 1
	}
	if end == len(r.pend) && !r.eof {
		return -1 // dictionary lines may follow in the next read
	}
	return end
}

// fill appends what can be read now to pend (eof when nothing). What is
// left of pend moves to the front of buf first: a recording is read in
// place, without a buffer per read.
func (r *Reader) fill() error {
	n := copy(r.buf, r.pend)
	if len(r.buf)-n < streamChunk/2 { // a record longer than half the buffer
		r.buf = append(r.buf[:n:n], make([]byte, streamChunk)...)
	}
	r.pend = r.buf[:n]
	k, err := r.read(r.fd, r.buf[n:])
	switch {
	case errors.Is(err, unix.EAGAIN), k == 0 && err == nil:
		r.eof = true
		return nil
	case errors.Is(err, unix.EINTR):
		return nil
	case err != nil:
		return err
	}
	r.pend = r.buf[:n+k]
	if bytes.IndexByte(r.pend, '\n') < 0 && len(r.pend) > maxLine {
		r.stats.Malformed++
		r.pend = r.buf[:0]
	}
	return nil
}

// emit parses one record, counts a sequence gap as lost records and
// hands the record to fn.
func (r *Reader) emit(b []byte, fn func(*Record)) {
	rec, ok := ParseRecord(b)
	if !ok {
		r.stats.Malformed++
		return
	}
	if r.seen && rec.Seq > r.seq+1 {
		r.stats.Lost += rec.Seq - r.seq - 1
	}
	r.seq, r.seen = rec.Seq, true
	r.stats.Records++
	r.rec = rec
	fn(&r.rec)
}
