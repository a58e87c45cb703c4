package ncclras

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// jobAnswer writes a JSON answer as NCCL 2.28.9 does for comms
// communicators of ranks ranks over two hosts (TP16 over two nodes: a few
// communicators of 16 ranks).
func jobAnswer(comms, ranks int) []byte {
	var b strings.Builder
	b.WriteString("{\n  \"nccl_version\": \"2.28.9\",\n  \"cuda_runtime_version\": 13000,\n  \"cuda_driver_version\": 13000,\n  \"timestamp\": \"2026-12-02 09:15:29\",\n")
	fmt.Fprintf(&b, "  \"communicators_count\": %d,\n  \"communicators\": [\n", comms)
	for c := 0; c < comms; c++ {
		if c > 0 {
			b.WriteString(",\n")
		}
		fmt.Fprintf(&b, "    {\n      \"hash\": \"0x%x\",\n      \"secondary_hash\": \"0x1:0x2\",\n      \"size\": %d,\n      \"ranks_count\": %d,\n      \"missing_ranks_count\": 0,\n      \"ranks\": [\n", 0xf8e68da1f581fed5-uint64(c), ranks, ranks)
		for r := 0; r < ranks; r++ {
			if r > 0 {
				b.WriteString(",\n")
			}
			fmt.Fprintf(&b, "        {\n          \"rank\": %d,\n          \"host\": \"10.0.0.%d\",\n          \"pid\": %d,\n          \"cuda_dev\": %d,\n          \"nvml_dev\": %d,\n", r, 1+r/8, 4000+r%8, r%8, r%8)
			b.WriteString("          \"status\": {\n            \"init_state\": 0,\n            \"async_error\": 0,\n            \"finalize_called\": false,\n            \"destroy_flag\": false,\n            \"abort_flag\": false\n          },\n")
			b.WriteString("          \"collective_counts\": {\n            \"Broadcast\": 1,\n            \"Reduce\": 0,\n            \"AllGather\": 12,\n            \"ReduceScatter\": 0,\n            \"AllReduce\": 123456789\n          }\n        }")
		}
		b.WriteString("\n      ],\n      \"missing_ranks\": [\n\n      ]\n    }")
	}
	b.WriteString("\n  ],\n  \"ras\": {\n    \"collection_time_sec\": 0.000,\n    \"timeouts_count\": 0\n  }\n}\n")
	return []byte(b.String())
}

func BenchmarkParseJSONTP16(b *testing.B) {
	data := jobAnswer(4, 16)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseJSON(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkQueryTP16 is one whole query over loopback (dial, handshake,
// answer, parse) against a server that answers at once.
func BenchmarkQueryTP16(b *testing.B) {
	data := jobAnswer(4, 16)
	p := newPeer(b, rasServer(true, data, nil))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Query(context.Background(), p.addr(), Options{Timeout: 2 * time.Second}); err != nil {
			b.Fatal(err)
		}
	}
}

func TestJobAnswer(t *testing.T) {
	st, err := ParseJSON(jobAnswer(4, 16))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Communicators) != 4 || st.Nodes != 2 || st.Processes != 16 {
		t.Fatalf("%d communicators, %d nodes, %d processes", len(st.Communicators), st.Nodes, st.Processes)
	}
	for _, c := range st.Communicators {
		if c.Size != 16 || len(c.Ranks) != 16 || c.Nodes != 2 || c.Mismatch || c.Error || c.Incomplete {
			t.Fatalf("%+v", c)
		}
	}
}
