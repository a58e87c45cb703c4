package rdmanl

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TypeName and ParseType, StateName and ParseState are inverses on every
// value of the enums' byte.
func TestNamesRoundTrip(t *testing.T) {
	for v := range 256 {
		q := QP{Type: uint8(v), State: uint8(v)}
		if got, ok := ParseType(q.TypeName()); !ok || got != q.Type {
			t.Errorf("ParseType(%q) = %d, %v; want %d", q.TypeName(), got, ok, v)
		}
		if got, ok := ParseState(q.StateName()); !ok || got != q.State {
			t.Errorf("ParseState(%q) = %d, %v; want %d", q.StateName(), got, ok, v)
		}
	}
}

// The names iproute2 prints (rdma/res.c qp_types_to_str, rdma/res-qp.c
// qp_states_to_str), with the kernel's enum values.
func TestParseIproute2Names(t *testing.T) {
	types := map[string]uint8{"SMI": 0, "GSI": 1, "RC": 2, "UC": 3, "UD": 4, "RAW_IPV6": 5, "RAW_ETHERTYPE": 6,
		"RAW_PACKET": 8, "XRC_INI": 9, "XRC_TGT": 10, "DRIVER": 0xff}
	for s, want := range types {
		if got, ok := ParseType(s); !ok || got != want {
			t.Errorf("ParseType(%q) = %d, %v; want %d", s, got, ok, want)
		}
	}
	for want, s := range []string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"} {
		if got, ok := ParseState(s); !ok || got != uint8(want) {
			t.Errorf("ParseState(%q) = %d, %v; want %d", s, got, ok, want)
		}
	}
	// UNKNOWN does not say which value; a number with a name is printed
	// as the name; no other spelling of a number.
	for _, s := range []string{"UNKNOWN", "rc", "Rc", "", " RC", "2", "7x", "07", "+7", "-1", "256", "1e1"} {
		if v, ok := ParseType(s); ok {
			t.Errorf("ParseType(%q) = %d, want no type", s, v)
		}
	}
	for _, s := range []string{"UNKNOWN", "rts", "3", "007", "256", "ERROR"} {
		if v, ok := ParseState(s); ok {
			t.Errorf("ParseState(%q) = %d, want no state", s, v)
		}
	}
	if v, ok := ParseType("7"); !ok || v != 7 {
		t.Errorf("ParseType(\"7\") = %d, %v", v, ok)
	}
	if v, ok := ParseState("7"); !ok || v != 7 {
		t.Errorf("ParseState(\"7\") = %d, %v", v, ok)
	}
}

// What iproute2 prints: an RC QP of a user process with every key
// fill_res_qp_entry sends, a user QP whose comm iproute2 could not read,
// a QP not bound to a port yet (no "port"), the kernel's GSI QP as
// iproute2 since res_print_u32 prints it (no "pid") and as older versions
// did ("pid": 0), an XRC QP and a mlx5 DCI (DRIVER, "subtype").
const fixtureText = `[{"ifindex":3,"ifname":"mlx5_3","port":1,"lqpn":1,"type":"GSI","state":"RTS","sq-psn":0,"comm":"ib_core"},
{"ifindex":0,"ifname":"mlx5_0","port":1,"lqpn":1,"type":"GSI","state":"RTS","sq-psn":0,"pid":0,"comm":"ib_core"},
{"ifindex":0,"ifname":"mlx5_0","port":1,"lqpn":4740,"rqpn":5123,"type":"RC","state":"RTS","rq-psn":9101238,"sq-psn":3344112,"path-mig-state":"MIGRATED","pdn":3,"pid":4242,"comm":"python3"},
{"ifindex":0,"ifname":"mlx5_0","lqpn":4741,"type":"RC","state":"RESET","sq-psn":0,"pdn":3,"pid":4242},
{"ifindex":3,"ifname":"mlx5_3","port":1,"lqpn":290,"type":"XRC_TGT","state":"ERR","sq-psn":0,"path-mig-state":"ARMED","pdn":5,"pid":4311,"comm":"sglang::schedul"},
{"ifindex":3,"ifname":"mlx5_3","port":1,"lqpn":291,"type":"DRIVER","subtype":"DCI","state":"RTS","sq-psn":77,"pdn":5,"pid":4311,"comm":"sglang::schedul"}]
`

func writeFixture(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFixture(t *testing.T) {
	path := filepath.Join(t.TempDir(), "qp.json")
	writeFixture(t, path, fixtureText)
	f := NewFixture(path)
	l, err := f.QueuePairs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := Listing{
		Devices: []Device{{0, "mlx5_0"}, {3, "mlx5_3"}},
		QPs: []QP{
			{Device: "mlx5_3", Port: 1, LQPN: 1, Type: 1, State: 3, KernName: "ib_core"},
			{Device: "mlx5_0", Port: 1, LQPN: 1, Type: 1, State: 3, KernName: "ib_core"},
			{Device: "mlx5_0", Port: 1, LQPN: 4740, Type: 2, State: 3, PID: 4242, HasPID: true},
			{Device: "mlx5_0", LQPN: 4741, Type: 2, State: 0, PID: 4242, HasPID: true},
			{Device: "mlx5_3", Port: 1, LQPN: 290, Type: 10, State: 6, PID: 4311, HasPID: true},
			{Device: "mlx5_3", Port: 1, LQPN: 291, Type: 0xff, State: 3, PID: 4311, HasPID: true},
		},
	}
	if !reflect.DeepEqual(l, want) {
		t.Errorf("listing\n%+v\nwant\n%+v", l, want)
	}
	if !f.PIDsOfProcfs() {
		t.Error("a fixture's PIDs are those of the procfs")
	}

	// Read again on every call: a test rewrites it.
	writeFixture(t, path, `[{"ifindex":1,"ifname":"rxe0","port":1,"lqpn":17,"type":"RC","state":"SQE","sq-psn":5,"pid":31,"comm":"ib_send_bw"}]`)
	l, err = f.QueuePairs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Devices) != 1 || l.Devices[0] != (Device{1, "rxe0"}) || len(l.QPs) != 1 || l.QPs[0].StateName() != "SQE" {
		t.Errorf("after a rewrite: %+v", l)
	}
	// rdma prints [] when no queue pair is visible: an empty listing.
	writeFixture(t, path, "[]\n")
	if l, err := f.QueuePairs(context.Background()); err != nil || len(l.Devices)+len(l.QPs) != 0 {
		t.Errorf("[]: %+v, %v", l, err)
	}
}

func TestFixtureBound(t *testing.T) {
	l, err := ParseFixture([]byte(fixtureText), 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.QPs) != 4 || l.Dropped != 2 || len(l.Devices) != 2 {
		t.Errorf("%d QPs, %d dropped, devices %v; want 4, 2, both", len(l.QPs), l.Dropped, l.Devices)
	}
}

func TestFixtureErrors(t *testing.T) {
	dir := t.TempDir()
	ok := `{"ifindex":0,"ifname":"mlx5_0","port":1,"lqpn":4740,"type":"RC","state":"RTS","pid":4242}`
	for _, c := range []struct{ text, want string }{
		{`{"ifindex":0}`, "not a JSON array"},
		{`[` + ok + `,]`, "not a JSON array"},
		{`[` + ok + `] x`, "not a JSON array"},
		{``, "not a JSON array"},
		{`[` + ok + `, 7]`, "entry 1: json: cannot unmarshal number"},
		{`[` + ok + `, {"ifindex":0,"ifname":"mlx5_0","lqpn":-1,"type":"RC","state":"RTS","pid":1}]`, "entry 1: json: cannot unmarshal number -1"},
		{`[` + ok + `, {"ifindex":"0","ifname":"mlx5_0","lqpn":1,"type":"RC","state":"RTS","pid":1}]`, "entry 1: json: cannot unmarshal string"},
		{`[{"ifname":"mlx5_0","type":"RC","state":"RTS","pid":1}]`, "entry 0: no ifindex, lqpn"},
		{`[{"ifindex":0,"ifname":"","lqpn":1,"pid":1}]`, "entry 0: no ifname, type, state"},
		{`[` + ok + `, {"ifindex":0,"ifname":"mlx5_0","lqpn":12,"type":"UNKNOWN","state":"RTS","pid":1}]`, `entry 1: mlx5_0 lqpn 12: unknown type "UNKNOWN"`},
		{`[{"ifindex":0,"ifname":"mlx5_0","lqpn":12,"type":"rc","state":"RTS","pid":1}]`, `entry 0: mlx5_0 lqpn 12: unknown type "rc"`},
		{`[{"ifindex":0,"ifname":"mlx5_0","lqpn":12,"type":"RC","state":"BROKEN","pid":1}]`, `entry 0: mlx5_0 lqpn 12: unknown state "BROKEN"`},
		{`[{"ifindex":0,"ifname":"mlx5_0","lqpn":1,"type":"GSI","state":"RTS","pid":0}]`, "entry 0: mlx5_0 lqpn 1: a kernel queue pair (no pid) without comm"},
		{`[` + ok + `, {"ifindex":2,"ifname":"mlx5_0","lqpn":5,"type":"RC","state":"RTS","pid":1}]`, "entry 1: device mlx5_0 has ifindex 2, and 0 in an earlier entry"},
	} {
		path := filepath.Join(dir, "qp.json")
		writeFixture(t, path, c.text)
		_, err := NewFixture(path).QueuePairs(context.Background())
		if err == nil || !strings.Contains(err.Error(), path+": ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %s and saying %q", c.text, err, path, c.want)
		}
	}
	_, err := NewFixture(filepath.Join(dir, "absent.json")).QueuePairs(context.Background())
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "absent.json") {
		t.Errorf("a missing file: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := NewFixture(filepath.Join(dir, "qp.json")).QueuePairs(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled context: %v", err)
	}
}

func FuzzParseFixture(f *testing.F) {
	f.Add([]byte(fixtureText))
	f.Add([]byte(`[{"ifindex":0,"ifname":"a","lqpn":1,"type":"7","state":"200","comm":"x"}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := ParseFixture(b, 4)
		if err != nil {
			if len(l.QPs)+len(l.Devices) != 0 {
				t.Fatalf("an error with a listing: %v %+v", err, l)
			}
			return
		}
		if len(l.QPs) > 4 || l.Dropped < 0 {
			t.Fatalf("%d QPs, %d dropped", len(l.QPs), l.Dropped)
		}
		for _, q := range l.QPs {
			if typ, ok := ParseType(q.TypeName()); !ok || typ != q.Type || q.HasPID == (q.KernName != "") || q.Device == "" {
				t.Fatalf("%+v", q)
			}
		}
	})
}
