// Command gpudrill is the NCCL socket-fallback fire drill: on a Linux host
// with an NVIDIA GPU and PyTorch it runs two NCCL ranks over NET/Socket (two
// ranks on one GPU, each with its own NCCL_HOSTID), with fabric_exporter,
// Prometheus with the shipped rules and Alertmanager with the shipped
// routing and a webhook receiver of its own, and checks end to end that
// NCCLSocketFallback pages and names host, pid and interface, that
// fabric_gpu_process_info joins the same PIDs to the GPU, and that a run
// with NCCL_NET=IB and no usable device is reported as an NCCL init
// failure (NCCLInitFailed), not as a network. It measures the time from the
// first NCCL log line to the page, prints a report and exits 1 when a check
// failed (2 when it could not run).
//
// Every trial gets a fresh exporter, Prometheus and Alertmanager (so each
// page is a new alert group). Nothing outside --workdir is written; every
// process it started is stopped before it exits; it refuses to run when one
// of its ports is taken.
//
// --replay=DIR runs the same checks on recorded logs instead of PyTorch
// (CI: collector/fixtures/nccl-drill, with --replay-inspector=
// collector/fixtures/nccl-inspector/json). With the NCCL Inspector plugin
// (--inspector) or its recorded dumps, the exporter follows the dump
// directory and the drill checks the scraped bus bandwidth of every rank
// and its join to fabric_nccl_net_info{net="Socket"}.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	if code, ok := nodeMain(os.Args[1:]); ok {
		os.Exit(code) // the drill re-executed as a node's PID 1
	}
	var cfg Config
	recordFor := flag.Duration("record-nvml", 0, "only record what NVML says of each GPU (utilization, compute processes, per-process samples, GPM) once a second for this long, as JSON lines on stdout; --record-label names a file whose content labels each record")
	recordLabel := flag.String("record-label", "", "with --record-nvml: the file whose content labels the records (the state the job is in)")
	flag.StringVar(&cfg.Repo, "repo", ".", "fabric_exporter repository root (alerts/fabric-rules.yml, deploy/lab/prometheus.yml, deploy/alertmanager/alertmanager.yml)")
	flag.StringVar(&cfg.Exporter, "exporter", "./fabric_exporter", "fabric_exporter binary (make build)")
	flag.StringVar(&cfg.Prometheus, "prometheus", "prometheus", "Prometheus binary")
	flag.StringVar(&cfg.Alertmanager, "alertmanager", "", "Alertmanager binary (default: alertmanager or prometheus-alertmanager on PATH)")
	flag.StringVar(&cfg.Python, "python", "python3", "Python with PyTorch (CUDA)")
	flag.StringVar(&cfg.WorkDir, "workdir", "", "directory for everything the drill writes (default: a new one under $TMPDIR)")
	flag.IntVar(&cfg.Trials, "trials", 3, "socket-fallback trials (time to page)")
	flag.StringVar(&cfg.Replay, "replay", "", "replay the recorded logs of this directory instead of running PyTorch")
	flag.StringVar(&cfg.ReplayInspector, "replay-inspector", "", "with --replay: recorded NCCL Inspector JSON dumps of the same run (collector/fixtures/nccl-inspector/json), replayed in trial 1")
	flag.StringVar(&cfg.Inspector, "inspector", "", "NCCL Inspector plugin (libnccl-profiler-inspector.so): JSON dumps in trial 1, Prometheus dumps in trial 2")
	flag.StringVar(&cfg.SocketIf, "socket-ifname", "lo", "NCCL_SOCKET_IFNAME of the ranks")
	flag.IntVar(&cfg.GPU, "gpu", 0, "CUDA device of both ranks")
	flag.IntVar(&cfg.ExporterPort, "port.exporter", 19470, "exporter port on 127.0.0.1")
	flag.IntVar(&cfg.PrometheusPort, "port.prometheus", 19090, "Prometheus port")
	flag.IntVar(&cfg.AlertmanagerPort, "port.alertmanager", 19093, "Alertmanager port")
	flag.IntVar(&cfg.WebhookPort, "port.webhook", 19094, "the drill's webhook receiver port")
	flag.IntVar(&cfg.TorchPort, "port.torch", 19500, "torch.distributed rendezvous port")
	flag.DurationVar(&cfg.PageTimeout, "page-timeout", 3*time.Minute, "how long to wait for a page")
	flag.IntVar(&cfg.RASTrials, "ras-trials", 0, "two-node trials (a node per rank: its own network, PID and mount namespaces, the nodes joined by a veth pair; root): kill rank 1 with SIGKILL, time to the NCCLRankMissing/NCCLAsyncError page")
	flag.DurationVar(&cfg.RASHealthy, "ras-healthy", 5*time.Minute, "how long the first kill trial's job runs healthy (nothing may page) before the kill")
	flag.DurationVar(&cfg.RASStagger, "ras-stagger", 0, "kill trial i kills (i-1)×this later (with --ras-parallel: kills at different phases of the scrape, evaluation and RAS poll cycles)")
	flag.BoolVar(&cfg.NoDebug, "nodebug", false, "two-node trial: NCCL on sockets with NCCL_DEBUG unset (no NCCL log), paged from RAS and /proc alone")
	flag.BoolVar(&cfg.RASParallel, "ras-parallel", false, "run the two-node trials at the same time, each on its own pair of nodes with its own stacks")
	flag.StringVar(&cfg.Shape, "shape", shapeContainer, "two-node trials: each rank in a container (container: PID and mount namespaces of its own, the rank PID 1 of it, inside its node's) or directly in its node's PID namespace (host)")
	flag.BoolVar(&cfg.ContainerRDMA, "container-rdma", true, "--shape=container: /dev/infiniband visible in the ranks' containers (false: hidden under an empty tmpfs, as by a launcher that passes no RDMA devices)")
	flag.BoolVar(&cfg.DestroyTrial, "destroy-trial", false, "two-node trial: rank 1 destroys its communicator of a second process group that rank 0 keeps (RAS: NOCOMM); NCCLRankMissing and NCCLAsyncError must not page")
	flag.BoolVar(&cfg.NonblockingTrial, "nonblocking-trial", false, "two-node trial: TORCH_NCCL_USE_COMM_NONBLOCKING=1, RAS polled every 50 ms for ncclInProgress; nothing may page")
	flag.IntVar(&cfg.HangTrials, "hang-trials", 0, "two-node hung-group trials of each kind, one after another (a decode-shaped job, logs off): rank 1 stops launching (eager), stops replaying its CUDA graph (graph), gets SIGSTOP; time from the fault to the NCCLCommunicatorHung/NCCLRankUnresponsive page naming rank 1")
	flag.BoolVar(&cfg.HangTogether, "hang-together", false, "run the three kinds of each hung-group trial at once (their jobs share the GPU), faulting at the same instant, so that the GPU spins when every job waits")
	flag.DurationVar(&cfg.QuietFor, "quiet-for", 0, "two-node quiet trials, together: a decode job serving from a CUDA graph and one idle after serving, this long each; nothing may page but the socket fallback")
	flag.BoolVar(&cfg.SelftestShape, "selftest-shape", false, "only the two-node plumbing: nodes and container-shaped ranks with sleep for ranks (no GPU, Python or NCCL), both shapes; root")
	flag.Parse()
	if cfg.Shape != shapeContainer && cfg.Shape != shapeHost {
		fmt.Fprintf(os.Stderr, "gpudrill: --shape=%q: container or host\n", cfg.Shape)
		os.Exit(2)
	}
	if *recordFor > 0 {
		if err := recordNVML(os.Stdout, *recordFor, *recordLabel); err != nil {
			fmt.Fprintln(os.Stderr, "gpudrill: --record-nvml:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	cfg.Out = os.Stdout
	os.Exit(run(cfg))
}

func run(cfg Config) int {
	if cfg.Alertmanager == "" {
		for _, n := range []string{"alertmanager", "prometheus-alertmanager"} {
			if p, err := exec.LookPath(n); err == nil {
				cfg.Alertmanager = p
				break
			}
		}
	}
	for _, b := range []*string{&cfg.Exporter, &cfg.Prometheus, &cfg.Alertmanager} {
		p, err := exec.LookPath(*b)
		if *b == "" || err != nil {
			if cfg.SelftestShape {
				// The plumbing alone, without the stack.
				fmt.Fprintf(os.Stderr, "gpudrill: %q not found: the selftest runs without exporters, Prometheus and Alertmanager\n", *b)
				cfg.Exporter, cfg.Prometheus, cfg.Alertmanager = "", "", ""
				break
			}
			fmt.Fprintf(os.Stderr, "gpudrill: %q not found (--exporter, --prometheus, --alertmanager)\n", *b)
			return 2
		}
		*b, _ = filepath.Abs(p)
	}
	if cfg.Inspector != "" {
		cfg.Inspector, _ = filepath.Abs(cfg.Inspector)
	}
	if cfg.Replay != "" {
		cfg.Replay, _ = filepath.Abs(cfg.Replay)
	}
	if cfg.ReplayInspector != "" {
		cfg.ReplayInspector, _ = filepath.Abs(cfg.ReplayInspector)
	}
	if cfg.WorkDir == "" {
		d, err := os.MkdirTemp("", "gpudrill-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "gpudrill:", err)
			return 2
		}
		cfg.WorkDir = d
	} else if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "gpudrill:", err)
		return 2
	}
	cfg.WorkDir, _ = filepath.Abs(cfg.WorkDir)
	// An interrupt stops every process the drill started.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		fmt.Fprintln(os.Stderr, "gpudrill: interrupted; stopping everything it started")
		interrupted()
		os.Exit(2)
	}()
	fmt.Fprintf(os.Stderr, "gpudrill: work dir %s\n", cfg.WorkDir)
	res, err := Run(cfg)
	if res != nil {
		report := strings.Join(res.Lines, "\n") + "\n"
		fmt.Fprint(cfg.Out, report)
		os.WriteFile(filepath.Join(cfg.WorkDir, "report.txt"), []byte(report), 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpudrill:", err)
		return 2
	}
	if res.Failed() {
		fmt.Fprintln(os.Stderr, "gpudrill: DETECTION FAILED (see the checks above)")
		return 1
	}
	return 0
}
