package devlinknl

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// healthShow is what `devlink -j health show` prints (iproute2's
// pr_out_health) for an mlx5 PF: device reporters under the handle, port
// reporters under handle/port, the dump time in local time.
const healthShow = `{"health":{"pci/0000:3b:00.0":[{"reporter":"fw","state":"healthy","error":0,"recover":0,"auto_dump":true},` +
	`{"reporter":"fw_fatal","state":"error","error":1,"recover":0,"last_dump_date":"2026-01-02","last_dump_time":"03:04:05","grace_period":60000,"auto_recover":true,"auto_dump":true}],` +
	`"pci/0000:3b:00.0/65535":[{"reporter":"tx","state":"healthy","error":18446744073709551615,"recover":5,"grace_period":500,"auto_recover":true,"auto_dump":true}]}}`

// devInfo is `devlink -j dev info` (pr_out_info) for mlx5.
const devInfo = `{"info":{"pci/0000:3b:00.0":{"driver":"mlx5_core","serial_number":"MT2231X12345","versions":{"fixed":{"fw.psid":"MT_0000000838"},` +
	`"running":{"fw.version":"28.41.1000"},"stored":{"fw.version":"28.43.1014"}}}}}`

func TestParseJSON(t *testing.T) {
	h, err := ParseHealthJSON([]byte(healthShow))
	rs := h[hcaA]
	if err != nil || len(h) != 1 || len(rs) != 3 {
		t.Fatalf("%v %v", h, err)
	}
	if r := rs[1]; r.Name != "fw_fatal" || r.State != StateError || r.Errors != 1 || r.HasPort || r.DumpNS != 1_767_323_045_000_000_000 {
		t.Errorf("fw_fatal %+v", r)
	}
	if r := rs[2]; r.Name != "tx" || !r.HasPort || r.Port != 65535 || r.Errors != 1<<64-1 || r.Recoveries != 5 || r.DumpNS != 0 {
		t.Errorf("tx %+v", r)
	}
	i, err := ParseInfoJSON([]byte(devInfo))
	if err != nil || i[hcaA].Driver != "mlx5_core" || i[hcaA].Serial != "MT2231X12345" || i[hcaA].Stored["fw.version"] != "28.43.1014" {
		t.Errorf("%+v %v", i, err)
	}
	for _, bad := range []string{`{"health":{"pci":[]}}`, `{"health":{"pci/x":[{"reporter":"fw","state":"sick","error":0,"recover":0}]}}`,
		`{"health":{"pci/x":[{"reporter":"fw","state":"healthy","error":0}]}}`, `{"health":{"pci/x":[{"reporter":"fw","state":"error","error":1,"recover":0,"last_dump_date":"x"}]}}`, `[`} {
		if _, err := ParseHealthJSON([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	if _, err := ParseInfoJSON([]byte(`{"info":{"pci/x/1":{}}}`)); err == nil {
		t.Error("info of a port accepted")
	}
}

func TestFixtures(t *testing.T) {
	dir := t.TempDir()
	f := Fixtures{Dir: dir}
	if _, err := f.HealthReporters(t.Context(), hcaA); !errors.Is(err, ErrNotAvailable) {
		t.Errorf("empty directory: %v", err)
	}
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("health.json", healthShow)
	if rs, err := f.HealthReporters(t.Context(), hcaA); err != nil || len(rs) != 3 {
		t.Errorf("%v %v", rs, err)
	}
	if _, err := f.Info(t.Context(), hcaA); !errors.Is(err, ErrNotSupported) {
		t.Errorf("no info.json: %v", err)
	}
	if _, err := f.HealthReporters(t.Context(), hcaB); !errors.Is(err, ErrNoDevice) {
		t.Errorf("another device: %v", err)
	}
	write("info.json", devInfo)
	if i, err := f.Info(t.Context(), hcaA); err != nil || i.Running["fw.version"] != "28.41.1000" {
		t.Errorf("%+v %v", i, err)
	}
	write("not-answering", "# a wedged driver\npci/0000:3b:00.0\n")
	if _, err := f.HealthReporters(t.Context(), hcaA); !errors.Is(err, ErrTimeout) {
		t.Errorf("not answering: %v", err)
	}
	write("health.json", "{")
	if _, err := f.HealthReporters(t.Context(), hcaA); err == nil {
		t.Error("bad JSON accepted")
	}
}

func FuzzParseJSON(f *testing.F) {
	f.Add([]byte(healthShow))
	f.Add([]byte(devInfo))
	f.Fuzz(func(t *testing.T, b []byte) {
		if h, err := ParseHealthJSON(b); err == nil {
			for k, rs := range h {
				if k.Bus == "" || k.Device == "" || len(rs) > MaxReporters {
					t.Fatalf("%v: %d reporters", k, len(rs))
				}
			}
		}
		if i, err := ParseInfoJSON(b); err == nil {
			for _, x := range i {
				if len(x.Fixed) > MaxVersions || len(x.Driver) > maxString {
					t.Fatalf("unbounded %+v", x)
				}
			}
		}
	})
}
