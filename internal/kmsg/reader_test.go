package kmsg

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func collect(t *testing.T, r *Reader, max int) ([]string, bool) {
	t.Helper()
	var msgs []string
	more, err := r.Poll(max, func(rec *Record) { msgs = append(msgs, string(rec.Message)) })
	if err != nil {
		t.Fatal(err)
	}
	return msgs, more
}

// The recording from the lent H200: 15 records with their dictionaries,
// the gaps left by the records not kept counted as lost, no event.
func TestReaderRecording(t *testing.T) {
	r, err := Open("testdata/h200-boot.kmsg", false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Device() {
		t.Fatal("a file is not the device")
	}
	var recs []Record
	_, err = r.Poll(1000, func(rec *Record) {
		c := *rec
		c.Message, c.Device = append([]byte(nil), rec.Message...), append([]byte(nil), rec.Device...)
		recs = append(recs, c)
		if e, ok := Classify(rec); ok {
			t.Errorf("%q gave %+v", rec.Message, e)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if st := r.Stats(); st != (Stats{Records: 15, Lost: 3 + 53}) {
		t.Errorf("stats %+v", st)
	}
	if len(recs) != 15 || string(recs[0].Device) != "+pci:0000:00:01.0" || recs[0].Seq != 288 ||
		!recs[14].Cont || recs[14].Level != 4 || recs[14].Usec != 3805435 {
		t.Errorf("records %+v", recs)
	}
	if p := recs[0].PCIDevice(); string(p) != "0000:00:01.0" {
		t.Errorf("PCIDevice %q", p)
	}
	// Nothing new: nothing read.
	if msgs, more := collect(t, r, 1000); len(msgs) != 0 || more {
		t.Errorf("second poll: %q %v", msgs, more)
	}
}

// A recording that grows: a record split across writes is handed out once
// whole; at most max records per poll.
func TestReaderRecordingGrows(t *testing.T) {
	p := filepath.Join(t.TempDir(), "k")
	write := func(s string) {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	write("")
	r, err := Open(p, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	write("6,1,10,-;first\n SUBSYSTEM=pci\n DEV")
	if msgs, _ := collect(t, r, 10); len(msgs) != 0 {
		t.Errorf("a partial record was handed out: %q", msgs)
	}
	write("ICE=+pci:0000:3b:00.0\n6,2,11,-;second\n6,3,12,-;third\n SUBSYSTEM=pci\n")
	msgs, more := collect(t, r, 2)
	if strings.Join(msgs, ",") != "first,second" || !more {
		t.Errorf("got %q more %v", msgs, more)
	}
	msgs, more = collect(t, r, 10)
	if strings.Join(msgs, ",") != "third" || more {
		t.Errorf("got %q more %v", msgs, more)
	}
	// An over-long line is dropped, and so are dictionary lines that
	// follow no record.
	write(strings.Repeat("x", maxLine+10))
	collect(t, r, 10)
	write("\n SUBSYSTEM=pci\n6,9,14,-;after the long line\n")
	msgs, _ = collect(t, r, 10)
	if strings.Join(msgs, ",") != "after the long line" {
		t.Errorf("got %q", msgs)
	}
	if st := r.Stats(); st.Records != 4 || st.Lost != 5 || st.Malformed != 2 {
		t.Errorf("stats %+v", st)
	}
}

// A FIFO: records written by another process while the reader polls.
func TestReaderFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(p, 0o600); err != nil {
		t.Skip(err)
	}
	r, err := Open(p, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if msgs, _ := collect(t, r, 10); len(msgs) != 0 {
		t.Errorf("empty FIFO gave %q", msgs)
	}
	fmt.Fprint(w, " DEVICE=+pci:0000:00:00.0\n3,5,1,-;pcieport 0000:89:02.0: pciehp: Slot(400): Link Down\n SUBSYSTEM=pci\n DEVICE=+pci:0000:89:02.0\n")
	var got []Event
	r.Poll(10, func(rec *Record) {
		if e, ok := Classify(rec); ok {
			got = append(got, e)
		}
	})
	if len(got) != 1 || got[0] != (Event{Class: ClassPCIe, Kind: "link_down", PCI: "0000:89:02.0"}) {
		t.Errorf("got %+v", got)
	}
	if st := r.Stats(); st != (Stats{Records: 1, Malformed: 1}) {
		t.Errorf("stats %+v (the dictionary line before any record is malformed)", st)
	}
}

// The device: one record per read, EPIPE when the kernel overwrote
// records (the gap is counted from the sequence numbers), EINTR retried,
// EAGAIN the end, another error returned.
func TestReaderDevice(t *testing.T) {
	type step struct {
		rec string
		err error
	}
	steps := []step{
		{rec: "6,10,1,-;one"}, {err: unix.EINTR}, {rec: "6,11,2,-;two"}, {err: unix.EPIPE},
		{rec: "6,40,3,-;after 28 lost"}, {rec: "garbage"}, {err: unix.EAGAIN},
		{rec: "6,41,4,-;next poll"}, {err: unix.EIO},
	}
	r := &Reader{device: true, buf: make([]byte, recordBuf), read: func(_ int, p []byte) (int, error) {
		s := steps[0]
		steps = steps[1:]
		if s.err != nil {
			return 0, s.err
		}
		return copy(p, s.rec), nil
	}, closed: true}
	msgs, more := collect(t, r, 100)
	if strings.Join(msgs, ",") != "one,two,after 28 lost" || more {
		t.Errorf("got %q more %v", msgs, more)
	}
	if st := r.Stats(); st != (Stats{Records: 3, Lost: 28, Malformed: 1}) {
		t.Errorf("stats %+v", st)
	}
	var n int
	_, err := r.Poll(100, func(*Record) { n++ })
	if !errors.Is(err, unix.EIO) || n != 1 {
		t.Errorf("err %v after %d records", err, n)
	}
}

// The kernel's own device, where this test may read and write it (root,
// or CAP_SYSLOG with write access): a record written now is read, from
// the end of the buffer, and being userspace's it is no event.
func TestReaderKernelDevice(t *testing.T) {
	r, err := Open("/dev/kmsg", false)
	if err != nil {
		t.Skipf("cannot read /dev/kmsg: %v", err)
	}
	defer r.Close()
	if !r.Device() {
		t.Fatal("/dev/kmsg is not a device")
	}
	w, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("cannot write /dev/kmsg: %v", err)
	}
	defer w.Close()
	mark := fmt.Sprintf("fabric_exporter kmsg test %d NVRM: Xid (PCI:0000:3b:00): 79, x", time.Now().UnixNano())
	if _, err := fmt.Fprintf(w, "<3>%s\n", mark); err != nil {
		t.Skipf("cannot write /dev/kmsg: %v", err)
	}
	found := false
	for i := 0; i < 100 && !found; i++ {
		r.Poll(1000, func(rec *Record) {
			if strings.Contains(string(rec.Message), mark) {
				found = true
				if rec.Kernel() || rec.Level != 3 {
					t.Errorf("a userspace record with facility %d level %d", rec.Facility, rec.Level)
				}
				if e, ok := Classify(rec); ok {
					t.Errorf("userspace record gave %+v", e)
				}
			}
		})
		time.Sleep(10 * time.Millisecond)
	}
	if !found {
		t.Error("the record written was not read")
	}
}

func TestOpenErrors(t *testing.T) {
	if _, err := Open(filepath.Join(t.TempDir(), "missing"), false); !os.IsNotExist(err) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := Open(t.TempDir(), false); err == nil {
		t.Error("a directory opened")
	}
}
