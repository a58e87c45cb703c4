package kmsg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// relayLog collects what a Relay logs and lets a test wait for a message.
type relayLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *relayLog) log(kv ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		fmt.Fprintf(&b, "%v=%v ", kv[i], kv[i+1])
	}
	l.msgs = append(l.msgs, b.String())
}

func (l *relayLog) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.Contains(m, sub) {
			n++
		}
	}
	return n
}

func (l *relayLog) waitFor(t *testing.T, sub string, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if l.count(sub) >= n {
			return
		}
	}
	t.Fatalf("no %d× %q in the relay's log: %q", n, sub, l.msgs)
}

// startRelay runs rl until the test ends (or stop is called) and returns
// what Run returned through the channel.
func startRelay(t *testing.T, rl *Relay) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rl.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				err = errors.New("the relay did not stop within 5s of its context's end")
			}
		})
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// waitFIFO waits until the relay has made its FIFO.
func waitFIFO(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() == os.ModeNamedPipe {
			return
		}
	}
	t.Fatalf("no FIFO at %s", path)
}

// readRecords polls the exporter's reader of the FIFO until it has handed
// out n records (their raw bytes), failing after 10s.
func readRecords(t *testing.T, r *Reader, n int) []string {
	t.Helper()
	var got []string
	for deadline := time.Now().Add(10 * time.Second); len(got) < n && time.Now().Before(deadline); {
		if _, err := r.Poll(1000, func(rec *Record) { got = append(got, string(rec.Raw)) }); err != nil {
			t.Fatal(err)
		}
		if len(got) < n {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if len(got) != n {
		t.Fatalf("read %d records, want %d: %q", len(got), n, got)
	}
	return got
}

func record(seq int) string {
	return fmt.Sprintf("6,%d,%d,-;mlx5_core 0000:3b:00.0: record %d\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n", seq, seq*1000, seq)
}

// A recording standing in for /dev/kmsg reaches a reader of the FIFO byte
// for byte, every record whole with its dictionary lines; the FIFO is made
// mode 0644 whatever the umask; the relay stops with its context.
func TestRelayCopiesRecords(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "kmsg"), filepath.Join(dir, "fifo")
	want, err := os.ReadFile("testdata/fabric.kmsg")
	if err != nil {
		t.Fatal(err)
	}
	boot, err := os.ReadFile("testdata/h200-boot.kmsg")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, boot...)
	if err := os.WriteFile(in, want, 0o644); err != nil {
		t.Fatal(err)
	}
	old := syscall.Umask(0o077)
	stop := startRelay(t, &Relay{Input: in, Output: out, Interval: 10 * time.Millisecond})
	waitFIFO(t, out)
	syscall.Umask(old)
	if fi, err := os.Lstat(out); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("FIFO mode %v, %v: want 0644 (the exporter reads it as another user)", fi.Mode(), err)
	}
	f, err := os.Open(out) // blocks until the relay opens it to write
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(f, got); err != nil {
		t.Fatalf("%v after %q", err, got)
	}
	if string(got) != string(want) {
		t.Errorf("relayed\n%s\nwant\n%s", got, want)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(f); err != nil || len(b) != 0 {
		t.Errorf("after the relay stopped: %q %v, want the end of the FIFO", b, err)
	}
}

// The reader goes away and comes back, twice: once with records it left
// unread in the pipe, once before the relay writes again (EPIPE). The
// next reader gets every record the first did not, in order, none twice.
func TestRelayReaderReopens(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "kmsg"), filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(in, 0o600); err != nil {
		t.Skip(err)
	}
	var log relayLog
	rl := &Relay{Input: in, Output: out, Log: log.log, Interval: 10 * time.Millisecond}
	stop := startRelay(t, rl)
	waitFIFO(t, out)
	src, err := os.OpenFile(in, os.O_WRONLY, 0) // the kernel's side
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	emit := func(seqs ...int) {
		for _, s := range seqs {
			if _, err := src.WriteString(record(s)); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := func(seqs ...int) []string {
		var w []string
		for _, s := range seqs {
			w = append(w, record(s))
		}
		return w
	}
	check := func(got, want []string) {
		t.Helper()
		if strings.Join(got, "") != strings.Join(want, "") {
			t.Errorf("read\n%s\nwant\n%s", strings.Join(got, ""), strings.Join(want, ""))
		}
	}

	a, err := Open(out, false)
	if err != nil {
		t.Fatal(err)
	}
	emit(1, 2, 3)
	check(readRecords(t, a, 3), want(1, 2, 3))
	// 4 and 5 relayed but not read when the reader closes.
	emit(4, 5)
	unread := len(record(4)) + len(record(5))
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if n, _ := unix.IoctlGetInt(a.fd, unix.TIOCINQ); n == unread {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("4 and 5 never reached the pipe")
		}
	}
	a.Close()
	// 6 and 7 after it closed: the relay finds no reader (EPIPE) and waits.
	emit(6, 7)
	log.waitFor(t, "the reader closed the FIFO", 1)

	b, err := Open(out, false)
	if err != nil {
		t.Fatal(err)
	}
	check(readRecords(t, b, 4), want(4, 5, 6, 7))
	log.waitFor(t, "a reader opened the FIFO", 1)
	// Closed with nothing unread, before the next record: the same.
	b.Close()
	emit(8)
	log.waitFor(t, "the reader closed the FIFO", 2)
	c, err := Open(out, false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	emit(9)
	check(readRecords(t, c, 2), want(8, 9))
	time.Sleep(50 * time.Millisecond)
	if got, _ := collect(t, c, 100); len(got) != 0 {
		t.Errorf("more records than written: %q", got)
	}
	if n := log.count("records lost"); n != 0 {
		t.Errorf("%d losses logged, none happened", n)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// The kernel's device overwrote records while the relay could not read
// them (EPIPE on the read): the relay logs how many, and relays on from
// the oldest record left.
func TestRelayKernelOverwrote(t *testing.T) {
	steps := []struct {
		rec string
		err error
	}{
		{rec: record(10)}, {rec: record(11)}, {err: unix.EPIPE}, {rec: record(40)}, {rec: "garbage"}, {rec: record(41)},
	}
	var mu sync.Mutex
	src := &Reader{device: true, buf: make([]byte, recordBuf), closed: true, read: func(_ int, p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		if len(steps) == 0 {
			return 0, unix.EAGAIN
		}
		s := steps[0]
		steps = steps[1:]
		if s.err != nil {
			return 0, s.err
		}
		return copy(p, s.rec), nil
	}}
	out := filepath.Join(t.TempDir(), "fifo")
	if err := MakeFIFO(out); err != nil {
		t.Skip(err)
	}
	var log relayLog
	rl := &Relay{Input: "fake", Output: out, Log: log.log, Interval: 10 * time.Millisecond,
		wait: func(ctx context.Context) error { return sleep(ctx, 10*time.Millisecond) }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rl.relay(ctx, src) }()
	r, err := Open(out, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := readRecords(t, r, 4); strings.Join(got, "") != record(10)+record(11)+record(40)+record(41) {
		t.Errorf("relayed %q", got)
	}
	log.waitFor(t, "records lost", 1)
	if n := log.count("records=28 "); n != 1 {
		t.Errorf("want one loss of 28 records logged: %q", log.msgs)
	}
	if st := r.Stats(); st.Lost != 28 {
		t.Errorf("the reader counts %d lost records, want 28 (the gap in the sequence numbers)", st.Lost)
	}
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
}

// Nothing but a FIFO is written to: a file, a directory or a missing
// directory at the output is an error, and the file stays as it was.
func TestRelayOutputNotFIFO(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "kmsg")
	if err := os.WriteFile(in, []byte(record(1)), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "stale")
	if err := os.WriteFile(file, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	for out, want := range map[string]string{
		file:                                  "exists and is not a FIFO (a regular file)",
		dir:                                   "exists and is not a FIFO (a directory)",
		filepath.Join(dir, "no", "such", "f"): "no such file or directory",
	} {
		err := (&Relay{Input: in, Output: out}).Run(context.Background())
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("output %s: %v, want %q", out, err, want)
		}
	}
	if b, _ := os.ReadFile(file); string(b) != "keep me" {
		t.Errorf("the file was changed: %q", b)
	}
	// An existing FIFO is used as it is.
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Skip(err)
	}
	if err := MakeFIFO(fifo); err != nil {
		t.Errorf("existing FIFO: %v", err)
	}
}

// An input that cannot be opened is an error that says what is missing,
// before any FIFO is made.
func TestRelayInputErrors(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "fifo")
	err := (&Relay{Input: filepath.Join(dir, "kmsg"), Output: out}).Run(context.Background())
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "hostPath, type CharDevice") {
		t.Errorf("missing input: %v", err)
	}
	if _, err := os.Lstat(out); !os.IsNotExist(err) {
		t.Errorf("a FIFO was made for a relay that cannot read: %v", err)
	}
	for _, errno := range []error{unix.EPERM, unix.EACCES} {
		err := inputError(&os.PathError{Op: "open", Path: "/dev/kmsg", Err: errno})
		if !errors.Is(err, os.ErrPermission) || !strings.Contains(err.Error(), "CAP_SYSLOG") || !strings.Contains(err.Error(), "privileged") {
			t.Errorf("%v: %v", errno, err)
		}
	}
}

// A reader that never reads: the relay blocks in its write once the pipe
// is full, and still stops with its context; so it does while no reader
// ever opens the FIFO.
func TestRelayStopsWhileBlocked(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "kmsg")
	var sb strings.Builder
	for i := 0; sb.Len() < 1<<20; i++ {
		sb.WriteString(record(i))
	}
	if err := os.WriteFile(in, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "fifo")
	stop := startRelay(t, &Relay{Input: in, Output: out, Interval: 10 * time.Millisecond})
	waitFIFO(t, out)
	r, err := Open(out, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if n, _ := unix.IoctlGetInt(r.fd, unix.TIOCINQ); n > 32<<10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the pipe never filled")
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	stop = startRelay(t, &Relay{Input: in, Output: filepath.Join(dir, "fifo2"), Interval: 10 * time.Millisecond})
	waitFIFO(t, filepath.Join(dir, "fifo2"))
	time.Sleep(30 * time.Millisecond)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// The kernel's own device, where this test may read and write it (root,
// or CAP_SYSLOG with write access): the relay starts after the newest
// record (one written before it started is not relayed), relays one
// written after it whole, and stops at once with its context although it
// waits in poll(2).
func TestRelayKernelDevice(t *testing.T) {
	probe, err := Open("/dev/kmsg", false)
	if err != nil {
		t.Skipf("cannot read /dev/kmsg: %v", err)
	}
	probe.Close()
	w, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("cannot write /dev/kmsg: %v", err)
	}
	defer w.Close()
	mark := fmt.Sprintf("fabric_exporter relay test %d", time.Now().UnixNano())
	if _, err := fmt.Fprintf(w, "<6>%s before\n", mark); err != nil {
		t.Skipf("cannot write /dev/kmsg: %v", err)
	}
	out := filepath.Join(t.TempDir(), "fifo")
	var log relayLog
	stop := startRelay(t, &Relay{Input: "/dev/kmsg", Output: out, Log: log.log})
	waitFIFO(t, out)
	r, err := Open(out, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	log.waitFor(t, "relaying the kernel log", 1)
	if _, err := fmt.Fprintf(w, "<6>%s after\n", mark); err != nil {
		t.Fatal(err)
	}
	var got []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !strings.Contains(strings.Join(got, ""), mark+" after"); time.Sleep(10 * time.Millisecond) {
		r.Poll(1000, func(rec *Record) { got = append(got, string(rec.Raw)) })
	}
	all := strings.Join(got, "")
	if !strings.Contains(all, ";"+mark+" after\n") {
		t.Errorf("the record written after the start was not relayed: %q", got)
	}
	if strings.Contains(all, mark+" before") {
		t.Errorf("a record from before the start was relayed: %q", got)
	}
	// Nothing more is logged now: the relay waits in poll(2).
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("stopping took %s", d)
	}
}
