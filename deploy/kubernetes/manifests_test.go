package kubernetes

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/fabric-exporter/fabric_exporter/alerts"
	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

const repo = "../.."

// kustomization is the subset of kustomize's Kustomization used here;
// strict decoding makes any other field an error (add it here when used).
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
	} `json:"images"`
}

// manifests holds the decoded base.
type manifests struct {
	ds   *appsv1.DaemonSet
	svc  *corev1.Service
	sm   *monitoringv1.ServiceMonitor
	rule *monitoringv1.PrometheusRule
}

// decodeStrict decodes one YAML document into the API type for its
// apiVersion and kind; unknown or duplicate fields are errors.
func decodeStrict(t *testing.T, name string, doc []byte, m *manifests) {
	t.Helper()
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var obj any
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 DaemonSet":
		m.ds = &appsv1.DaemonSet{}
		obj = m.ds
	case "v1 Service":
		m.svc = &corev1.Service{}
		obj = m.svc
	case "monitoring.coreos.com/v1 ServiceMonitor":
		m.sm = &monitoringv1.ServiceMonitor{}
		obj = m.sm
	case "monitoring.coreos.com/v1 PrometheusRule":
		m.rule = &monitoringv1.PrometheusRule{}
		obj = m.rule
	default:
		t.Fatalf("%s: unexpected %s %s", name, tm.APIVersion, tm.Kind)
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		t.Fatalf("%s: strict decoding into %T: %v", name, obj, err)
	}
}

func loadBase(t *testing.T) (kustomization, manifests) {
	t.Helper()
	var k kustomization
	b, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("kustomization.yaml: %s %s", k.APIVersion, k.Kind)
	}
	// Every manifest here is a resource of the base, and every resource exists.
	files, _ := filepath.Glob("*.yaml")
	files = slices.DeleteFunc(files, func(f string) bool { return f == "kustomization.yaml" })
	if !slices.Equal(slices.Sorted(slices.Values(k.Resources)), files) {
		t.Errorf("kustomization resources %v, files %v", k.Resources, files)
	}
	var m manifests
	for _, f := range k.Resources {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		decodeStrict(t, f, b, &m)
	}
	if m.ds == nil || m.svc == nil || m.sm == nil || m.rule == nil {
		t.Fatal("base lacks a DaemonSet, Service, ServiceMonitor or PrometheusRule")
	}
	return k, m
}

// Every manifest decodes strictly into its API type, and the objects fit
// together: the DaemonSet runs the exporter as docs/install.md and the issue
// describe, the Service selects its pods, the ServiceMonitor the Service
// and sets the job label the shipped rules select.
func TestManifests(t *testing.T) {
	_, m := loadBase(t)
	ds, pod := m.ds, m.ds.Spec.Template.Spec

	if !reflect.DeepEqual(ds.Spec.Selector.MatchLabels, filter(ds.Spec.Template.Labels, ds.Spec.Selector.MatchLabels)) {
		t.Errorf("DaemonSet selector %v does not match the pod labels %v", ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels)
	}
	if !pod.HostNetwork || !pod.HostPID {
		t.Error("DaemonSet: want hostNetwork and hostPID (netdevs and ethtool are per network namespace; host processes)")
	}
	if pod.NodeSelector["nvidia.com/gpu.present"] != "true" {
		t.Errorf("nodeSelector %v: want GPU nodes", pod.NodeSelector)
	}
	if !slices.ContainsFunc(pod.Tolerations, func(tl corev1.Toleration) bool {
		return tl.Key == "nvidia.com/gpu" && tl.Operator == corev1.TolerationOpExists
	}) {
		t.Error("no toleration for nvidia.com/gpu")
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[r]; !ok {
			t.Errorf("no %s request", r)
		}
	}
	if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
		t.Error("no memory limit")
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 10470 || c.Ports[0].Name != "metrics" {
		t.Errorf("ports %+v: want metrics 10470", c.Ports)
	}

	// Host trees: read-only hostPath mounts where the image's entrypoint looks.
	// The kubelet's pod-resources directory at the path of the kubernetes
	// collector's default socket (collector.DefaultPodResourcesSocket).
	want := map[string]string{"/sys": "/host/sys", "/proc": "/host/proc", "/": "/host/root",
		"/var/lib/kubelet/pod-resources": "/var/lib/kubelet/pod-resources"}
	vols := map[string]string{}
	for _, v := range pod.Volumes {
		if v.HostPath == nil {
			t.Errorf("volume %s is not a hostPath", v.Name)
			continue
		}
		vols[v.Name] = v.HostPath.Path
	}
	got := map[string]string{}
	for _, vm := range c.VolumeMounts {
		if !vm.ReadOnly {
			t.Errorf("mount %s is not read-only", vm.MountPath)
		}
		got[vols[vm.Name]] = vm.MountPath
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("host mounts %v, want %v", got, want)
	}
	for _, flag := range []string{"--path.sysfs=/host/sys", "--path.procfs=/host/proc", "--path.rootfs=/host/root"} {
		if !slices.Contains(dockerEntrypoint(t), flag) && !slices.Contains(c.Args, flag) {
			t.Errorf("neither the image's ENTRYPOINT nor the container args have %s", flag)
		}
	}

	// Least privilege: non-root, read-only root, no escalation, all
	// capabilities dropped but the two the process collectors need.
	sc := c.SecurityContext
	if sc == nil {
		t.Fatal("no container securityContext")
	}
	psc := pod.SecurityContext
	nonRoot := (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) || (psc != nil && psc.RunAsNonRoot != nil && *psc.RunAsNonRoot)
	if !nonRoot {
		t.Error("runAsNonRoot is not set")
	}
	if psc == nil || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Error("pod runAsUser: want a non-root uid")
	} else if u := dockerUser(t); u != "" && !strings.HasPrefix(u, fmt.Sprint(*psc.RunAsUser)+":") {
		t.Errorf("pod runAsUser %d, image USER %s", *psc.RunAsUser, u)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("privileged")
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Error("capabilities: want drop [ALL]")
	} else if add := slices.Sorted(slices.Values(sc.Capabilities.Add)); !slices.Equal(add, []corev1.Capability{"DAC_READ_SEARCH", "SYS_PTRACE"}) {
		t.Errorf("capabilities add %v: want exactly DAC_READ_SEARCH and SYS_PTRACE", add)
	}
	if c.LivenessProbe == nil || c.ReadinessProbe == nil {
		t.Error("want liveness and readiness probes")
	}

	// Service → pods, ServiceMonitor → Service.
	if !reflect.DeepEqual(m.svc.Spec.Selector, filter(ds.Spec.Template.Labels, m.svc.Spec.Selector)) {
		t.Errorf("Service selector %v does not match the pod labels %v", m.svc.Spec.Selector, ds.Spec.Template.Labels)
	}
	if len(m.svc.Spec.Ports) != 1 || m.svc.Spec.Ports[0].Port != 10470 || m.svc.Spec.Ports[0].TargetPort.String() != "metrics" {
		t.Errorf("Service ports %+v", m.svc.Spec.Ports)
	}
	if !reflect.DeepEqual(m.sm.Spec.Selector.MatchLabels, filter(m.svc.Labels, m.sm.Spec.Selector.MatchLabels)) {
		t.Errorf("ServiceMonitor selector %v does not match the Service labels %v", m.sm.Spec.Selector.MatchLabels, m.svc.Labels)
	}
	if len(m.sm.Spec.Endpoints) != 1 || m.sm.Spec.Endpoints[0].Port != m.svc.Spec.Ports[0].Name {
		t.Fatalf("ServiceMonitor endpoints %+v: want the Service's port %q", m.sm.Spec.Endpoints, m.svc.Spec.Ports[0].Name)
	}
	// The rules select the exporter by job (alerts/config.yml).
	job := ""
	for _, r := range m.sm.Spec.Endpoints[0].RelabelConfigs {
		if r.TargetLabel == "job" && r.Replacement != nil {
			job = *r.Replacement
		}
	}
	if sel := alerts.DefaultConfig().ExporterSelector; sel != `job="`+job+`"` {
		t.Errorf("ServiceMonitor sets job=%q; the rules select %s", job, sel)
	}
}

// filter returns the entries of labels whose keys are in keys.
func filter(labels, keys map[string]string) map[string]string {
	out := map[string]string{}
	for k := range keys {
		if v, ok := labels[k]; ok {
			out[k] = v
		}
	}
	return out
}

// dockerInstruction returns the argument of the last INSTRUCTION in the
// top-level Dockerfile.
func dockerInstruction(t *testing.T, instr string) string {
	t.Helper()
	f, err := os.Open(filepath.Join(repo, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	arg := ""
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), instr+" "); ok {
			arg = strings.TrimSpace(rest)
		}
	}
	return arg
}

func dockerEntrypoint(t *testing.T) []string {
	var ep []string
	if err := json.Unmarshal([]byte(dockerInstruction(t, "ENTRYPOINT")), &ep); err != nil {
		t.Fatalf("Dockerfile ENTRYPOINT: %v", err)
	}
	return ep
}

func dockerUser(t *testing.T) string { return dockerInstruction(t, "USER") }

// The committed PrometheusRule is what alerts/fabric-rules.yml renders to
// (make rules), and its spec holds exactly the rule file's groups.
func TestPrometheusRuleUpToDate(t *testing.T) {
	rules, err := os.ReadFile(filepath.Join(repo, RulesPath))
	if err != nil {
		t.Fatal(err)
	}
	want, err := PrometheusRule(rules)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("deploy/kubernetes/prometheusrule.yaml drifted from %s: run `make rules`", RulesPath)
	}

	var fromRules monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(rules, &fromRules); err != nil {
		t.Fatalf("%s does not decode strictly as a PrometheusRule spec: %v", RulesPath, err)
	}
	var pr monitoringv1.PrometheusRule
	if err := yaml.UnmarshalStrict(got, &pr); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pr.Spec, fromRules) {
		t.Error("the PrometheusRule's spec differs from the rule file's groups")
	}
	var alertsN, records int
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alertsN++
			} else {
				records++
			}
		}
	}
	if alertsN == 0 || records == 0 {
		t.Errorf("%d alerts, %d recording rules", alertsN, records)
	}
	t.Logf("%d groups, %d alerts, %d recording rules", len(pr.Spec.Groups), alertsN, records)
}

// The generator refuses rule files it would not copy faithfully.
func TestPrometheusRuleInput(t *testing.T) {
	for _, bad := range []string{
		"groups: []\nextra: 1\n",
		"# c\nfoo: 1\ngroups: []\n",
		"groups:\n- name: a\n  rules: []\n---\ngroups: []\n",
		"rules: []\n",
	} {
		if _, err := PrometheusRule([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
	out, err := PrometheusRule([]byte("# header\ngroups:\n- name: a\n  rules:\n  - record: x\n    expr: |\n      sum(\n\n        y)\n"))
	if err != nil {
		t.Fatal(err)
	}
	var pr monitoringv1.PrometheusRule
	if err := yaml.UnmarshalStrict(out, &pr); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if e := pr.Spec.Groups[0].Rules[0].Expr.String(); e != "sum(\n\n  y)\n" {
		t.Errorf("expr %q", e)
	}
}

// kubectl kustomize (kustomize built into kubectl) renders the base, and
// every object it prints still decodes strictly, in the base's namespace.
func TestKustomizeBuild(t *testing.T) {
	kubectl := testenv.Tool(t, "kubectl")
	k, _ := loadBase(t)
	out, err := exec.Command(kubectl, "kustomize", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v\n%s", err, out)
	}
	var m manifests
	n := 0
	for doc := range strings.SplitSeq(string(out), "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		n++
		decodeStrict(t, "kustomize output", []byte(doc), &m)
		var meta struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		_ = yaml.Unmarshal([]byte(doc), &meta)
		if meta.Metadata.Namespace != k.Namespace {
			t.Errorf("%s: namespace %q, want %q", meta.Metadata.Name, meta.Metadata.Namespace, k.Namespace)
		}
	}
	if n != len(k.Resources) {
		t.Errorf("kustomize printed %d objects, want %d", n, len(k.Resources))
	}
	if m.ds == nil || m.ds.Spec.Template.Spec.Containers[0].Image != "fabric_exporter:latest" {
		t.Errorf("image not set by the images: entry")
	}
}
