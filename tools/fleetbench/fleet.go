// The simulated fleet: N nodes served from one HTTP server, their counters
// moving at plausible rates, and the faults planted on some of them.

package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

type node struct {
	mu     sync.Mutex
	series []tseries
	vals   []float64
	last   time.Time
	rnd    *rand.Rand
	prefix [][]byte
}

type fleet struct {
	tmpl  *template
	nodes map[string]*node
	names []string
	// steady: every counter is value + rate·(now − t0) and every gauge its
	// template value, a function of the wall clock alone, each sample with
	// its timestamp, so that servers scraping the same node at different
	// moments store the same curve (-serve -steady: the distributed test
	// compares them).
	steady bool
	t0     time.Time
}

// planted returns the fault of node i and the alerts it must raise
// (fire: must fire by the end of the run; pend: pending or firing).
func planted(i int) (kind string, fire, pend []string) {
	switch i % 100 {
	case 1:
		return "imbalance", nil, []string{"RailImbalance"}
	case 2:
		return "pfc", []string{"PFCStorm"}, nil
	case 3:
		return "retrans", []string{"RoCERetransmissions"}, nil
	case 4:
		return "socket", []string{"NCCLSocketFallback"}, nil
	case 5:
		return "raildown", []string{"RailLinkDown"}, nil
	}
	return "", nil, nil
}

func newFleet(t *template, n int) *fleet {
	f := &fleet{tmpl: t, nodes: map[string]*node{}}
	if t.meta["fabric_nccl_connections"] == "" {
		t.meta["fabric_nccl_connections"] = "# TYPE fabric_nccl_connections gauge\n"
	}
	for i := range n {
		name := fmt.Sprintf("node%04d", i)
		kind, _, _ := planted(i)
		nd := &node{rnd: rand.New(rand.NewPCG(uint64(i), 42))}
		var extra []tseries
		for _, s := range t.series {
			s := s
			switch {
			case kind == "imbalance" && strings.HasPrefix(s.name, "fabric_rdma_port_") && strings.HasSuffix(s.name, "_bytes_total") && !strings.Contains(s.labels, `device="mlx5_0"`):
				s.rate /= 10
			case kind == "pfc" && s.name == "fabric_pfc_pause_duration_seconds_total" && strings.Contains(s.labels, `netdev="eth3"`) && strings.Contains(s.labels, `direction="rx"`):
				s.rate = 0.5
			case kind == "pfc" && s.name == "fabric_pause_storm_events_total" && strings.Contains(s.labels, `netdev="eth3"`):
				s.rate = 1.0 / 15
			case kind == "retrans" && (s.name == "fabric_rdma_hw_local_ack_timeout_err_total" || s.name == "fabric_rdma_retransmission_events_total") && strings.Contains(s.labels, `device="mlx5_2"`):
				s.rate = 200 // the hw counter and the exporter's sum of the six
			case kind == "socket" && s.name == "fabric_nccl_net_info":
				s.labels = strings.Replace(s.labels, `net="IB"`, `net="Socket"`, 1)
			case kind == "raildown" && s.name == "fabric_rdma_port_up" && strings.Contains(s.labels, `device="mlx5_1"`):
				s.value = 0
			}
			nd.series = append(nd.series, s)
			if kind == "socket" && s.name == "fabric_nccl_net_info" {
				// The log's evidence that the job spans nodes (the
				// template's init-only log has none, and the rule
				// needs it): its channels on NET/Socket.
				host, pid := hostRe.FindStringSubmatch(s.labels), pidRe.FindStringSubmatch(s.labels)
				extra = append(extra, tseries{name: "fabric_nccl_connections", value: 8,
					labels: fmt.Sprintf(`{gdr="false",host="%s",pid="%s",transport="NET/Socket"}`, host[1], pid[1])})
			}
		}
		nd.series = append(nd.series, extra...)
		for _, s := range nd.series {
			nd.vals = append(nd.vals, s.value)
			nd.prefix = append(nd.prefix, []byte(s.name+s.labels+" "))
		}
		f.nodes[name] = nd
		f.names = append(f.names, name)
	}
	return f
}

var hostRe, pidRe = regexp.MustCompile(`host="([^"]*)"`), regexp.MustCompile(`pid="([^"]*)"`)

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func (f *fleet) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	nd := f.nodes[r.URL.Query().Get("node")]
	if nd == nil {
		http.NotFound(w, r)
		return
	}
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	defer bufPool.Put(buf)
	nd.mu.Lock()
	now := time.Now()
	var stamp []byte
	if f.steady {
		// The value at a whole millisecond, with that millisecond as the
		// sample's timestamp: the scraper's own timestamp (when its
		// scrape began) is milliseconds off under load.
		ms := now.UnixMilli()
		el := float64(ms-f.t0.UnixMilli()) / 1000
		for i, s := range nd.series {
			nd.vals[i] = s.value + s.rate*el
		}
		stamp = strconv.AppendInt([]byte{' '}, ms, 10)
	}
	dt := 0.0
	if !nd.last.IsZero() {
		dt = now.Sub(nd.last).Seconds()
	}
	nd.last = now
	var b []byte
	lastName := ""
	for i, s := range nd.series {
		if s.name != lastName {
			buf.WriteString(f.tmpl.meta[s.name])
			lastName = s.name
		}
		v := nd.vals[i]
		switch {
		case f.steady:
		case s.rate > 0:
			v += s.rate * dt * (0.8 + 0.4*nd.rnd.Float64())
			nd.vals[i] = v
		case s.gauge:
			v = s.value * (0.9 + 0.2*nd.rnd.Float64())
		}
		buf.Write(nd.prefix[i])
		b = strconv.AppendFloat(b[:0], v, 'g', -1, 64)
		buf.Write(b)
		buf.Write(stamp)
		buf.WriteByte('\n')
	}
	nd.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	w.Write(buf.Bytes())
}
