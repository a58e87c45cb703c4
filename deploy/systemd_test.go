package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

const (
	unitPath           = "systemd/fabric_exporter.service"
	kernelEventsDropIn = "systemd/kernel-events.conf"
)

// unit is a parsed systemd unit: section → key → values in order.
type unit map[string]map[string][]string

func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{}
	section := ""
	s := bufio.NewScanner(f)
	for n := 1; s.Scan(); n++ {
		line := strings.TrimSpace(s.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
		case strings.HasSuffix(line, `\`):
			t.Fatalf("%s:%d: continuation lines are not parsed here", path, n)
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: %q", path, n, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

// last returns the effective value of a single-valued key.
func (u unit) last(section, key string) string {
	v := u[section][key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// words returns the space-separated words of all values of a list key.
func (u unit) words(section, key string) []string {
	var w []string
	for _, v := range u[section][key] {
		w = append(w, strings.Fields(v)...)
	}
	slices.Sort(w)
	return w
}

// The unit's hardening keeps what the collectors read and nothing more.
func TestSystemdUnitKeys(t *testing.T) {
	u := parseUnit(t, unitPath)
	svc := "Service"
	for key, want := range map[string]string{
		"ProtectSystem": "strict", "PrivateTmp": "yes", "NoNewPrivileges": "yes",
		"ProtectKernelTunables": "yes", "ProtectKernelModules": "yes", "ProtectControlGroups": "yes",
		"RestrictSUIDSGID": "yes", "RestrictNamespaces": "yes", "LockPersonality": "yes",
		"DevicePolicy": "closed", "SystemCallArchitectures": "native",
	} {
		if got := u.last(svc, key); got != want {
			t.Errorf("%s=%q, want %q", key, got, want)
		}
	}
	if h := u.last(svc, "ProtectHome"); h != "yes" && h != "read-only" && h != "tmpfs" {
		t.Errorf("ProtectHome=%q", h)
	}
	if u.last(svc, "DynamicUser") != "yes" {
		if usr := u.last(svc, "User"); usr == "" || usr == "root" || usr == "0" {
			t.Errorf("neither DynamicUser=yes nor a dedicated User= (User=%q)", usr)
		}
	}
	caps := []string{"CAP_DAC_READ_SEARCH", "CAP_SYS_PTRACE"}
	for _, key := range []string{"CapabilityBoundingSet", "AmbientCapabilities"} {
		if got := u.words(svc, key); !slices.Equal(got, caps) {
			t.Errorf("%s=%v, want exactly %v", key, got, caps)
		}
	}
	// AF_INET: the ethtool ioctl socket and TCP; AF_INET6; AF_UNIX: DCGM,
	// socket activation. An allow list, not a deny list.
	if got := u.words(svc, "RestrictAddressFamilies"); !slices.Equal(got, []string{"AF_INET", "AF_INET6", "AF_UNIX"}) {
		t.Errorf("RestrictAddressFamilies=%v", got)
	}
	// NVML opens /dev/nvidiactl and /dev/nvidia<N> read-write.
	if !slices.ContainsFunc(u[svc]["DeviceAllow"], func(v string) bool {
		f := strings.Fields(v)
		return len(f) == 2 && (f[0] == "char-nvidia-frontend" || strings.HasPrefix(f[0], "/dev/nvidia")) && strings.Contains(f[1], "r") && strings.Contains(f[1], "w")
	}) {
		t.Errorf("DeviceAllow=%v: want the NVIDIA device nodes read-write", u[svc]["DeviceAllow"])
	}
	// Settings that would hide what the collectors read.
	for key, bad := range map[string][]string{
		"PrivateDevices": {"yes", "true"}, "PrivateNetwork": {"yes", "true"},
		"ProtectProc": {"invisible", "noaccess"}, "ProcSubset": {"pid"},
		"PrivateUsers": {"yes", "true"},
	} {
		if slices.Contains(bad, u.last(svc, key)) {
			t.Errorf("%s=%s hides what the collectors read", key, u.last(svc, key))
		}
	}
	start := strings.Fields(u.last(svc, "ExecStart"))
	if len(start) == 0 || filepath.Base(start[0]) != "fabric_exporter" {
		t.Errorf("ExecStart=%q", u.last(svc, "ExecStart"))
	}
	if u.last("Install", "WantedBy") != "multi-user.target" {
		t.Error("WantedBy=multi-user.target missing")
	}
}

// unitDir writes the unit, its ExecStart pointed at an executable that
// exists here (this test binary: verify checks it), into a new directory
// with the drop-ins given in fabric_exporter.service.d/, where
// systemd-analyze looks for a unit's drop-ins; it returns the unit's path.
func unitDir(t *testing.T, dropIns ...string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "fabric_exporter.service")
	text := strings.Replace(string(b), "ExecStart=/usr/local/bin/fabric_exporter", "ExecStart="+self, 1)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range dropIns {
		b, err := os.ReadFile(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(path+".d", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(path+".d", filepath.Base(d)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// analyze runs systemd-analyze verify (which must not say a word about
// the unit or its drop-ins) and security, and returns the exposure and
// security's output.
func analyze(t *testing.T, path string) (float64, string) {
	t.Helper()
	sa := testenv.Tool(t, "systemd-analyze")
	out, err := exec.Command(sa, "verify", path).CombinedOutput()
	if err != nil || strings.Contains(string(out), "fabric_exporter") {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err = exec.Command(sa, "security", "--offline=true", path).CombinedOutput()
	if err != nil && strings.Contains(string(out), "offline") {
		t.Skipf("systemd-analyze security --offline unsupported: %s", out)
	}
	m := regexp.MustCompile(`Overall exposure level for fabric_exporter\.service: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	score, _ := strconv.ParseFloat(string(m[1]), 64)
	return score, string(out)
}

// systemd-analyze verify accepts the unit without a warning, and
// systemd-analyze security rates its exposure OK (≤ 3.0).
func TestSystemdAnalyze(t *testing.T) {
	score, out := analyze(t, unitDir(t))
	t.Logf("systemd-analyze security: exposure %.1f", score)
	if score > 3.0 {
		t.Errorf("exposure %.1f > 3.0:\n%s", score, out)
	}
}

// The kernel-events drop-in gives the exporter what reading /dev/kmsg
// needs and nothing else: the kernel log unprotected, CAP_SYSLOG (bounding
// and ambient, merged with the unit's two), the device read-only under the
// unit's DevicePolicy=closed. Every other setting stays the unit's.
func TestSystemdKernelEventsDropIn(t *testing.T) {
	u, d := parseUnit(t, unitPath), parseUnit(t, kernelEventsDropIn)
	svc := "Service"
	if len(d) != 1 || d[svc] == nil {
		t.Fatalf("sections %v: want [Service] only", d)
	}
	var keys []string
	for k := range d[svc] {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := []string{"AmbientCapabilities", "CapabilityBoundingSet", "DeviceAllow", "ProtectKernelLogs"}; !slices.Equal(keys, want) {
		t.Errorf("keys %v, want exactly %v", keys, want)
	}
	// What it undoes is the unit's: without the drop-in the log is closed.
	if u.last(svc, "ProtectKernelLogs") != "yes" || u.last(svc, "DevicePolicy") != "closed" || slices.Contains(u.words(svc, "CapabilityBoundingSet"), "CAP_SYSLOG") {
		t.Error("the unit no longer closes the kernel log: the drop-in's comments are stale")
	}
	if d.last(svc, "ProtectKernelLogs") != "no" {
		t.Errorf("ProtectKernelLogs=%q: /dev/kmsg stays inaccessible", d.last(svc, "ProtectKernelLogs"))
	}
	for _, key := range []string{"CapabilityBoundingSet", "AmbientCapabilities"} {
		if got := d.words(svc, key); !slices.Equal(got, []string{"CAP_SYSLOG"}) {
			t.Errorf("%s=%v, want CAP_SYSLOG (merged with the unit's)", key, got)
		}
	}
	if got := d[svc]["DeviceAllow"]; !slices.Equal(got, []string{"/dev/kmsg r"}) {
		t.Errorf("DeviceAllow=%q, want /dev/kmsg read-only", got)
	}
	b, err := os.ReadFile(kernelEventsDropIn)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"/etc/systemd/system/fabric_exporter.service.d/kernel-events.conf", "--collector.kernel-events", "FABRIC_EXPORTER_ARGS"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the drop-in's header does not say %q", want)
		}
	}
}

// systemd-analyze reads the drop-in with the unit: verify accepts both
// without a warning, security sees the device and CAP_SYSLOG and still
// rates the exposure OK.
func TestSystemdAnalyzeKernelEvents(t *testing.T) {
	base, _ := analyze(t, unitDir(t))
	score, out := analyze(t, unitDir(t, kernelEventsDropIn))
	t.Logf("systemd-analyze security with kernel-events.conf: exposure %.1f (the unit alone %.1f)", score, base)
	if !strings.Contains(out, "/dev/kmsg:r") || score <= base {
		t.Errorf("systemd-analyze did not read the drop-in (exposure %.1f, the unit alone %.1f):\n%s", score, base, out)
	}
	if score > 3.0 {
		t.Errorf("exposure %.1f > 3.0:\n%s", score, out)
	}
}
