package proc

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestNcclEnv(t *testing.T) {
	env := "HF_TOKEN=hf_x\x00NCCL_IB_HCA==mlx5_0\x00NCCL_DEBUG=INFO\x00NCCL_DEBUG=TRACE\x00NCCL_DEBUGX=1\x00nccl_debug=x\x00NCCL_NET\x00NCCL_NET=IB\x00NCCL_ALGO=" + strings.Repeat("R", 2000) +
		"\x00NCCL_RAS_ADDR=10.0.0.7:28028\x00NCCL_RAS_ENABLE=0\x00NCCL_RAS_TIMEOUT_FACTOR=2"
	var got []string
	NCCLEnv([]byte(env), func(name string, value []byte) {
		got = append(got, name+"="+strconv.Itoa(len(value))+":"+string(value[:min(len(value), 8)]))
	})
	want := []string{"NCCL_IB_HCA=7:=mlx5_0", "NCCL_DEBUG=4:INFO", "NCCL_NET=2:IB", "NCCL_ALGO=1024:RRRRRRRR", "NCCL_RAS_ADDR=14:10.0.0.7", "NCCL_RAS_ENABLE=1:0"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%v, want %v", got, want)
	}
}

// FuzzNcclEnv: only allow-listed names come out, each once, with a value
// taken from the input after "NAME=".
func FuzzNcclEnv(f *testing.F) {
	raw, _ := os.ReadFile(fixtures + "/proc/4242/environ")
	f.Add(raw)
	f.Fuzz(func(t *testing.T, in []byte) {
		seen := map[string]bool{}
		NCCLEnv(in, func(name string, value []byte) {
			if seen[name] || !slices.Contains(ncclEnvAllowed[:], name) {
				t.Fatalf("name %q (seen %v)", name, seen[name])
			}
			seen[name] = true
			if !bytes.Contains(in, append([]byte(name+"="), value...)) {
				t.Fatalf("%s: value %q not in the input", name, value)
			}
		})
	})
}
