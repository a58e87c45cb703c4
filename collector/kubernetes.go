package collector

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
)

// The kubernetes collector asks the kubelet which devices it allocated to
// which pod, through the kubelet's pod-resources API (PodResourcesLister,
// k8s.io/kubelet podresources v1: List and GetAllocatableResources) on its
// unix socket. A background goroutine refreshes the answer every
// KubernetesOptions.Refresh; Update only copies the latest answer, so a
// scrape never waits for the kubelet. A node without the socket (no
// kubelet) reports no_hardware; a kubelet that stops answering reports
// failed, and its pods disappear once the last answer is older than one
// refresh period plus the call timeout.

// DefaultPodResourcesSocket is the kubelet's pod-resources socket.
const DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

const (
	kubeRefresh    = 10 * time.Second
	kubeMaxMsgSize = 16 << 20 // the kubelet's own podresources client limit
	kubeMaxDevices = 100000   // device rows kept from one answer
	kubeMaxLabel   = 253      // bytes of a name label (a DNS subdomain's maximum)
)

// KubernetesOptions configures the kubernetes collector.
type KubernetesOptions struct {
	PodResourcesSocket string        // --collector.kubernetes.pod-resources-socket
	Refresh            time.Duration // 0: 10 s (not a flag; tests shorten it)
}

func kubernetesFlags(app *kingpin.Application, o *Options) {
	app.Flag("collector.kubernetes.pod-resources-socket", "The kubelet's pod-resources gRPC socket (PodResourcesLister v1); mount its directory read-only into the exporter's pod. Default: "+DefaultPodResourcesSocket+" under --path.rootfs (the host's, where the host's / is mounted). A node without it reports no data (state no_hardware).").
		StringVar(&o.Kubernetes.PodResourcesSocket)
}

// kubeDevice is one allocated device.
type kubeDevice struct {
	namespace, pod, container, resource, id string
}

// kubeAnswer is what one refresh got from the kubelet.
type kubeAnswer struct {
	at          time.Time
	devices     []kubeDevice
	allocatable map[string]int // resource -> devices; nil when the kubelet does not serve it
}

type kubernetesCollector struct {
	env     Env
	socket  string
	refresh time.Duration
	timeout time.Duration
	gpus    func(context.Context) []GPUDevice
	now     func() time.Time
	dial    func(ctx context.Context, path string) (net.Conn, error) // replaceable in tests

	mu      sync.Mutex
	answer  *kubeAnswer // latest good answer
	lastErr error       // of the latest refresh; nil after a good one
	kick    chan struct{}
	ctx     context.Context // cancelled by Close, also mid-call
	cancel  context.CancelFunc
	done    chan struct{}

	podDevice, allocatable, gpuPod *exposition.Family
}

// GPUDevice is a GPU as the gpu collector knows it: its index (the gpu
// label) and UUID.
type GPUDevice struct {
	Index int
	UUID  string
}

func newKubernetesCollector(env Env, o *Options) (Collector, error) {
	k := o.Kubernetes
	if k.PodResourcesSocket == "" {
		// The default is the host's socket: under --path.rootfs where the
		// host's / is mounted (a DaemonSet with hostPath / at /host).
		k.PodResourcesSocket = filepath.Join(o.RootfsPath, DefaultPodResourcesSocket)
	}
	if k.Refresh <= 0 {
		k.Refresh = kubeRefresh
	}
	g := prometheus.GaugeValue
	c := &kubernetesCollector{
		env: env, socket: k.PodResourcesSocket, refresh: k.Refresh, timeout: k.Refresh / 2,
		gpus: gpuDevices(env.GPUs), now: time.Now, dial: dialUnix,
		kick: make(chan struct{}, 1), done: make(chan struct{}),
		podDevice: env.Families.NewFamily("fabric_kubernetes_pod_device_info",
			"A device the kubelet allocated to a pod's container (pod-resources API List): resource is the extended resource (nvidia.com/gpu, rdma/…, an SR-IOV pool), device_id the device plugin's ID (a GPU UUID for nvidia.com/gpu).",
			g, "namespace", "pod", "container", "resource", "device_id"),
		allocatable: env.Families.NewFamily("fabric_kubernetes_allocatable_devices",
			"Devices of each resource the kubelet can allocate on this node (pod-resources API GetAllocatableResources).", g, "resource"),
		gpuPod: env.Families.NewFamily("fabric_gpu_pod_info",
			"A GPU the kubelet allocated to a pod's container, joined to the gpu collector's GPUs by UUID: group fabric_gpu_* by pod with it.",
			g, "gpu", "uuid", "namespace", "pod", "container"),
	}
	if l := env.Logger; l != nil {
		grpcTarget.Store(&l)
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	// The first answer is awaited here (at most the call timeout, half the
	// refresh period), so the first scrape has it; then the goroutine
	// refreshes.
	c.refreshOnce()
	go c.loop()
	return c, nil
}

// Close stops the background refresh.
func (c *kubernetesCollector) Close() {
	c.cancel()
	<-c.done
}

func (c *kubernetesCollector) loop() {
	defer close(c.done)
	t := time.NewTicker(c.refresh)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		case <-c.kick:
		}
		c.refreshOnce()
	}
}

// errNoSocket marks a node without the kubelet's socket; errSocketPerm an
// exporter that may not connect to it (the kubelet creates it root-only:
// connecting needs write permission on it, so root or CAP_DAC_OVERRIDE).
var (
	errNoSocket   = errors.New("no kubelet pod-resources socket")
	errSocketPerm = errors.New("permission denied on the kubelet pod-resources socket")
)

func (c *kubernetesCollector) refreshOnce() {
	ans, err := c.query()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastErr = err
	if err != nil {
		// No stale pods: what the kubelet no longer confirms is dropped.
		c.answer = nil
		return
	}
	c.answer = ans
}

// query asks the kubelet, on a fresh connection (a restarted kubelet is
// seen at the next refresh, without gRPC's reconnect backoff).
func (c *kubernetesCollector) query() (*kubeAnswer, error) {
	fi, err := os.Stat(c.socket)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, errNoSocket
		}
		return nil, err
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return nil, fmt.Errorf("%s is not a socket", c.socket)
	}
	abs, err := filepath.Abs(c.socket)
	if err != nil {
		return nil, err
	}
	var dialErr error
	var dialMu sync.Mutex
	conn, err := grpc.NewClient("passthrough:///kubelet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			conn, err := c.dial(ctx, abs)
			if err != nil {
				dialMu.Lock()
				dialErr = err
				dialMu.Unlock()
			}
			return conn, err
		}),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(kubeMaxMsgSize)))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(c.ctx, c.timeout)
	defer cancel()
	client := podresources.NewPodResourcesListerClient(conn)
	list, err := client.List(ctx, &podresources.ListPodResourcesRequest{})
	if err != nil {
		dialMu.Lock()
		derr := dialErr
		dialMu.Unlock()
		if errors.Is(derr, fs.ErrPermission) {
			return nil, errSocketPerm
		}
		return nil, fmt.Errorf("kubelet pod-resources List: %w", err)
	}
	ans := &kubeAnswer{at: c.now()}
	for _, p := range list.GetPodResources() {
		ns, pod := kubeLabel(p.GetNamespace()), kubeLabel(p.GetName())
		for _, ctr := range p.GetContainers() {
			name := kubeLabel(ctr.GetName())
			for _, d := range ctr.GetDevices() {
				res := kubeLabel(d.GetResourceName())
				for _, id := range d.GetDeviceIds() {
					if len(ans.devices) >= kubeMaxDevices {
						c.env.Once.Warn("kube-max", "msg", "the kubelet listed more devices than the exporter keeps; the rest are not reported", "max", kubeMaxDevices)
						break
					}
					if id == "" || res == "" || pod == "" {
						c.env.ReadErrors.Inc()
						continue
					}
					ans.devices = append(ans.devices, kubeDevice{ns, pod, name, res, kubeLabel(id)})
				}
			}
		}
	}
	sort.Slice(ans.devices, func(i, j int) bool { return ans.devices[i].less(ans.devices[j]) })
	ans.devices = dedupDevices(ans.devices)

	alloc, err := client.GetAllocatableResources(ctx, &podresources.AllocatableResourcesRequest{})
	switch {
	case err == nil:
		ans.allocatable = map[string]int{}
		for _, d := range alloc.GetDevices() {
			if res := kubeLabel(d.GetResourceName()); res != "" {
				ans.allocatable[res] += len(d.GetDeviceIds())
			}
		}
		c.env.Once.Clear("kube-alloc")
	default:
		// Kubelets before 1.23 (or with the KubeletPodResourcesGetAllocatable
		// gate off) do not serve it: the pods are still reported.
		c.env.Once.Warn("kube-alloc", "msg", "the kubelet does not serve GetAllocatableResources; fabric_kubernetes_allocatable_devices is absent", "err", err)
	}
	return ans, nil
}

func dialUnix(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", path)
}

func (a kubeDevice) less(b kubeDevice) bool {
	if a.namespace != b.namespace {
		return a.namespace < b.namespace
	}
	if a.pod != b.pod {
		return a.pod < b.pod
	}
	if a.container != b.container {
		return a.container < b.container
	}
	if a.resource != b.resource {
		return a.resource < b.resource
	}
	return a.id < b.id
}

func dedupDevices(d []kubeDevice) []kubeDevice {
	out := d[:0]
	for i, x := range d {
		if i == 0 || x != d[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// kubeLabel makes a kubelet string a label value: valid UTF-8, bounded.
func kubeLabel(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > kubeMaxLabel {
		s = cutUTF8(s, kubeMaxLabel)
	}
	return s
}

// cutUTF8 cuts s to at most n bytes at a UTF-8 boundary.
func cutUTF8(s string, n int) string {
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

func (c *kubernetesCollector) Update(ctx context.Context, b *exposition.Batch) error {
	c.mu.Lock()
	ans, err := c.answer, c.lastErr
	c.mu.Unlock()
	if ans == nil {
		switch {
		case errors.Is(err, errNoSocket):
			return noHardware("no kubelet pod-resources socket at %s (not a Kubernetes node, or its directory is not mounted)", c.socket)
		case errors.Is(err, errSocketPerm):
			// A deliberate deployment choice (a non-root exporter without
			// CAP_DAC_OVERRIDE), not a blind spot to page about.
			return notConfigured("permission denied connecting to %s: the kubelet creates it root-only; run the exporter as root or with CAP_DAC_OVERRIDE to read pod devices (docs/kubernetes.md)", c.socket)
		case err != nil:
			return err
		}
		return fmt.Errorf("the kubelet's pod-resources API has not answered yet (%s)", c.socket)
	}
	if age := c.now().Sub(ans.at); age > c.refresh+c.timeout {
		// A fixed reason (not the growing age): one log line per cause.
		return fmt.Errorf("the kubelet's pod-resources API has not answered for more than %s (%s)", c.refresh+c.timeout, c.socket)
	}
	for _, d := range ans.devices {
		b.AddWith(c.podDevice, 1, d.namespace, d.pod, d.container, d.resource, d.id)
	}
	resources := make([]string, 0, len(ans.allocatable))
	for r := range ans.allocatable {
		resources = append(resources, r)
	}
	sort.Strings(resources)
	for _, r := range resources {
		b.AddWith(c.allocatable, float64(ans.allocatable[r]), r)
	}
	if c.gpus != nil {
		c.addGPUPods(ctx, ans, b)
	}
	return nil
}

// addGPUPods joins allocated device IDs to the gpu collector's GPUs by
// UUID. A device plugin that shares GPUs (time-slicing) names replicas
// "<uuid>::<n>"; IDs that are no GPU's UUID (MIG devices, other resources)
// are not joined.
func (c *kubernetesCollector) addGPUPods(ctx context.Context, ans *kubeAnswer, b *exposition.Batch) {
	gpus := c.gpus(ctx)
	if len(gpus) == 0 {
		return
	}
	byUUID := make(map[string]int, len(gpus))
	for _, g := range gpus {
		if g.UUID != "" {
			byUUID[g.UUID] = g.Index
		}
	}
	type key struct{ uuid, ns, pod, ctr string }
	seen := map[key]bool{}
	for _, d := range ans.devices {
		uuid, _, _ := strings.Cut(d.id, "::")
		idx, ok := byUUID[uuid]
		if !ok {
			continue
		}
		k := key{uuid, d.namespace, d.pod, d.container}
		if seen[k] {
			continue
		}
		seen[k] = true
		b.AddWith(c.gpuPod, 1, strconv.Itoa(idx), uuid, d.namespace, d.pod, d.container)
	}
}

// gpuDevices returns the inventory's device lister, nil without an
// inventory.
func gpuDevices(g GPUInventory) func(context.Context) []GPUDevice {
	if g == nil {
		return nil
	}
	return g.Devices
}
