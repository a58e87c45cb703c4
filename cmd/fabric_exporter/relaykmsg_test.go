package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

// kernelLines returns the fabric_kernel_* samples of a scrape but the
// timestamps (each exporter turns the records' boot-relative times into
// its own reading of the clock).
func kernelLines(m string) string {
	var b strings.Builder
	for _, l := range strings.Split(m, "\n") {
		if strings.HasPrefix(l, "fabric_kernel_") && !strings.HasPrefix(l, "fabric_kernel_event_last_timestamp_seconds") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// hasSample reports whether a sample of name has all the labels given.
func hasSample(m, name string, labels ...string) bool {
	for _, l := range strings.Split(m, "\n") {
		if !strings.HasPrefix(l, name+"{") {
			continue
		}
		all := true
		for _, lb := range labels {
			all = all && strings.Contains(l, lb)
		}
		if all {
			return true
		}
	}
	return false
}

// waitScrape scrapes addr until ok accepts the answer (10s at most).
func waitScrape(t *testing.T, addr string, ok func(string) bool) string {
	t.Helper()
	var m string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if m = get(t, "http://"+addr+"/metrics"); ok(m) {
			return m
		}
	}
	t.Fatalf("not there after 10s:\n%s", grep(m, "kernel"))
	return ""
}

// startProcess runs the binary with args until the test ends; the caller
// may stop it earlier.
func startProcess(t *testing.T, args ...string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", args[0], logs)
		}
	})
	return cmd, logs
}

// relay-kmsg between a kernel log (a recording standing in for /dev/kmsg)
// and an exporter reading the FIFO: the exporter counts what an exporter
// reading the log itself counts; restarted, it counts what the kernel
// logged since, none of it twice; the relay exits 0 on SIGTERM.
func TestRelayKmsgCommand(t *testing.T) {
	dir := t.TempDir()
	in, fifo := filepath.Join(dir, "kmsg"), filepath.Join(dir, "kmsg.fifo")
	rec, err := os.ReadFile("../../internal/kmsg/testdata/fabric.kmsg")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(in, rec, 0o644); err != nil {
		t.Fatal(err)
	}
	relay, relayLog := startProcess(t, "relay-kmsg", "--input="+in, "--output="+fifo)
	flags := []string{"--path.sysfs=" + fixtureSys, "--collector.disable-defaults", "--collector.kernel-events"}
	direct, _ := startExporter(t, append(flags, "--collector.kernel-events.path="+in)...)
	want := kernelLines(waitScrape(t, direct, func(m string) bool { return strings.Contains(m, "\nfabric_kernel_log_records_total 12\n") }))

	// The exporter may start before the relay has made the FIFO: it
	// retries the open every poll.
	addr := testenv.FreeAddr(t)
	exp, _ := startProcess(t, append([]string{"--web.listen-address=" + addr, "--collector.kernel-events.path=" + fifo}, flags...)...)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(relayLog.String(), "relaying the kernel log"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the relay never found its reader")
		}
	}
	got := kernelLines(waitScrape(t, addr, func(m string) bool { return kernelLines(m) == want }))
	if !hasSample(got, "fabric_kernel_events_total", `class="xid"`, `kind="48"`) {
		t.Errorf("no Xid counted through the relay:\n%s", got)
	}

	// The exporter goes; the kernel logs an Xid and a cable event; the
	// relay finds no reader and waits; the next exporter gets both, and
	// nothing the first one counted.
	exp.Process.Kill()
	exp.Wait()
	more := "3,1013,11000000,-;NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n" +
		"6,1014,11000100,-;mlx5_core 0000:9a:00.0: Port module event: module 0, Cable plugged\n SUBSYSTEM=pci\n DEVICE=+pci:0000:9a:00.0\n"
	f, err := os.OpenFile(in, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(more); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(relayLog.String(), "the reader closed the FIFO"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the relay did not notice its reader had gone")
		}
	}
	addr2, _ := startExporter(t, append(flags, "--collector.kernel-events.path="+fifo)...)
	m := waitScrape(t, addr2, func(m string) bool { return strings.Contains(m, "\nfabric_kernel_log_records_total 2\n") })
	if !hasSample(m, "fabric_kernel_events_total", `class="xid"`, `kind="79"`) || !hasSample(m, "fabric_kernel_events_total", `class="port_module"`, `kind="cable_plugged"`) ||
		hasSample(m, "fabric_kernel_events_total", `kind="48"`) || !strings.Contains(m, "\nfabric_kernel_log_lost_records_total 0\n") {
		t.Errorf("after the restart:\n%s", grep(m, "fabric_kernel"))
	}
	time.Sleep(300 * time.Millisecond) // a duplicate would have arrived by now
	if m := get(t, "http://"+addr2+"/metrics"); !strings.Contains(m, "\nfabric_kernel_log_records_total 2\n") {
		t.Errorf("records after the restart:\n%s", grep(m, "fabric_kernel_log"))
	}

	relay.Process.Signal(syscall.SIGTERM)
	if err := relay.Wait(); err != nil {
		t.Errorf("relay-kmsg on SIGTERM: %v", err)
	}
}

// relay-kmsg refuses, with exit 1 and a message that says why, an output
// that is not a FIFO (left as it is) and an input it cannot open.
func TestRelayKmsgCommandErrors(t *testing.T) {
	dir := t.TempDir()
	in, file := filepath.Join(dir, "kmsg"), filepath.Join(dir, "file")
	for _, p := range []string{in, file} {
		if err := os.WriteFile(p, []byte("6,1,2,-;x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--input=" + in, "--output=" + file}, "exists and is not a FIFO (a regular file)"},
		{[]string{"--input=" + filepath.Join(dir, "none"), "--output=" + filepath.Join(dir, "fifo")}, "no such file or directory: mount the host's /dev/kmsg"},
		{[]string{"--input=" + in}, "required flag(s) '--output' not provided"},
	} {
		out, code := runBinary(t, append([]string{"relay-kmsg"}, tc.args...)...)
		if code == 0 || !strings.Contains(out, tc.want) {
			t.Errorf("relay-kmsg %s: exit %d, want non-zero and %q:\n%s", strings.Join(tc.args, " "), code, tc.want, out)
		}
	}
	if b, _ := os.ReadFile(file); string(b) != "6,1,2,-;x\n" {
		t.Errorf("the file at --output was changed: %q", b)
	}
	if _, err := os.Lstat(filepath.Join(dir, "fifo")); !os.IsNotExist(err) {
		t.Errorf("a FIFO was made although the input could not be opened: %v", err)
	}
}
