package collector

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/fakekubelet"
)

// The H200 node of the fixtures under Kubernetes: the NVIDIA device plugin
// names GPUs by UUID (nvidia.com/gpu), the RDMA shared device plugin
// (k8s-rdma-shared-dev-plugin) hands out rdma/rdma_shared_device_a. Pod
// "sglang-0" got two GPUs and an RDMA device; "sglang-1" got two GPUs and
// none (the incident); a pod with no devices and a container with CPUs only
// are listed as the kubelet lists them.
const (
	gpuUUID0 = "GPU-0c8a3f2e-5b1d-4e7a-9c6f-2d8b4a1e3f50"
	gpuUUID1 = "GPU-7d2e9a41-3c5b-4f86-a1d0-9e8b7c6a5f43"
	gpuUUID2 = "GPU-b1f0e2d3-6a7c-48e9-b5d4-c3a2f1e0d9c8"
	gpuUUID3 = "GPU-4e5f6a7b-8c9d-4e0f-a1b2-c3d4e5f6a7b8"
)

func fixturePods() ([]*podresources.PodResources, []*podresources.ContainerDevices) {
	dev := func(res string, ids ...string) *podresources.ContainerDevices {
		return fakekubelet.Devices(res, 0, ids...)
	}
	return []*podresources.PodResources{
			{Name: "sglang-0", Namespace: "llm", Containers: []*podresources.ContainerResources{
				{Name: "sglang", Devices: []*podresources.ContainerDevices{
					dev("nvidia.com/gpu", gpuUUID0, gpuUUID1), dev("rdma/rdma_shared_device_a", "mlx5_0")}, CpuIds: []int64{0, 1}},
				{Name: "sidecar"},
			}},
			{Name: "sglang-1", Namespace: "llm", Containers: []*podresources.ContainerResources{
				{Name: "sglang", Devices: []*podresources.ContainerDevices{dev("nvidia.com/gpu", gpuUUID2, gpuUUID3)}},
			}},
			{Name: "coredns-5d78c9869d-x2k4q", Namespace: "kube-system", Containers: []*podresources.ContainerResources{{Name: "coredns"}}},
		}, []*podresources.ContainerDevices{
			dev("nvidia.com/gpu", gpuUUID0, gpuUUID1, gpuUUID2, gpuUUID3),
			dev("rdma/rdma_shared_device_a", "mlx5_0"),
		}
}

func fixtureKubelet() *fakekubelet.Server { return fakekubelet.New(fixturePods()) }

func serveKubelet(t testing.TB, f *fakekubelet.Server, sock string) func() {
	return fakekubelet.Serve(t, f, sock)
}

func kubeSocket(t testing.TB) string {
	// Unix socket paths are limited to 107 bytes: a short directory.
	dir, err := os.MkdirTemp("", "kube")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "kubelet.sock")
}

func fakeGPUs(context.Context) []GPUDevice {
	return []GPUDevice{{0, gpuUUID0}, {1, gpuUUID1}, {2, gpuUUID2}, {3, gpuUUID3}}
}

func newTestKubernetes(t testing.TB, sock string, refresh time.Duration, gpus func(context.Context) []GPUDevice) (*kubernetesCollector, *exposition.Counter) {
	t.Helper()
	env, errs := testEnv()
	if gpus != nil {
		env.GPUs = fakeInventory{devices: gpus(context.Background())}
	}
	o := &Options{Kubernetes: KubernetesOptions{PodResourcesSocket: sock, Refresh: refresh}}
	c, err := newKubernetesCollector(env, o)
	if err != nil {
		t.Fatal(err)
	}
	kc := c.(*kubernetesCollector)
	t.Cleanup(kc.Close)
	return kc, errs
}

// refreshNow runs one refresh and waits for it (through the loop's kick, so
// it is the collector's own goroutine that queries).
func (c *kubernetesCollector) refreshNow(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	before := c.answer
	beforeErr := c.lastErr
	c.mu.Unlock()
	c.kick <- struct{}{}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		changed := c.answer != before || c.lastErr != beforeErr
		c.mu.Unlock()
		if changed {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no refresh")
}

// waitKubeState polls until the collector's Update reports the wanted state.
func waitKubeState(t testing.TB, c Collector, want State) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := processScrape(t, c)
		if st, _ := classify(err); st == want {
			return out
		} else if time.Now().After(deadline) {
			t.Fatalf("state %s (%v), want %s", st, err, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

const kubeWant = `
# HELP fabric_kubernetes_pod_device_info A device the kubelet allocated to a pod's container (pod-resources API List): resource is the extended resource (nvidia.com/gpu, rdma/…, an SR-IOV pool), device_id the device plugin's ID (a GPU UUID for nvidia.com/gpu).
# TYPE fabric_kubernetes_pod_device_info gauge
fabric_kubernetes_pod_device_info{container="sglang",device_id="GPU-0c8a3f2e-5b1d-4e7a-9c6f-2d8b4a1e3f50",namespace="llm",pod="sglang-0",resource="nvidia.com/gpu"} 1
fabric_kubernetes_pod_device_info{container="sglang",device_id="GPU-7d2e9a41-3c5b-4f86-a1d0-9e8b7c6a5f43",namespace="llm",pod="sglang-0",resource="nvidia.com/gpu"} 1
fabric_kubernetes_pod_device_info{container="sglang",device_id="mlx5_0",namespace="llm",pod="sglang-0",resource="rdma/rdma_shared_device_a"} 1
fabric_kubernetes_pod_device_info{container="sglang",device_id="GPU-4e5f6a7b-8c9d-4e0f-a1b2-c3d4e5f6a7b8",namespace="llm",pod="sglang-1",resource="nvidia.com/gpu"} 1
fabric_kubernetes_pod_device_info{container="sglang",device_id="GPU-b1f0e2d3-6a7c-48e9-b5d4-c3a2f1e0d9c8",namespace="llm",pod="sglang-1",resource="nvidia.com/gpu"} 1
# HELP fabric_kubernetes_allocatable_devices Devices of each resource the kubelet can allocate on this node (pod-resources API GetAllocatableResources).
# TYPE fabric_kubernetes_allocatable_devices gauge
fabric_kubernetes_allocatable_devices{resource="nvidia.com/gpu"} 4
fabric_kubernetes_allocatable_devices{resource="rdma/rdma_shared_device_a"} 1
# HELP fabric_gpu_pod_info A GPU the kubelet allocated to a pod's container, joined to the gpu collector's GPUs by UUID: group fabric_gpu_* by pod with it.
# TYPE fabric_gpu_pod_info gauge
fabric_gpu_pod_info{container="sglang",gpu="0",namespace="llm",pod="sglang-0",uuid="GPU-0c8a3f2e-5b1d-4e7a-9c6f-2d8b4a1e3f50"} 1
fabric_gpu_pod_info{container="sglang",gpu="1",namespace="llm",pod="sglang-0",uuid="GPU-7d2e9a41-3c5b-4f86-a1d0-9e8b7c6a5f43"} 1
fabric_gpu_pod_info{container="sglang",gpu="2",namespace="llm",pod="sglang-1",uuid="GPU-b1f0e2d3-6a7c-48e9-b5d4-c3a2f1e0d9c8"} 1
fabric_gpu_pod_info{container="sglang",gpu="3",namespace="llm",pod="sglang-1",uuid="GPU-4e5f6a7b-8c9d-4e0f-a1b2-c3d4e5f6a7b8"} 1
`

func TestKubernetesNormal(t *testing.T) {
	sock := kubeSocket(t)
	serveKubelet(t, fixtureKubelet(), sock)
	c, errs := newTestKubernetes(t, sock, time.Hour, fakeGPUs)
	waitKubeState(t, c, StateOK)
	compare(t, c, kubeWant)
	if errs.Value() != 0 {
		t.Errorf("read errors %v", errs.Value())
	}
}

// The gpu label comes from the gpu collector's index for each UUID, not
// from any order: GPUs listed in another order, a GPU the gpu collector
// does not know (no series) and time-sliced replicas "<uuid>::<n>".
func TestKubernetesGPUJoinByUUID(t *testing.T) {
	sock := kubeSocket(t)
	pods, alloc := fixturePods()
	pods[1].Containers[0].Devices[0].DeviceIds = []string{gpuUUID3 + "::0", gpuUUID3 + "::1", "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"}
	serveKubelet(t, fakekubelet.New(pods, alloc), sock)
	gpus := func(context.Context) []GPUDevice {
		return []GPUDevice{{7, gpuUUID3}, {5, gpuUUID1}, {6, gpuUUID0}}
	}
	c, _ := newTestKubernetes(t, sock, time.Hour, gpus)
	out := waitKubeState(t, c, StateOK)
	got := grepLines(out, "fabric_gpu_pod_info{")
	want := []string{
		`fabric_gpu_pod_info{container="sglang",gpu="6",namespace="llm",pod="sglang-0",uuid="GPU-0c8a3f2e-5b1d-4e7a-9c6f-2d8b4a1e3f50"} 1`,
		`fabric_gpu_pod_info{container="sglang",gpu="5",namespace="llm",pod="sglang-0",uuid="GPU-7d2e9a41-3c5b-4f86-a1d0-9e8b7c6a5f43"} 1`,
		`fabric_gpu_pod_info{container="sglang",gpu="7",namespace="llm",pod="sglang-1",uuid="GPU-4e5f6a7b-8c9d-4e0f-a1b2-c3d4e5f6a7b8"} 1`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Without a GPU collector, no fabric_gpu_pod_info; the devices stay.
	c2, _ := newTestKubernetes(t, sock, time.Hour, nil)
	out = waitKubeState(t, c2, StateOK)
	if n := len(grepLines(out, "fabric_gpu_pod_info{")); n != 0 {
		t.Errorf("%d fabric_gpu_pod_info without GPUs", n)
	}
	if n := len(grepLines(out, "fabric_kubernetes_pod_device_info{")); n != 6 {
		t.Errorf("%d device series, want 6", n)
	}
}

// No socket: no_hardware, silently, and nothing else; the socket appearing
// later (the kubelet starts after the exporter) is picked up.
func TestKubernetesNoSocket(t *testing.T) {
	sock := kubeSocket(t)
	c, _ := newTestKubernetes(t, sock, time.Hour, fakeGPUs)
	out := waitKubeState(t, c, StateNoHardware)
	if strings.Contains(out, "fabric_") {
		t.Errorf("series without a kubelet:\n%s", out)
	}
	serveKubelet(t, fixtureKubelet(), sock)
	c.refreshNow(t)
	waitKubeState(t, c, StateOK)
	compare(t, c, kubeWant)
}

// A kubelet that accepts calls and never answers: the call times out
// (half the refresh period), the collector reports failed and the pods of
// the last answer are gone; the scrape itself never waits.
func TestKubernetesHanging(t *testing.T) {
	sock := kubeSocket(t)
	f := fixtureKubelet()
	serveKubelet(t, f, sock)
	c, _ := newTestKubernetes(t, sock, 400*time.Millisecond, fakeGPUs)
	waitKubeState(t, c, StateOK)
	defer f.Hang()()
	start := time.Now()
	for time.Since(start) < 2*time.Second {
		t0 := time.Now()
		out, err := processScrape(t, c)
		if d := time.Since(t0); d > 100*time.Millisecond {
			t.Fatalf("a scrape took %s", d)
		}
		if err != nil {
			if st, _ := classify(err); st != StateFailed {
				t.Fatalf("state %s", st)
			}
			if strings.Contains(out, "fabric_") {
				t.Fatalf("stale series while failed:\n%s", out)
			}
			// Within one refresh period plus the call timeout of the
			// last answer (and one tick of slack).
			if d := time.Since(start); d > 400*time.Millisecond+200*time.Millisecond+400*time.Millisecond {
				t.Errorf("failed only after %s", d)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("a hanging kubelet never made the collector fail")
}

// A kubelet that goes away (restart: the socket is removed) and comes back
// on the same path.
func TestKubernetesGoneAndBack(t *testing.T) {
	sock := kubeSocket(t)
	stop := serveKubelet(t, fixtureKubelet(), sock)
	c, _ := newTestKubernetes(t, sock, time.Hour, fakeGPUs)
	waitKubeState(t, c, StateOK)
	stop()
	c.refreshNow(t)
	out := waitKubeState(t, c, StateNoHardware)
	if strings.Contains(out, "fabric_") {
		t.Errorf("stale series:\n%s", out)
	}
	// Back with one pod less.
	pods, alloc := fixturePods()
	serveKubelet(t, fakekubelet.New(pods[:1], alloc), sock)
	c.refreshNow(t)
	out = waitKubeState(t, c, StateOK)
	if got := grepLines(out, "fabric_kubernetes_pod_device_info{", `pod="sglang-1"`); len(got) != 0 {
		t.Errorf("a deleted pod is still there: %q", got)
	}
	if got := grepLines(out, "fabric_kubernetes_pod_device_info{", `pod="sglang-0"`); len(got) != 3 {
		t.Errorf("sglang-0: %q", got)
	}

	// The socket stays but nobody listens (the kubelet died without
	// removing it): failed, not no_hardware.
	l, err := net.Listen("unix", sock+"2")
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	c2, _ := newTestKubernetes(t, sock+"2", time.Hour, fakeGPUs)
	waitKubeState(t, c2, StateFailed)
}

// Something on the socket that is not gRPC, and a gRPC server whose answer
// is nonsense: failed, or the nonsense dropped, never a crash.
func TestKubernetesGarbage(t *testing.T) {
	sock := kubeSocket(t)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				conn.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 11\r\n\r\nnot grpc!!\n\x00\xff\xfe"))
				time.Sleep(50 * time.Millisecond)
				conn.Close()
			}()
		}
	}()
	c, _ := newTestKubernetes(t, sock, time.Hour, fakeGPUs)
	out := waitKubeState(t, c, StateFailed)
	if strings.Contains(out, "fabric_") {
		t.Errorf("series from garbage:\n%s", out)
	}

	// Real gRPC, odd content: empty names and IDs, a huge label,
	// duplicates, nil entries; no GetAllocatableResources. (Invalid UTF-8
	// cannot cross gRPC: proto3 strings are checked at both ends.)
	sock2 := kubeSocket(t)
	f := fakekubelet.New([]*podresources.PodResources{
		{Name: "p\u00e9q", Namespace: "ns", Containers: []*podresources.ContainerResources{
			{Name: strings.Repeat("c", 1000), Devices: []*podresources.ContainerDevices{
				{ResourceName: "rdma/hca", DeviceIds: []string{"mlx5_0", "mlx5_0", ""}},
				{ResourceName: "", DeviceIds: []string{"x"}},
				nil,
			}},
			nil,
		}},
		nil,
		{Name: "", Namespace: "ns", Containers: []*podresources.ContainerResources{{Name: "c", Devices: []*podresources.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: []string{gpuUUID0}}}}}},
	}, nil)
	f.NoAllocatable()
	serveKubelet(t, f, sock2)
	c2, errs := newTestKubernetes(t, sock2, time.Hour, fakeGPUs)
	out = waitKubeState(t, c2, StateOK)
	got := grepLines(out, "fabric_")
	want := `fabric_kubernetes_pod_device_info{container="` + strings.Repeat("c", kubeMaxLabel) + `",device_id="mlx5_0",namespace="ns",pod="péq",resource="rdma/hca"} 1`
	if len(got) != 1 || got[0] != want {
		t.Errorf("got %q", got)
	}
	if errs.Value() != 3 { // the empty ID, the empty resource, the pod without a name
		t.Errorf("read errors %v, want 3", errs.Value())
	}
}

// Update never blocks on the kubelet: it holds the lock only to copy a
// pointer, so scrapes during a hanging refresh return at once (checked in
// TestKubernetesHanging); Close stops the goroutine even mid-call.
func TestKubernetesCloseWhileHanging(t *testing.T) {
	sock := kubeSocket(t)
	f := fixtureKubelet()
	defer f.Hang()()
	serveKubelet(t, f, sock)
	c, _ := newTestKubernetes(t, sock, 200*time.Millisecond, nil)
	time.Sleep(50 * time.Millisecond)
	done := make(chan struct{})
	go func() { c.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for a hanging kubelet")
	}
}

// The kubelet creates its socket root-only: a non-root exporter without
// CAP_DAC_OVERRIDE gets EACCES from connect(2). That is a deployment choice,
// reported as not_configured with the fix, not a failure. (The tests run as
// root, who may connect anyway: the dialer returns what connect(2) returns
// for another user.)
func TestKubernetesPermissionDenied(t *testing.T) {
	sock := kubeSocket(t)
	serveKubelet(t, fixtureKubelet(), sock)
	env, _ := testEnv()
	o := &Options{Kubernetes: KubernetesOptions{PodResourcesSocket: sock, Refresh: time.Hour}}
	c, err := newKubernetesCollector(env, o)
	if err != nil {
		t.Fatal(err)
	}
	kc := c.(*kubernetesCollector)
	t.Cleanup(kc.Close)
	kc.dial = func(ctx context.Context, path string) (net.Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: &os.SyscallError{Syscall: "connect", Err: syscall.EACCES}}
	}
	kc.refreshNow(t)
	out := waitKubeState(t, kc, StateNotConfigured)
	if strings.Contains(out, "fabric_") {
		t.Errorf("series without access:\n%s", out)
	}
	_, err = processScrape(t, kc)
	if _, reason := classify(err); !strings.Contains(reason, "CAP_DAC_OVERRIDE") {
		t.Errorf("reason %q", reason)
	}
	kc.dial = dialUnix
	kc.refreshNow(t)
	waitKubeState(t, kc, StateOK)
}

// The default socket is the host's, under --path.rootfs; a socket given
// elsewhere is taken as written.
func TestKubernetesSocketUnderRootfs(t *testing.T) {
	for _, c := range []struct{ rootfs, flag, want string }{
		{"/", "", DefaultPodResourcesSocket},
		{"/host", "", "/host" + DefaultPodResourcesSocket},
		{"/host", DefaultPodResourcesSocket, DefaultPodResourcesSocket},
		{"/host", "/run/kubelet.sock", "/run/kubelet.sock"},
	} {
		env, _ := testEnv()
		o := &Options{RootfsPath: c.rootfs, Kubernetes: KubernetesOptions{PodResourcesSocket: c.flag, Refresh: time.Hour}}
		col, err := newKubernetesCollector(env, o)
		if err != nil {
			t.Fatal(err)
		}
		kc := col.(*kubernetesCollector)
		if kc.socket != c.want {
			t.Errorf("rootfs %q, flag %q: socket %q, want %q", c.rootfs, c.flag, kc.socket, c.want)
		}
		kc.Close()
	}
}
