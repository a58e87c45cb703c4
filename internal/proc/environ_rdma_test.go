package proc

import (
	"strings"
	"testing"
)

// NCCL_IB_HCA as NCCL's parseStringList and matchIfList read it.
func TestIBHCA(t *testing.T) {
	type dp struct {
		dev  string
		port int
	}
	for _, tc := range []struct {
		value   string
		yes, no []dp
	}{
		{"mlx5_0,mlx5_3", []dp{{"mlx5_0", 1}, {"mlx5_3", 1}, {"mlx5_3", 2}}, []dp{{"mlx5_1", 1}}},
		// Prefixes by default: mlx5_1 is also mlx5_10..mlx5_17.
		{"mlx5_1", []dp{{"mlx5_1", 1}, {"mlx5_10", 1}}, []dp{{"mlx5_0", 1}, {"mlx4_1", 1}}},
		{"mlx5", []dp{{"mlx5_0", 1}, {"mlx5_17", 1}}, []dp{{"mlx4_0", 1}, {"bnxt_re0", 1}}},
		// '=': exact names.
		{"=mlx5_1", []dp{{"mlx5_1", 1}}, []dp{{"mlx5_10", 1}, {"mlx5_0", 1}}},
		{"=mlx5", nil, []dp{{"mlx5_0", 1}}},
		// '^': every device but the listed ones; '^' comes before '='.
		{"^mlx5_0", []dp{{"mlx5_3", 1}, {"mlx4_0", 1}}, []dp{{"mlx5_0", 1}, {"mlx5_0", 2}}},
		{"^mlx5_1", []dp{{"mlx5_0", 1}}, []dp{{"mlx5_1", 1}, {"mlx5_10", 1}}},
		{"^=mlx5_1", []dp{{"mlx5_10", 1}, {"mlx5_0", 1}}, []dp{{"mlx5_1", 1}}},
		{"=^mlx5_1", nil, []dp{{"mlx5_1", 1}, {"mlx5_10", 1}}}, // exact name "^mlx5_1"
		// Ports.
		{"mlx5_0:1,mlx5_3:2", []dp{{"mlx5_0", 1}, {"mlx5_3", 2}}, []dp{{"mlx5_0", 2}, {"mlx5_3", 1}}},
		{"^mlx5_0:2", []dp{{"mlx5_0", 1}, {"mlx5_3", 2}}, []dp{{"mlx5_0", 2}}},
		{"mlx5_0:", []dp{{"mlx5_0", 1}}, nil},  // empty port: any
		{"mlx5_0:x", nil, []dp{{"mlx5_0", 1}}}, // atoi("x") = 0: no port
		// An empty list matches every device: "^" alone excludes them all.
		{"", []dp{{"mlx5_0", 1}}, nil},
		{"=", []dp{{"mlx5_0", 1}}, nil},
		{"^", nil, []dp{{"mlx5_0", 1}, {"mlx5_3", 1}}},
		// Entries without a name are skipped; blanks are not trimmed.
		{":1,mlx5_3", []dp{{"mlx5_3", 1}}, []dp{{"mlx5_0", 1}}},
		{",,mlx5_3,", []dp{{"mlx5_3", 1}}, []dp{{"mlx5_0", 1}}},
		{"mlx5_0, mlx5_3", []dp{{"mlx5_0", 1}}, []dp{{"mlx5_3", 1}}},
		// NCCL reads 32 entries.
		{strings.Repeat("x,", 32) + "mlx5_0", nil, []dp{{"mlx5_0", 1}}},
	} {
		h := ParseIBHCA(tc.value)
		for _, d := range tc.yes {
			if !h.Selects(d.dev, d.port) {
				t.Errorf("NCCL_IB_HCA=%q does not select %s:%d", tc.value, d.dev, d.port)
			}
		}
		for _, d := range tc.no {
			if h.Selects(d.dev, d.port) {
				t.Errorf("NCCL_IB_HCA=%q selects %s:%d", tc.value, d.dev, d.port)
			}
		}
	}
}

func TestMultiNode(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want bool
	}{
		{"WORLD_SIZE=16\x00LOCAL_WORLD_SIZE=8\x00", true},                 // torchrun, 2 nodes
		{"LOCAL_WORLD_SIZE=8\x00WORLD_SIZE=8\x00", false},                 // one node
		{"OMPI_COMM_WORLD_SIZE=32\x00OMPI_COMM_WORLD_LOCAL_SIZE=8", true}, // mpirun, 4 nodes
		{"OMPI_COMM_WORLD_SIZE=8\x00OMPI_COMM_WORLD_LOCAL_SIZE=8\x00", false},
		{"WORLD_SIZE=16\x00", false},                                       // no local size: says nothing
		{"WORLD_SIZE=16\x00OMPI_COMM_WORLD_LOCAL_SIZE=8\x00", false},       // different launchers
		{"WORLD_SIZE=8\x00LOCAL_WORLD_SIZE=8\x00WORLD_SIZE=16\x00", false}, // first definition wins
		{"WORLD_SIZE=16 \x00LOCAL_WORLD_SIZE=8\x00", false},
		{"WORLD_SIZE=-16\x00LOCAL_WORLD_SIZE=8\x00", false},
		{"WORLD_SIZE=99999999999\x00LOCAL_WORLD_SIZE=8\x00", false},
		{"world_size=16\x00local_world_size=8\x00", false},
		{"XWORLD_SIZE=16\x00LOCAL_WORLD_SIZE=8\x00", false},
		{"WORLD_SIZE=8\x00LOCAL_WORLD_SIZE=8\x00OMPI_COMM_WORLD_SIZE=16\x00OMPI_COMM_WORLD_LOCAL_SIZE=8\x00", true},
		{"", false},
	} {
		if got := MultiNode([]byte(tc.env)); got != tc.want {
			t.Errorf("%q: %v, want %v", tc.env, got, tc.want)
		}
	}
}

// FuzzIBHCA: any value parses; an excluding list selects exactly what the
// same list without '^' does not.
func FuzzIBHCA(f *testing.F) {
	for _, s := range []string{"mlx5_0,mlx5_3", "^=mlx5_1:1", "mlx5_0:", ":1,,x", "="} {
		f.Add(s, "mlx5_0", 1)
	}
	f.Fuzz(func(t *testing.T, v, dev string, port int) {
		h := ParseIBHCA(v)
		if len(h.entries) > maxIBHCAEntries {
			t.Fatalf("%d entries", len(h.entries))
		}
		if rest, ok := strings.CutPrefix(v, "^"); ok && !strings.HasPrefix(rest, "^") {
			if h.Selects(dev, port) == ParseIBHCA(rest).Selects(dev, port) {
				t.Fatalf("%q and %q agree on %s:%d", v, rest, dev, port)
			}
		}
	})
}
