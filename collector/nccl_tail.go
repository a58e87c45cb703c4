package collector

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

// A follower of log files named by globs. Every poll it expands the globs,
// stats each file and reads the bytes added since the last poll: files are
// opened, read and closed, so hundreds of files cost no descriptors between
// polls. A file is known by (device, inode):
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
// arrives, up to maxNCCLLine bytes; a longer line is dropped (counted as one
// unparsed line) and the follower skips to its end. Memory is bounded by
// the read buffer plus one partial line per file.

const (
	maxNCCLLine    = 64 << 10  // longest line kept
	ncclReadBuf    = 128 << 10 // bytes read per system call and parsed per lock
	ncclFingerLen  = 256       // bytes of a file's start that identify it
	keptPartialCap = 4 << 10   // partial-line buffers larger than this are freed once empty
)

type fileID struct{ dev, ino uint64 }

// ncclFile is the follower's state of one file.
type ncclFile struct {
	id       fileID
	path     string
	offset   int64 // bytes consumed
	size     int64 // size at the last poll
	mtime    int64 // modification time at the last poll, Unix nanoseconds
	finger   uint64
	fingerN  int
	partial  []byte
	dropping bool // inside a line longer than maxNCCLLine
	seen     uint64
	lineOff  int64 // offset in the file of the line being parsed

	// Attribution of bare "NCCL version" lines: the process of the latest
	// header line, by stream tag.
	last    *ncclProc
	byTag   map[string]*ncclProc
	tag     [16]byte  // the tag of the latest tagged line…
	tagLen  int       //
	tagProc *ncclProc // …and its process (spares the map for runs of one stream)
}

// lineSink consumes the lines of one chunk. begin and end bracket a chunk
// (the collector locks its state in between).
type lineSink interface {
	begin(f *ncclFile)
	line(f *ncclFile, line []byte)
	dropped(f *ncclFile) // a line longer than maxNCCLLine
	end(f *ncclFile, n int)
}

type ncclTailer struct {
	globs []string
	files map[fileID]*ncclFile
	buf   []byte
	gen   uint64
	sink  lineSink
	// readErr is called for a file that cannot be read (not for one that
	// vanished between the glob and the read).
	readErr func(path string, err error)
	// yield is called between chunks (runtime.Gosched in the collector, so
	// a scrape on the same CPU does not wait for a long backlog).
	yield func()
}

func newNCCLTailer(globs []string, sink lineSink) *ncclTailer {
	return &ncclTailer{globs: globs, files: map[fileID]*ncclFile{}, sink: sink,
		readErr: func(string, error) {}, yield: runtime.Gosched}
}

// poll reads what was added to every matched file since the last poll.
// stop is checked between chunks.
func (t *ncclTailer) poll(stop func() bool) {
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

func statID(fi fs.FileInfo) fileID {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)}
	}
	return fileID{}
}

func (t *ncclTailer) follow(path string, stop func() bool) {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return
	}
	id := statID(fi)
	f := t.files[id]
	if f == nil {
		f = &ncclFile{id: id}
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
			t.readErr(path, err)
		}
		return
	}
	defer fh.Close()
	if ofi, err := fh.Stat(); err != nil || statID(ofi) != id {
		return // replaced between stat and open: next poll
	}
	if !t.checkFinger(fh, f, size) {
		f.restart()
	}
	if t.buf == nil {
		t.buf = make([]byte, ncclReadBuf)
	}
	if _, err := fh.Seek(f.offset, io.SeekStart); err != nil {
		t.readErr(path, err)
		return
	}
	for f.offset < size {
		want := min(int64(len(t.buf)), size-f.offset)
		n, err := io.ReadFull(fh, t.buf[:want])
		if n > 0 {
			t.sink.begin(f)
			t.feed(f, t.buf[:n])
			t.sink.end(f, n)
			f.offset += int64(n)
		}
		if err != nil {
			if !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
				t.readErr(path, err)
			}
			return // truncated while reading: the next poll sees it
		}
		if stop() {
			return
		}
		t.yield()
	}
}

// checkFinger compares the file's first bytes with those seen before and
// remembers up to ncclFingerLen of them; false means the file was replaced.
func (t *ncclTailer) checkFinger(fh *os.File, f *ncclFile, size int64) bool {
	n := int(min(size, ncclFingerLen))
	var b [ncclFingerLen]byte
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
func (f *ncclFile) restart() {
	f.offset = 0
	f.partial = f.partial[:0]
	f.dropping = false
	f.fingerN = 0
	f.last, f.tagProc, f.tagLen = nil, nil, 0
	f.byTag = nil
}

// feed splits data into lines, joining the partial line of the previous
// chunk.
func (t *ncclTailer) feed(f *ncclFile, data []byte) {
	off := f.offset // of data[0]
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			if f.dropping {
				return
			}
			if len(f.partial)+len(data) > maxNCCLLine {
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
			t.sink.dropped(f)
		case len(f.partial) > 0:
			if len(f.partial)+len(line) > maxNCCLLine {
				f.dropPartial()
				t.sink.dropped(f)
				continue
			}
			f.lineOff = lineOff - int64(len(f.partial))
			f.partial = append(f.partial, line...)
			t.sink.line(f, f.partial)
			f.dropPartial()
		case len(line) > maxNCCLLine:
			t.sink.dropped(f)
		default:
			f.lineOff = lineOff
			t.sink.line(f, line)
		}
	}
}

func (f *ncclFile) dropPartial() {
	if cap(f.partial) > keptPartialCap {
		f.partial = nil
	} else {
		f.partial = f.partial[:0]
	}
}

// backlog returns the bytes of followed files not read yet (as of the last
// stat) and the number of files followed.
func (t *ncclTailer) backlog() (bytes int64, files int) {
	for _, f := range t.files {
		if f.size > f.offset {
			bytes += f.size - f.offset
		}
	}
	return bytes, len(t.files)
}
