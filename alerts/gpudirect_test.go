package alerts

import (
	"bufio"
	"os"
	"regexp"
	"strings"
	"testing"
)

// The input of tests/gpudirect_test.yml is the seed's topology as the
// exporter reports it: every series of the judgement's input families in
// the end-to-end golden (the rail HCAs' only, mlx5_0 and mlx5_3) is in its
// first case, so the judgement is tested on what the collectors say.
func TestGPUDirectInputIsTheGolden(t *testing.T) {
	golden, err := os.Open("../collector/fixtures/e2e-output.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer golden.Close()
	test, err := os.ReadFile("tests/gpudirect_test.yml")
	if err != nil {
		t.Fatal(err)
	}
	first := string(test)
	if i := strings.Index(first, "# ---------------------------------------------------------------- the seed, no NCCL"); i > 0 {
		first = first[:i]
	}
	families := map[string]bool{"fabric_topology_gpu_path_info": true, "fabric_topology_path_info": true,
		"fabric_pcie_gpu_p2p_acs_info": true, "fabric_pcie_gpu_rdma_acs_info": true, "fabric_rail_info": true,
		"fabric_gpu_p2p_status_info": true}
	line := regexp.MustCompile(`^(\w+)\{(.*)\} 1$`)
	rail := regexp.MustCompile(`device="mlx5_[03]"`)
	n := 0
	sc := bufio.NewScanner(golden)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil || !families[m[1]] {
			continue
		}
		if (m[1] == "fabric_topology_path_info" || m[1] == "fabric_pcie_gpu_rdma_acs_info") && !rail.MatchString(m[2]) {
			continue
		}
		n++
		want := m[1] + `{job="fabric",instance="n1",` + m[2] + `}`
		if !strings.Contains(first, "'"+want+"'") {
			t.Errorf("tests/gpudirect_test.yml: first case lacks %s", want)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 56+16+56+16+2+56 {
		t.Errorf("%d input series in the golden, want %d (56 GPU pairs, 16 GPU × rail)", n, 56+16+56+16+2+56)
	}
}
