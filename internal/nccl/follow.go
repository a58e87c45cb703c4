package nccl

import (
	"bytes"
	"errors"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"syscall"
)

// How the Follower follows the files of its globs. Every poll it expands
// the globs, stats each file and reads the bytes added since the last
// poll: files are opened, read and closed, so hundreds of files cost no
// descriptors between polls. A file is known by (device, inode):
//
//   - a new file is read from its start (NCCL writes the transport lines at
//     init, possibly days ago);
//   - a file renamed to another name the globs match keeps its offset, and a
//     new file at the old name is a new file;
//   - a file that got smaller (copytruncate) or whose first bytes changed
//     (deleted and recreated with a reused inode) is read again from 0;
//   - a file that no glob matches any more (deleted, or rotated to a name
//     outside the globs) is forgotten, with its partial line.
//
// Lines are split on '\n'. A partial last line is kept until its end
// arrives, up to maxLine bytes; a longer line is dropped (counted as one
// unparsed line) and the Follower skips to its end. Memory is bounded by
// the read buffer plus one partial line per file.

const (
	maxLine        = 64 << 10  // longest line kept
	readBuf        = 128 << 10 // bytes read per system call and parsed per lock
	fingerLen      = 256       // bytes of a file's start that identify it
	keptPartialCap = 4 << 10   // partial-line buffers larger than this are freed once empty
)

// FileID is what the Follower knows a file by: its device and inode.
type FileID struct{ dev, ino uint64 }

// File is the Follower's state of one file, handed to the Sink with each
// chunk and line; its methods describe the line being delivered.
type File struct {
	id       FileID
	path     string
	offset   int64 // bytes consumed
	size     int64 // size at the last poll
	mtime    int64 // modification time at the last poll, Unix nanoseconds
	finger   uint64
	fingerN  int
	partial  []byte
	dropping bool // inside a line longer than maxLine
	seen     uint64
	lineOff  int64 // offset in the file of the line being parsed

	// The Tracker's attribution of bare "NCCL version" lines: the process
	// of the latest header line, by stream tag (unused by other Sinks).
	last    *Process
	byTag   map[string]*Process
	tag     [16]byte // the tag of the latest tagged line…
	tagLen  int      //
	tagProc *Process // …and its process (spares the map for runs of one stream)
}

// Path is the name the file was found under at the latest poll.
func (f *File) Path() string { return f.path }

// LineOffset is the byte offset in the file of the line being delivered.
func (f *File) LineOffset() int64 { return f.lineOff }

// ModTime is the file's modification time at the latest poll, in Unix
// nanoseconds.
func (f *File) ModTime() int64 { return f.mtime }

// Sink consumes the lines the Follower reads. Begin and End bracket each
// chunk of one file (at most 128 KiB; a Sink may lock its state in
// between); line is valid only during the call.
type Sink interface {
	Begin(f *File)
	Line(f *File, line []byte)
	Dropped(f *File) // a line longer than 64 KiB, skipped
	End(f *File, n int)
}

// Follower reads the lines added to the files of its globs at each Poll.
// It is not safe for concurrent use: one goroutine polls.
type Follower struct {
	globs []string
	files map[FileID]*File
	buf   []byte
	gen   uint64
	sink  Sink
	// ReadErr is called for a file that cannot be read (not for one that
	// vanished between the glob and the read). Set it before the first Poll.
	ReadErr func(path string, err error)
	// Yield is called between chunks: runtime.Gosched by default, so that a
	// scrape on the same CPU does not wait for a long backlog.
	Yield func()
}

// NewFollower follows the files of globs (patterns checked by the caller
// with filepath.Match) into sink.
func NewFollower(globs []string, sink Sink) *Follower {
	return &Follower{globs: globs, files: map[FileID]*File{}, sink: sink,
		ReadErr: func(string, error) {}, Yield: runtime.Gosched}
}

// Poll reads what was added to every matched file since the last poll.
// stop is checked between chunks.
func (t *Follower) Poll(stop func() bool) {
	t.gen++
	var paths []string
	for _, g := range t.globs {
		m, _ := filepath.Glob(g) // patterns were checked at startup
		paths = append(paths, m...)
	}
	sort.Strings(paths)
	for i, p := range paths {
		if i > 0 && paths[i-1] == p {
			continue
		}
		if stop() {
			return
		}
		t.follow(p, stop)
	}
	for id, f := range t.files {
		if f.seen != t.gen {
			delete(t.files, id)
		}
	}
}

// StatID returns the identity of a file as the Follower knows it.
func StatID(fi fs.FileInfo) FileID {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return FileID{dev: uint64(st.Dev), ino: uint64(st.Ino)}
	}
	return FileID{}
}

func (t *Follower) follow(path string, stop func() bool) {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return
	}
	id := StatID(fi)
	f := t.files[id]
	if f == nil {
		f = &File{id: id}
		t.files[id] = f
	} else if f.seen == t.gen {
		return // the same file under a second name (hard link, two globs)
	}
	f.seen = t.gen
	f.path = path
	size, mtime := fi.Size(), fi.ModTime().UnixNano()
	if size == f.offset && mtime == f.mtime {
		return
	}
	f.size, f.mtime = size, mtime
	if size < f.offset {
		f.restart()
	}
	fh, err := os.Open(path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			t.ReadErr(path, err)
		}
		return
	}
	defer fh.Close()
	if ofi, err := fh.Stat(); err != nil || StatID(ofi) != id {
		return // replaced between stat and open: next poll
	}
	if !t.checkFinger(fh, f, size) {
		f.restart()
	}
	if t.buf == nil {
		t.buf = make([]byte, readBuf)
	}
	if _, err := fh.Seek(f.offset, io.SeekStart); err != nil {
		t.ReadErr(path, err)
		return
	}
	for f.offset < size {
		want := min(int64(len(t.buf)), size-f.offset)
		n, err := io.ReadFull(fh, t.buf[:want])
		if n > 0 {
			t.sink.Begin(f)
			t.feed(f, t.buf[:n])
			t.sink.End(f, n)
			f.offset += int64(n)
		}
		if err != nil {
			if !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
				t.ReadErr(path, err)
			}
			return // truncated while reading: the next poll sees it
		}
		if stop() {
			return
		}
		t.Yield()
	}
}

// checkFinger compares the file's first bytes with those seen before and
// remembers up to fingerLen of them; false means the file was replaced.
func (t *Follower) checkFinger(fh *os.File, f *File, size int64) bool {
	n := int(min(size, fingerLen))
	var b [fingerLen]byte
	got, err := fh.ReadAt(b[:n], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return true // cannot tell; keep the offset
	}
	same := true
	if f.fingerN > 0 {
		same = got >= f.fingerN && hash64(b[:f.fingerN]) == f.finger
	}
	f.finger, f.fingerN = hash64(b[:got]), got
	return same
}

func hash64(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

// restart forgets what was read: the file is read again from its start.
func (f *File) restart() {
	f.offset = 0
	f.partial = f.partial[:0]
	f.dropping = false
	f.fingerN = 0
	f.last, f.tagProc, f.tagLen = nil, nil, 0
	f.byTag = nil
}

// feed splits data into lines, joining the partial line of the previous
// chunk.
func (t *Follower) feed(f *File, data []byte) {
	off := f.offset // of data[0]
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			if f.dropping {
				return
			}
			if len(f.partial)+len(data) > maxLine {
				f.dropping = true
				f.dropPartial()
				return
			}
			f.partial = append(f.partial, data...)
			return
		}
		line := data[:i]
		data = data[i+1:]
		lineOff := off
		off += int64(i) + 1
		switch {
		case f.dropping:
			f.dropping = false
			t.sink.Dropped(f)
		case len(f.partial) > 0:
			if len(f.partial)+len(line) > maxLine {
				f.dropPartial()
				t.sink.Dropped(f)
				continue
			}
			f.lineOff = lineOff - int64(len(f.partial))
			f.partial = append(f.partial, line...)
			t.sink.Line(f, f.partial)
			f.dropPartial()
		case len(line) > maxLine:
			t.sink.Dropped(f)
		default:
			f.lineOff = lineOff
			t.sink.Line(f, line)
		}
	}
}

func (f *File) dropPartial() {
	if cap(f.partial) > keptPartialCap {
		f.partial = nil
	} else {
		f.partial = f.partial[:0]
	}
}

// Backlog returns the bytes of followed files not read yet (as of the last
// stat) and the number of files followed.
func (t *Follower) Backlog() (bytes int64, files int) {
	for _, f := range t.files {
		if f.size > f.offset {
			bytes += f.size - f.offset
		}
	}
	return bytes, len(t.files)
}
