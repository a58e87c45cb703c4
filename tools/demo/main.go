// Command demo runs the exporter on the bundled fixtures: what `make demo`
// does (make demo ARGS='…' adds exporter flags). Besides the fixture trees
// it serves the two sources a fixture file cannot be:
//
//   - NCCL's RAS service: two listeners on loopback ports, each answering
//     one answer recorded from NCCL 2.28.9 on the lent H200
//     (internal/ncclras/testdata): a job 25 s after kill -9 of rank 1
//     (2.28.9-json-killed.txt: a missing rank, rank 0's remote process
//     error; both ranks on 127.0.0.1, so of this node, and joined to no
//     fixture process) and the container-shaped job where rank 1 destroyed
//     one communicator that rank 0 keeps (2.28.9-json-live-nocomm.txt: a
//     NOCOMM rank; rank 1 on 10.77.0.2, pid 1, which is the fixture pod's
//     process 4242, so the rank is joined to it: the exporter is told that
//     this stand-in is the pod's own, --collector.nccl-ras.fixture-netns). Each listener answers the
//     protocol as NCCL's RAS thread does (see internal/fakeras, which the
//     tests use): CLIENT PROTOCOL, TIMEOUT, SET FORMAT, then STATUS.
//   - the kubelet's pod-resources API: a gRPC server on a unix socket with
//     internal/fakekubelet's fixture node (the golden scrape's pods).
//
// The NCCL Inspector's two output modes are copied into one dump directory
// (the collector reads one), as the golden end-to-end test does. The
// exporter's command line is printed before it starts; the stand-ins stop
// when it exits, and it stops with this command (SIGINT, SIGTERM, or this
// process dying).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/fabric-exporter/fabric_exporter/internal/fakekubelet"
)

// rasAnswers are the RAS services of the demo: JSON and text answer files
// of internal/ncclras/testdata.
var rasAnswers = [][2]string{
	{"2.28.9-json-killed.txt", "2.28.9-text-killed.txt"},
	{"2.28.9-json-live-nocomm.txt", "2.28.9-text-live-nocomm.txt"},
}

func main() {
	exporter := flag.String("exporter", "./fabric_exporter", "the exporter binary")
	root := flag.String("root", ".", "the repository (fixture paths are relative to it)")
	listen := flag.String("listen", ":10470", "the exporter's --web.listen-address")
	dir := flag.String("dir", "build/demo", "working directory for the Inspector dump directory and the kubelet socket (recreated)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: demo [flags] [-- exporter flags]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(*exporter, *root, *listen, *dir, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(exporter, root, listen, dir string, extra []string) error {
	fx := func(p string) string { return filepath.Join(root, "collector/fixtures", p) }
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	insp := filepath.Join(dir, "inspector")
	if err := os.MkdirAll(insp, 0o755); err != nil {
		return err
	}
	for _, mode := range []string{"json", "prom"} {
		files, _ := filepath.Glob(filepath.Join(fx("nccl-inspector"), mode, "*"))
		for _, f := range files {
			if err := copyFile(f, filepath.Join(insp, filepath.Base(f))); err != nil {
				return err
			}
		}
	}

	sock := filepath.Join(dir, "kubelet.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	g := grpc.NewServer()
	podresources.RegisterPodResourcesListerServer(g, fakekubelet.NodeFixture())
	go g.Serve(l)
	defer g.Stop()

	var ras []string
	for _, a := range rasAnswers {
		addr, err := serveRAS(filepath.Join(root, "internal/ncclras/testdata"), a[0], a[1])
		if err != nil {
			return err
		}
		ras = append(ras, addr)
	}

	// The bridges' ACS registers as the privileged reader writes them
	// (fabric_exporter dump-acs, an init container in Kubernetes), here
	// from the fixture tree.
	acs := filepath.Join(dir, "acs")
	if out, err := exec.Command(exporter, "dump-acs", "--path.sysfs="+fx("sys"), "--output="+acs).CombinedOutput(); err != nil {
		return fmt.Errorf("dump-acs: %v: %s", err, out)
	}

	args := []string{
		"--path.sysfs=" + fx("sys"), "--path.procfs=" + fx("proc"),
		"--collector.pcie.acs-file=" + acs,
		"--collector.pfc.ethtool-fixtures=" + fx("ethtool"), "--collector.phy.fixtures=" + fx("phy"),
		"--collector.devlink.fixtures=" + fx("devlink"),
		"--collector.gpu.fixture=" + fx("gpu/dcgm-8gpu.json"),
		"--collector.kubernetes.pod-resources-socket=" + sock,
		// Real NCCL logs: the sample logs, the fixture node's process
		// 4310 (a socket fallback with its causes), the drill's two-node
		// socket job (the ranks of the Inspector dumps), its init failure
		// and a GPU Direct RDMA / DMA-BUF log (nccl-tests issue 350).
		"--collector.nccl.log-path=" + fx("nccl/*.log"), "--collector.nccl.log-path=" + fx("nccl-cause/*.log"),
		"--collector.nccl.log-path=" + fx("nccl-drill/socket/*.log"), "--collector.nccl.log-path=" + fx("nccl-drill/ib/*.log"),
		"--collector.nccl.log-path=" + fx("nccl-gdr/*.log"),
		"--collector.nccl.retention=0", "--collector.nccl.hostname=fixture-node0",
		"--collector.nccl-inspector.dump-dir=" + insp, "--collector.nccl-inspector.retention=0",
		"--collector.nccl-ras.address=" + strings.Join(ras, ","),
		// The second stand-in is the fixture pod's own RAS (its rank 1 is
		// the pod's process 4242): a pod speaks only for itself, and a
		// fixture namespace cannot be entered, so its answers are said
		// to come from the pod's namespace.
		"--collector.nccl-ras.fixture-netns=" + ras[1] + "=4026532178",
		// The queue pairs of the fixture node, as `rdma -j resource show
		// qp` prints them, owned by the fixture /proc's processes.
		"--collector.process.rdma-qp-fixture=" + fx("rdma-qp/qp.json"),
		// Kernel fabric events: a recording of /dev/kmsg records (the real
		// lines of internal/kmsg/testdata, on the fixture's PCI addresses).
		"--collector.kernel-events", "--collector.kernel-events.path=" + filepath.Join(root, "internal/kmsg/testdata/fabric.kmsg"),
		"--web.listen-address=" + listen,
	}
	args = append(args, extra...)
	fmt.Fprintf(os.Stderr, "RAS stand-ins at %s (%s, %s), kubelet stand-in at %s\n", strings.Join(ras, ", "), rasAnswers[0][0], rasAnswers[1][0], sock)
	fmt.Fprintf(os.Stderr, "%s %s\n", exporter, strings.Join(args, " "))

	cmd := exec.Command(exporter, args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		for s := range sig {
			cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); ok && !ee.Exited() {
		return nil // stopped by a signal: the demo's normal end
	}
	return err
}

// serveRAS answers NCCL's RAS client protocol on a free loopback port with
// the JSON file (after SET FORMAT json) or the text file.
func serveRAS(dir, jsonFile, textFile string) (string, error) {
	for _, f := range []string{jsonFile, textFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return "", err
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go answerRAS(c, dir, jsonFile, textFile)
		}
	}()
	return ln.Addr().String(), nil
}

func answerRAS(c net.Conn, dir, jsonFile, textFile string) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	file := textFile
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			return
		}
		cmd := strings.TrimRight(l, "\r\n")
		u := strings.ToUpper(cmd)
		switch {
		case strings.HasPrefix(u, "CLIENT PROTOCOL "):
			io.WriteString(c, "SERVER PROTOCOL 2\n")
		case strings.HasPrefix(u, "TIMEOUT "):
			io.WriteString(c, "OK\n")
		case u == "SET FORMAT JSON":
			file = jsonFile
			io.WriteString(c, "OK\n")
		case u == "SET FORMAT TEXT":
			file = textFile
			io.WriteString(c, "OK\n")
		case u == "STATUS" || u == "VERBOSE STATUS":
			b, err := os.ReadFile(filepath.Join(dir, file))
			if err == nil {
				c.Write(b)
			}
			return
		default:
			io.WriteString(c, "ERROR: Unknown command "+cmd+"\n")
		}
	}
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}
