package kmsg

import (
	"bufio"
	"bytes"
	"os"
	"strings"
	"testing"
)

// A line of testdata/lines.txt with what it must give.
type wantLine struct {
	source, msg string
	want        *Event // nil: no event
	line        int
}

func readLines(t testing.TB) []wantLine {
	t.Helper()
	f, err := os.Open("testdata/lines.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []wantLine
	var source string
	var want *Event
	expect := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "@ "):
			source = l[2:]
		case strings.HasPrefix(l, "= "):
			f := strings.Fields(l[2:])
			switch {
			case len(f) == 1 && f[0] == "none":
				want = nil
			case len(f) == 4:
				dash := func(s string) string {
					if s == "-" {
						return ""
					}
					return s
				}
				want = &Event{Class: f[0], Kind: f[1], PCI: dash(f[2]), Netdev: dash(f[3])}
			default:
				t.Fatalf("lines.txt:%d: bad expectation %q", n, l)
			}
			expect = true
		default:
			if !expect || source == "" {
				t.Fatalf("lines.txt:%d: a line without source or expectation", n)
			}
			out = append(out, wantLine{source: source, msg: l, want: want, line: n})
			expect = false
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Every line of testdata/lines.txt gives the event written above it, or
// none; every source in README.md has lines and every line's source is
// in README.md.
func TestClassifyLines(t *testing.T) {
	lines := readLines(t)
	readme, err := os.ReadFile("testdata/README.md")
	if err != nil {
		t.Fatal(err)
	}
	sources, events := map[string]int{}, 0
	for _, l := range lines {
		sources[l.source]++
		msg := []byte(l.msg)
		got, ok := ClassifyMessage(msg, nil)
		switch {
		case l.want == nil && ok:
			t.Errorf("lines.txt:%d (%s): %q gave %+v, want none", l.line, l.source, l.msg, got)
		case l.want != nil && !ok:
			t.Errorf("lines.txt:%d (%s): %q gave none, want %+v", l.line, l.source, l.msg, *l.want)
		case l.want != nil && got != *l.want:
			t.Errorf("lines.txt:%d (%s): %q gave %+v, want %+v", l.line, l.source, l.msg, got, *l.want)
		}
		if l.want != nil {
			events++
		}
		// The same message in a record with its dictionary gives the same.
		rec := []byte("3,1,2,-;" + l.msg + "\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n")
		if r, ok := ParseRecord(rec); !ok || !bytes.Equal(r.Message, msg) {
			t.Errorf("lines.txt:%d: the record of %q does not parse back", l.line, l.msg)
		}
	}
	for s := range sources {
		if !bytes.Contains(readme, []byte("`"+s+"`")) {
			t.Errorf("source %s is not in testdata/README.md", s)
		}
	}
	if len(sources) < 15 || events < 50 {
		t.Errorf("%d sources, %d event lines: lines.txt lost lines", len(sources), events)
	}
}

// Every kind the package documents has a line in lines.txt.
func TestEveryKindHasALine(t *testing.T) {
	seen := map[string]bool{}
	for _, l := range readLines(t) {
		if l.want != nil {
			seen[l.want.Class+" "+l.want.Kind] = true
		}
	}
	kinds := map[string][]string{
		ClassMLX5:       {"command_timeout", "fatal_error", "health_compromised", "fw_syndrome", "pci_slot_unavailable", "recovery_failed", "pcie_power_insufficient", "high_temperature"},
		ClassNetdev:     {"tx_timeout", "mlx5e_tx_timeout"},
		ClassPortModule: {"cable_plugged", "cable_unplugged", "cable_disabled", "power_budget_exceeded", "bus_stuck", "high_temperature", "bad_cable", "pcie_slot_power", "other"},
		ClassPCIe:       {"aer_correctable", "aer_uncorrectable_nonfatal", "aer_uncorrectable_fatal", "link_down", "card_not_present", "dpc_containment", "aer_recovery_failed", "gpu_fallen_off_bus"},
		ClassXid:        {"13", "14", "45", "48", "74", "79", "109"},
	}
	for class, ks := range kinds {
		for _, k := range ks {
			if !seen[class+" "+k] {
				t.Errorf("no line of lines.txt gives %s %s", class, k)
			}
		}
	}
	for _, m := range moduleErrors {
		if !strings.Contains(doc(t), m.kind) {
			t.Errorf("port module kind %s is not in doc.go", m.kind)
		}
	}
}

func doc(t *testing.T) string {
	b, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A record userspace wrote (facility 1: devkmsg_write never writes
// facility 0) is never an event, whatever it says.
func TestClassifyIgnoresUserspace(t *testing.T) {
	for _, rec := range []string{
		"12,900,1000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.",
		"14,901,1001,-;mlx5_core 0000:3b:00.0: poll_health:709:(pid 0): device's health compromised - reached miss count",
	} {
		r, ok := ParseRecord([]byte(rec))
		if !ok {
			t.Fatalf("%q does not parse", rec)
		}
		if e, ok := Classify(&r); ok {
			t.Errorf("%q (facility %d) gave %+v", rec, r.Facility, e)
		}
		r.Facility = 0
		if _, ok := Classify(&r); !ok {
			t.Errorf("%q as a kernel record gave none", rec)
		}
	}
}

// The record's DEVICE=+pci: entry names the function of a line whose
// text does not (the pre-6.8 NETDEV WATCHDOG line has no device prefix).
func TestClassifyUsesDictionary(t *testing.T) {
	r, ok := ParseRecord([]byte("4,7,8,-;NETDEV WATCHDOG: eth3 (mlx5_core): transmit queue 5 timed out\n SUBSYSTEM=pci\n DEVICE=+pci:0000:9a:00.0\n"))
	if !ok {
		t.Fatal("no record")
	}
	e, ok := Classify(&r)
	if want := (Event{Class: ClassNetdev, Kind: "tx_timeout", PCI: "0000:9a:00.0", Netdev: "eth3"}); !ok || e != want {
		t.Errorf("got %+v %v, want %+v", e, ok, want)
	}
}

func TestParseRecord(t *testing.T) {
	for _, c := range []struct {
		in   string
		ok   bool
		want Record
	}{
		{"6,339,5140900,-;NET: Registered protocol family 10\n", true, Record{Level: 6, Seq: 339, Usec: 5140900, Message: []byte("NET: Registered protocol family 10")}},
		{"30,340,5690716,-;udevd[80]: starting version 181", true, Record{Facility: 3, Level: 6, Seq: 340, Usec: 5690716, Message: []byte("udevd[80]: starting version 181")}},
		{"4,357,1494357,c;NVRM: x\n", true, Record{Level: 4, Seq: 357, Usec: 1494357, Cont: true, Message: []byte("NVRM: x")}},
		{"7,160,424069,-,caller=T1;pci_root PNP0A03:00: host bridge window\n SUBSYSTEM=acpi\n DEVICE=+acpi:PNP0A03:00\n", true,
			Record{Level: 7, Seq: 160, Usec: 424069, Message: []byte("pci_root PNP0A03:00: host bridge window"), Subsystem: []byte("acpi"), Device: []byte("+acpi:PNP0A03:00")}},
		{"6,1,2,-;a\nnot a dictionary line\n", false, Record{}},
		{"6,1,2;no flags", false, Record{}},
		{"6,x,2,-;bad seq", false, Record{}},
		{"2000,1,2,-;prio too big", false, Record{}},
		{"no separator", false, Record{}},
		{"", false, Record{}},
	} {
		got, ok := ParseRecord([]byte(c.in))
		if ok != c.ok {
			t.Errorf("%q: ok %v, want %v", c.in, ok, c.ok)
			continue
		}
		if ok && (got.Facility != c.want.Facility || got.Level != c.want.Level || got.Seq != c.want.Seq || got.Usec != c.want.Usec ||
			got.Cont != c.want.Cont || string(got.Message) != string(c.want.Message) || string(got.Subsystem) != string(c.want.Subsystem) ||
			string(got.Device) != string(c.want.Device)) {
			t.Errorf("%q: got %+v, want %+v", c.in, got, c.want)
		}
		if ok && string(got.Raw) != c.in {
			t.Errorf("%q: Raw %q, want the whole record", c.in, got.Raw)
		}
	}
}

// FuzzClassify: no input panics, an event always has a class, a kind and
// a well-formed PCI address or none.
func FuzzClassify(f *testing.F) {
	for _, l := range readLines(f) {
		f.Add([]byte("3,1,2,-;" + l.msg + "\n DEVICE=+pci:0000:3b:00.0\n"))
	}
	f.Add([]byte("4,357,1494357,c;NVRM: Xid (PCI:0000:3b:00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, ok := ParseRecord(b)
		if !ok {
			return
		}
		e, ok := Classify(&r)
		if !ok {
			return
		}
		if e.Class == "" || e.Kind == "" || e.PCI != "" && !isBDF([]byte(e.PCI)) || len(e.Netdev) > 15 {
			t.Errorf("%q gave %+v", b, e)
		}
	})
}
