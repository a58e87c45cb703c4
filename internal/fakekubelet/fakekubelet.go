// Package fakekubelet serves the kubelet's pod-resources API (the generated
// k8s.io/kubelet podresources v1 PodResourcesLister service) on a unix
// socket with a real gRPC server, for tests: the kubernetes collector's,
// the golden end-to-end scrape and the alerting end-to-end test.
package fakekubelet

import (
	"context"
	"net"
	"os"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Server implements PodResourcesLister with settable answers.
type Server struct {
	podresources.UnimplementedPodResourcesListerServer
	mu          sync.Mutex
	pods        []*podresources.PodResources
	allocatable []*podresources.ContainerDevices
	noAlloc     bool
	hang        chan struct{}
}

// New returns a server answering with pods and allocatable devices.
func New(pods []*podresources.PodResources, allocatable []*podresources.ContainerDevices) *Server {
	return &Server{pods: pods, allocatable: allocatable}
}

// Set replaces the answers.
func (s *Server) Set(pods []*podresources.PodResources, allocatable []*podresources.ContainerDevices) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods, s.allocatable = pods, allocatable
}

// NoAllocatable makes GetAllocatableResources answer Unimplemented, as
// kubelets before 1.23 do.
func (s *Server) NoAllocatable() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noAlloc = true
}

// Hang makes every call block until release is called (or the caller
// gives up).
func (s *Server) Hang() (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := make(chan struct{})
	s.hang = h
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			if s.hang == h {
				s.hang = nil
			}
			s.mu.Unlock()
			close(h)
		})
	}
}

func (s *Server) wait(ctx context.Context) error {
	s.mu.Lock()
	h := s.hang
	s.mu.Unlock()
	if h == nil {
		return nil
	}
	select {
	case <-h:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// List implements PodResourcesLister.
func (s *Server) List(ctx context.Context, _ *podresources.ListPodResourcesRequest) (*podresources.ListPodResourcesResponse, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return &podresources.ListPodResourcesResponse{PodResources: s.pods}, nil
}

// GetAllocatableResources implements PodResourcesLister.
func (s *Server) GetAllocatableResources(ctx context.Context, _ *podresources.AllocatableResourcesRequest) (*podresources.AllocatableResourcesResponse, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.noAlloc {
		return nil, status.Error(codes.Unimplemented, "method GetAllocatableResources not implemented")
	}
	return &podresources.AllocatableResourcesResponse{Devices: s.allocatable}, nil
}

// Serve serves s on the unix socket sock until the test ends or stop is
// called (stop removes the socket, as a stopping kubelet does).
func Serve(t testing.TB, s *Server, sock string) (stop func()) {
	t.Helper()
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	podresources.RegisterPodResourcesListerServer(g, s)
	go g.Serve(l)
	var once sync.Once
	stop = func() { once.Do(func() { g.Stop(); os.Remove(sock) }) }
	t.Cleanup(stop)
	return stop
}

// Devices is a ContainerDevices on NUMA node numa.
func Devices(resource string, numa int64, ids ...string) *podresources.ContainerDevices {
	return &podresources.ContainerDevices{ResourceName: resource, DeviceIds: ids,
		Topology: &podresources.TopologyInfo{Nodes: []*podresources.NUMANode{{ID: numa}}}}
}

// GPU UUIDs of collector/fixtures/gpu (the DCGM snapshot of an 8 × H200 node).
var fixtureGPUs = []string{
	"GPU-6f1c2a40-5ac3-9b4e-7d21-0c1f6a2e3b10", "GPU-6f1c2a41-5ac3-9b4e-7d21-0c1f6a2e3b11",
	"GPU-6f1c2a42-5ac3-9b4e-7d21-0c1f6a2e3b12", "GPU-6f1c2a43-5ac3-9b4e-7d21-0c1f6a2e3b13",
	"GPU-6f1c2a44-5ac3-9b4e-7d21-0c1f6a2e3b14", "GPU-6f1c2a45-5ac3-9b4e-7d21-0c1f6a2e3b15",
	"GPU-6f1c2a46-5ac3-9b4e-7d21-0c1f6a2e3b16", "GPU-6f1c2a47-5ac3-9b4e-7d21-0c1f6a2e3b17",
}

// RDMAResource is the fixture node's RDMA resource, named the way the RDMA
// shared device plugin (k8s-rdma-shared-dev-plugin) names its pools; the
// device IDs in NodeFixture are made up (the collector treats IDs as
// opaque).
const RDMAResource = "rdma/rdma_shared_device_a"

// NodeFixture is the fixture node under Kubernetes: the NVIDIA device
// plugin hands out GPUs by UUID (nvidia.com/gpu); pod llm/sglang-0 got
// GPUs 0-3 and an RDMA device, pod llm/sglang-1 got GPUs 4-7 and no RDMA
// device (the incident), a system pod got no device.
func NodeFixture() *Server { return New(NodePods(false)) }

// NodePods returns NodeFixture's pods and allocatable devices; with fixed,
// sglang-1 got an RDMA device too.
func NodePods(fixed bool) ([]*podresources.PodResources, []*podresources.ContainerDevices) {
	g := fixtureGPUs
	sglang1 := []*podresources.ContainerDevices{Devices("nvidia.com/gpu", 1, g[4], g[5], g[6], g[7])}
	if fixed {
		sglang1 = append(sglang1, Devices(RDMAResource, 1, "rdma_shared_device_a_1"))
	}
	return []*podresources.PodResources{
			{Name: "sglang-0", Namespace: "llm", Containers: []*podresources.ContainerResources{
				{Name: "sglang", Devices: []*podresources.ContainerDevices{
					Devices("nvidia.com/gpu", 0, g[0], g[1], g[2], g[3]), Devices(RDMAResource, 0, "rdma_shared_device_a_0")}},
				{Name: "metrics-sidecar"},
			}},
			{Name: "sglang-1", Namespace: "llm", Containers: []*podresources.ContainerResources{{Name: "sglang", Devices: sglang1}}},
			{Name: "kube-proxy-x2k4q", Namespace: "kube-system", Containers: []*podresources.ContainerResources{{Name: "kube-proxy"}}},
		}, []*podresources.ContainerDevices{
			Devices("nvidia.com/gpu", 0, g[0], g[1], g[2], g[3]),
			Devices("nvidia.com/gpu", 1, g[4], g[5], g[6], g[7]),
			Devices(RDMAResource, 0, "rdma_shared_device_a_0", "rdma_shared_device_a_1", "rdma_shared_device_a_2", "rdma_shared_device_a_3"),
		}
}
