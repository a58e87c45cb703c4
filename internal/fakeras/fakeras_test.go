package fakeras_test

import (
	"bufio"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/fakeras"
	"github.com/fabric-exporter/fabric_exporter/internal/ncclras"
)

const testdata = "../ncclras/testdata"

// TestServesEachState: the stand-in serves every RAS state's answer, JSON
// to a client that asks for it, text otherwise or from a server before
// 2.28.7, with or without TIMEOUT.
func TestServesEachState(t *testing.T) {
	type judged struct {
		incomplete, error, mismatch bool
		missing, nocomm             int
	}
	for _, tc := range []struct {
		json, text, old string
		want            judged
		oldMismatch     bool // the 2.25.1 file's job also differs in collective counts
	}{
		{"2.28.9-json-healthy.txt", "2.28.9-text-healthy.txt", "2.25.1-text-constructed-healthy.txt", judged{}, false},
		{"2.28.9-json-killed.txt", "2.28.9-text-killed.txt", "2.25.1-text-constructed-killed.txt", judged{incomplete: true, error: true, missing: 1}, true},
		{"2.28.9-json-constructed-nocomm.txt", "2.28.9-text-constructed-nocomm.txt", "2.25.1-text-constructed-unknown.txt", judged{mismatch: true, nocomm: 1}, false},
		{"2.29.7-json-constructed-nocomm-tp8.txt", "2.28.9-text-constructed-nocomm-tp8.txt", "2.25.1-text-constructed-unknown-tp8.txt", judged{mismatch: true, nocomm: 2}, false},
		{"2.29.7-json-constructed-inprogress.txt", "2.28.9-text-constructed-inprogress.txt", "2.25.1-text-constructed-inprogress.txt", judged{mismatch: true}, false},
		{"2.29.7-json-constructed-finalize.txt", "2.28.9-text-constructed-finalize.txt", "2.25.1-text-constructed-finalize.txt", judged{mismatch: true}, false},
		{"2.28.9-json-constructed-abort.txt", "2.28.9-text-constructed-abort.txt", "2.25.1-text-constructed-abort.txt", judged{error: true, mismatch: true}, false},
		{"2.29.7-json-constructed-unresponsive-dead.txt", "2.28.9-text-constructed-unresponsive-dead.txt", "2.25.1-text-constructed-unresponsive-dead.txt", judged{incomplete: true, missing: 2}, false},
	} {
		f := fakeras.Start(t, testdata, true, tc.json, tc.text)
		old := fakeras.Start(t, testdata, false, "", tc.old)
		for _, q := range []struct {
			srv    *fakeras.Server
			o      ncclras.Options
			format string
			cmds   string
		}{
			{f, ncclras.Options{}, "json", "CLIENT PROTOCOL 2|SET FORMAT json|STATUS"},
			{f, ncclras.Options{RASTimeout: 3 * time.Second, Verbose: true}, "json", "CLIENT PROTOCOL 2|TIMEOUT 3|SET FORMAT json|VERBOSE STATUS"},
			{f, ncclras.Options{Text: true}, "text", "CLIENT PROTOCOL 2|STATUS"},
			{old, ncclras.Options{}, "text", "CLIENT PROTOCOL 2|SET FORMAT json|STATUS"},
			{old, ncclras.Options{RASTimeout: time.Second}, "text", "CLIENT PROTOCOL 2|TIMEOUT 1|SET FORMAT json|STATUS"},
		} {
			before := len(q.srv.Commands())
			st, err := ncclras.Query(context.Background(), q.srv.Addr(), q.o)
			if err != nil {
				t.Fatalf("%s: %v", tc.json, err)
			}
			if got := strings.Join(q.srv.Commands()[before:], "|"); got != q.cmds {
				t.Errorf("%s %+v: commands %s, want %s", tc.json, q.o, got, q.cmds)
			}
			if st.Format != q.format {
				t.Errorf("%s %+v: format %s", tc.json, q.o, st.Format)
			}
			var got judged
			for _, c := range st.Communicators {
				got.incomplete, got.error, got.mismatch = got.incomplete || c.Incomplete, got.error || c.Error, got.mismatch || c.Mismatch
				got.missing += c.MissingCount
				got.nocomm += c.NoCommCount
			}
			want := tc.want
			if q.srv == old && tc.oldMismatch {
				want.mismatch = true
			}
			if got != want {
				t.Errorf("%s %+v (%s): %+v, want %+v", tc.json, q.o, st.Version, got, want)
			}
		}
	}
}

// TestProtocol: the answers of rasClientEventLoop to each command, the
// connection staying open after an error.
func TestProtocol(t *testing.T) {
	f := fakeras.Start(t, testdata, true, "2.28.9-json-healthy.txt", "2.28.9-text-healthy.txt")
	c, err := net.Dial("tcp", f.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for _, x := range []struct{ cmd, want string }{
		{"client protocol 99", "SERVER PROTOCOL 2"},
		{"TIMEOUT 5", "OK"},
		{"TIMEOUT 0", "OK"},
		{"TIMEOUT +7", "OK"},
		{"TIMEOUT ", "OK"}, // strtol of "" reads 0
		{"TIMEOUT -1", "ERROR: Invalid timeout value -1"},
		{"TIMEOUT 5s", "ERROR: Invalid timeout value 5s"},
		{"TIMEOUT x", "ERROR: Invalid timeout value x"},
		{"SET FORMAT xml", "ERROR: Invalid format xml"},
		{"SET FORMAT text", "OK"},
		{"HELLO", "ERROR: Unknown command HELLO"},
		{"SET FORMAT JSON", "OK"},
	} {
		if _, err := c.Write([]byte(x.cmd + "\r\n")); err != nil {
			t.Fatal(err)
		}
		l, err := br.ReadString('\n')
		if err != nil || strings.TrimSuffix(l, "\n") != x.want {
			t.Fatalf("%s: %q %v, want %q", x.cmd, l, err, x.want)
		}
	}
	c.Write([]byte("STATUS\n"))
	st, err := ncclras.ParseJSON(readAll(t, br))
	if err != nil || st.Version != "2.28.9" {
		t.Fatalf("%v %+v", err, st)
	}
	if got := f.Commands(); len(got) != 13 || got[0] != "client protocol 99" || got[12] != "STATUS" {
		t.Fatalf("commands %q", got)
	}
}

func readAll(t *testing.T, br *bufio.Reader) []byte {
	t.Helper()
	var b strings.Builder
	if _, err := br.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return []byte(b.String())
}
