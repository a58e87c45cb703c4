package helm

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

const (
	repo      = "../.."
	chart     = "fabric-exporter"
	release   = "fabric-exporter" // the objects are then named as in the base
	namespace = "monitoring"      // the base's namespace
)

// helmBin is the helm binary: $HELM, else build/tools/helm (make test-helm
// installs it there), else helm on PATH. Without one the test is skipped:
// make test runs before make test-helm in CI, and helm is no Debian package.
func helmBin(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	if p, err := filepath.Abs(filepath.Join(repo, "build", "tools", "helm")); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p := testenv.OptionalTool("helm"); p != "" {
		return p
	}
	t.Skip("helm is not installed: `make test-helm` installs it (helm.sh/helm/v3/cmd/helm, pinned) into build/tools and runs these tests")
	return ""
}

// object is one rendered Kubernetes object as JSON decodes it.
type object = map[string]any

// parseStream splits a multi-document YAML stream into objects (documents
// with only comments are skipped) and decodes each strictly into its API
// type: a field the type does not have is an error.
func parseStream(t *testing.T, what string, out []byte) []object {
	t.Helper()
	var objs []object
	for _, doc := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(string(out), -1) {
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("%s: %v\n%s", what, err, doc)
		}
		if o == nil {
			continue
		}
		decodeStrict(t, what, []byte(doc))
		objs = append(objs, o)
	}
	return objs
}

func decodeStrict(t *testing.T, what string, doc []byte) {
	t.Helper()
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	var obj any
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 DaemonSet":
		obj = &appsv1.DaemonSet{}
	case "v1 Service":
		obj = &corev1.Service{}
	case "v1 ConfigMap":
		obj = &corev1.ConfigMap{}
	case "monitoring.coreos.com/v1 ServiceMonitor":
		obj = &monitoringv1.ServiceMonitor{}
	case "monitoring.coreos.com/v1 PrometheusRule":
		obj = &monitoringv1.PrometheusRule{}
	default:
		t.Fatalf("%s: unexpected %s %s", what, tm.APIVersion, tm.Kind)
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		t.Fatalf("%s: strict decoding into %T: %v", what, obj, err)
	}
}

func key(o object) string {
	md, _ := o["metadata"].(map[string]any)
	return fmt.Sprintf("%v %v/%v", o["kind"], md["namespace"], md["name"])
}

func byKey(objs []object) map[string]object {
	m := map[string]object{}
	for _, o := range objs {
		m[key(o)] = o
	}
	return m
}

// helmTemplate renders the chart as release fabric-exporter in the base's
// namespace with the values files given (YAML texts).
func helmTemplate(t *testing.T, values ...string) []object {
	t.Helper()
	args := []string{"template", release, chart, "--namespace", namespace}
	for i, v := range values {
		f := filepath.Join(t.TempDir(), fmt.Sprintf("values%d.yaml", i))
		if err := os.WriteFile(f, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-f", f)
	}
	out, err := exec.Command(helmBin(t), args...).Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr(err))
	}
	return parseStream(t, "helm template", out)
}

func stderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// kustomize builds the base, with the components given (paths relative to
// deploy/kubernetes), through an overlay as a user would write it.
func kustomize(t *testing.T, components ...string) []object {
	t.Helper()
	kubectl := testenv.Tool(t, "kubectl")
	base, err := filepath.Abs(filepath.Join(repo, "deploy", "kubernetes"))
	if err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(t.TempDir(), "overlay")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	rel := func(p string) string {
		r, err := filepath.Rel(overlay, filepath.Join(base, p))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [" + rel(".") + "]\n"
	if len(components) > 0 {
		var cs []string
		for _, c := range components {
			cs = append(cs, rel(c))
		}
		k += "components: [" + strings.Join(cs, ", ") + "]\n"
	}
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kubectl, "kustomize", "--load-restrictor=LoadRestrictionsNone", overlay).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v\n%s", err, stderr(err))
	}
	return parseStream(t, "kubectl kustomize", out)
}

// chartVersion is Chart.yaml's version.
func chartVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chart, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if c.Name != chart || c.Version == "" {
		t.Fatalf("Chart.yaml: name %q version %q", c.Name, c.Version)
	}
	return c.Version
}

// helmLabels are the labels the chart puts on each object's own
// metadata.labels and the base has not: Helm's release bookkeeping and the
// label conventions of Helm charts (`helm create`). They identify the
// release and chart version, so they cannot be in a kustomize base; the
// chart does not put them on the pods (a chart upgrade alone would restart
// every exporter) nor in any selector (those stay the base's).
func helmLabels(t *testing.T) map[string]string {
	return map[string]string{
		"helm.sh/chart":                chart + "-" + chartVersion(t),
		"app.kubernetes.io/instance":   release,
		"app.kubernetes.io/managed-by": "Helm",
	}
}

// dropHelmLabels checks that o carries exactly helmLabels' values on its own
// metadata.labels and removes them; nothing else is removed, anywhere.
func dropHelmLabels(t *testing.T, o object, want map[string]string) {
	t.Helper()
	md, _ := o["metadata"].(map[string]any)
	labels, _ := md["labels"].(map[string]any)
	for k, v := range want {
		if labels[k] != v {
			t.Errorf("%s: label %s=%v, want %q", key(o), k, labels[k], v)
		}
		delete(labels, k)
	}
}

// diff lists every difference between a and b below path.
func diff(path string, a, b any) []string {
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			break
		}
		keys := map[string]bool{}
		for k := range av {
			keys[k] = true
		}
		for k := range bv {
			keys[k] = true
		}
		var out []string
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range keys {
				if !yield(k) {
					return
				}
			}
		}) {
			x, inA := av[k]
			y, inB := bv[k]
			switch {
			case !inA:
				out = append(out, fmt.Sprintf("%s.%s: only in kustomize: %v", path, k, y))
			case !inB:
				out = append(out, fmt.Sprintf("%s.%s: only in helm: %v", path, k, x))
			default:
				out = append(out, diff(path+"."+k, x, y)...)
			}
		}
		return out
	case []any:
		bv, ok := b.([]any)
		if !ok {
			break
		}
		if len(av) != len(bv) {
			return []string{fmt.Sprintf("%s: helm has %d items %v, kustomize %d %v", path, len(av), av, len(bv), bv)}
		}
		var out []string
		for i := range av {
			out = append(out, diff(fmt.Sprintf("%s[%d]", path, i), av[i], bv[i])...)
		}
		return out
	}
	if reflect.DeepEqual(a, b) {
		return nil
	}
	return []string{fmt.Sprintf("%s: helm %#v, kustomize %#v", path, a, b)}
}

// isDashboard says whether o is one of the chart's dashboard ConfigMaps,
// which the base does not have (TestHelmDashboards checks them).
func isDashboard(o object) bool {
	return o["kind"] == "ConfigMap" && strings.Contains(key(o), "-dashboard-")
}

// sameObjects fails unless the chart's objects (but its dashboard
// ConfigMaps) are the kustomize build's, by kind, namespace and name, and
// field by field, once helmLabels are checked and taken off.
func sameObjects(t *testing.T, helmObjs, kustObjs []object) {
	t.Helper()
	want := helmLabels(t)
	h := map[string]object{}
	for _, o := range helmObjs {
		if isDashboard(o) {
			continue
		}
		dropHelmLabels(t, o, want)
		h[key(o)] = o
	}
	k := byKey(kustObjs)
	var hk, kk []string
	for n := range h {
		hk = append(hk, n)
	}
	for n := range k {
		kk = append(kk, n)
	}
	sort.Strings(hk)
	sort.Strings(kk)
	if !slices.Equal(hk, kk) {
		t.Fatalf("objects differ:\nhelm      %q\nkustomize %q", hk, kk)
	}
	if len(hk) != 4 {
		t.Errorf("%d objects, want DaemonSet, Service, ServiceMonitor, PrometheusRule: %q", len(hk), hk)
	}
	for _, n := range hk {
		for _, d := range diff(n, h[n], k[n]) {
			t.Error(d)
		}
	}
}

// With its default values the chart renders the base's objects.
func TestHelmMatchesKustomize(t *testing.T) {
	sameObjects(t, helmTemplate(t), kustomize(t))
}

// Each value that loosens the exporter's privileges renders what the base
// with the corresponding kustomize component builds: podResources.access
// components/pod-resources-access, ncclRAS.enterPodNetwork
// components/ras-pod-network, both the two components (in that order).
func TestHelmComponentValuesMatchComponents(t *testing.T) {
	for _, tc := range []struct {
		name, values string
		components   []string
	}{
		{"podResources.access", "podResources:\n  access: true\n", []string{"components/pod-resources-access"}},
		{"ncclRAS.enterPodNetwork", "ncclRAS:\n  enterPodNetwork: true\n", []string{"components/ras-pod-network"}},
		{"both", "podResources:\n  access: true\nncclRAS:\n  enterPodNetwork: true\n",
			[]string{"components/pod-resources-access", "components/ras-pod-network"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sameObjects(t, helmTemplate(t, tc.values), kustomize(t, tc.components...))
		})
	}
}

func TestHelmLint(t *testing.T) {
	h := helmBin(t)
	for _, set := range [][]string{nil, {"--set", "podResources.access=true,ncclRAS.enterPodNetwork=true,rails={rail0=mlx5_0:1},dashboards.enabled=false"}} {
		args := append([]string{"lint", "--strict", chart}, set...)
		out, err := exec.Command(h, args...).CombinedOutput()
		if err != nil {
			t.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

func find(t *testing.T, objs []object, kind string) []object {
	t.Helper()
	var out []object
	for _, o := range objs {
		if o["kind"] == kind {
			out = append(out, o)
		}
	}
	return out
}

// convert re-decodes a generic object into an API type.
func convert(t *testing.T, o object, into any) {
	t.Helper()
	b, err := yaml.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, into); err != nil {
		t.Fatal(err)
	}
}

// The PrometheusRule's spec is alerts/fabric-rules.yml: every key and value
// of the rule file, compared as decoded YAML and as the Operator's type.
func TestHelmPrometheusRuleIsRuleFile(t *testing.T) {
	rules, err := os.ReadFile(filepath.Join(repo, RulesPath))
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := yaml.Unmarshal(rules, &want); err != nil {
		t.Fatal(err)
	}
	prs := find(t, helmTemplate(t), "PrometheusRule")
	if len(prs) != 1 {
		t.Fatalf("%d PrometheusRules", len(prs))
	}
	for _, d := range diff("spec", prs[0]["spec"], want) {
		t.Error(strings.Replace(d, "kustomize", RulesPath, 1))
	}
	var pr monitoringv1.PrometheusRule
	convert(t, prs[0], &pr)
	var spec monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(rules, &spec); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pr.Spec, spec) || len(spec.Groups) == 0 {
		t.Errorf("PrometheusRule spec (%d groups) differs from %s (%d groups)", len(pr.Spec.Groups), RulesPath, len(spec.Groups))
	}

	objs := helmTemplate(t, "prometheusRule:\n  enabled: false\nserviceMonitor:\n  enabled: false\n")
	if n := len(find(t, objs, "PrometheusRule")) + len(find(t, objs, "ServiceMonitor")); n != 0 {
		t.Errorf("prometheusRule and serviceMonitor disabled: %d objects of theirs", n)
	}
}

// Rails, collectors and extra flags become the container's args in that
// order; the image, node selection, tolerations and the Operator labels are
// the values'.
func TestHelmValues(t *testing.T) {
	objs := helmTemplate(t, `
image:
  repository: registry.example.internal/fabric_exporter
  tag: v0.1.0
  pullPolicy: IfNotPresent
port: 10471
rails:
- rail0=mlx5_0:1
- rail1=mlx5_3:1
collectors:
  nccl-ras: false
  nccl: true
extraArgs:
- --collector.nccl.log-path=/host/root/var/log/nccl/*.log
- --log.level=debug
nodeSelector:
  nvidia.com/gpu.present: null
  node-role.example/gpu: "yes"
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
      - matchExpressions:
        - key: nvidia.com/gpu.product
          operator: In
          values: [NVIDIA-H200]
tolerations:
- key: dedicated
  operator: Equal
  value: inference
  effect: NoExecute
runtimeClassName: nvidia
podResources:
  hostPath: /var/lib/k0s/kubelet/pod-resources
serviceMonitor:
  labels:
    release: kube-prometheus-stack
  interval: 30s
prometheusRule:
  labels:
    release: kube-prometheus-stack
`)
	dss := find(t, objs, "DaemonSet")
	if len(dss) != 1 {
		t.Fatalf("%d DaemonSets", len(dss))
	}
	var ds appsv1.DaemonSet
	convert(t, dss[0], &ds)
	pod := ds.Spec.Template.Spec
	c := pod.Containers[0]
	wantArgs := []string{
		"--web.listen-address=:10471",
		"--collector.kubernetes.pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock",
		"--rail=rail0=mlx5_0:1",
		"--rail=rail1=mlx5_3:1",
		"--collector.nccl",
		"--no-collector.nccl-ras",
		"--collector.nccl.log-path=/host/root/var/log/nccl/*.log",
		"--log.level=debug",
	}
	if !slices.Equal(c.Args, wantArgs) {
		t.Errorf("args\n%q\nwant\n%q", c.Args, wantArgs)
	}
	if c.Image != "registry.example.internal/fabric_exporter:v0.1.0" || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("image %q pull policy %q", c.Image, c.ImagePullPolicy)
	}
	if c.Ports[0].ContainerPort != 10471 {
		t.Errorf("container port %d", c.Ports[0].ContainerPort)
	}
	if want := map[string]string{"kubernetes.io/os": "linux", "node-role.example/gpu": "yes"}; !reflect.DeepEqual(pod.NodeSelector, want) {
		t.Errorf("nodeSelector %v, want %v", pod.NodeSelector, want)
	}
	if a := pod.Affinity; a == nil || a.NodeAffinity == nil ||
		a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Values[0] != "NVIDIA-H200" {
		t.Errorf("affinity %+v", a)
	}
	if len(pod.Tolerations) != 1 || pod.Tolerations[0].Key != "dedicated" || pod.Tolerations[0].Effect != corev1.TaintEffectNoExecute {
		t.Errorf("tolerations %+v (a list value replaces the default)", pod.Tolerations)
	}
	if pod.RuntimeClassName == nil || *pod.RuntimeClassName != "nvidia" {
		t.Errorf("runtimeClassName %v", pod.RuntimeClassName)
	}
	for _, v := range pod.Volumes {
		if v.Name == "pod-resources" && v.HostPath.Path != "/var/lib/k0s/kubelet/pod-resources" {
			t.Errorf("pod-resources hostPath %s", v.HostPath.Path)
		}
	}
	svcs := find(t, objs, "Service")
	var svc corev1.Service
	convert(t, svcs[0], &svc)
	if svc.Spec.Ports[0].Port != 10471 {
		t.Errorf("Service port %d", svc.Spec.Ports[0].Port)
	}
	var sm monitoringv1.ServiceMonitor
	convert(t, find(t, objs, "ServiceMonitor")[0], &sm)
	if sm.Labels["release"] != "kube-prometheus-stack" || sm.Spec.Endpoints[0].Interval != "30s" {
		t.Errorf("ServiceMonitor labels %v interval %s", sm.Labels, sm.Spec.Endpoints[0].Interval)
	}
	var pr monitoringv1.PrometheusRule
	convert(t, find(t, objs, "PrometheusRule")[0], &pr)
	if pr.Labels["release"] != "kube-prometheus-stack" {
		t.Errorf("PrometheusRule labels %v", pr.Labels)
	}
}

// One ConfigMap per dashboard of dashboards/json, labelled for Grafana's
// sidecar, holding the dashboard's JSON byte for byte; label, namespace and
// annotations are values; dashboards.enabled=false renders none.
func TestHelmDashboards(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repo, DashboardsDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("dashboards: %v %v", files, err)
	}
	check := func(objs []object, ns string, labels, annotations map[string]string) {
		t.Helper()
		cms := map[string]corev1.ConfigMap{}
		for _, o := range find(t, objs, "ConfigMap") {
			var cm corev1.ConfigMap
			convert(t, o, &cm)
			for k := range cm.Data {
				cms[k] = cm
			}
			if len(cm.Data) != 1 || len(cm.BinaryData) != 0 {
				t.Errorf("ConfigMap %s: %d data keys, want one dashboard", cm.Name, len(cm.Data))
			}
		}
		if len(cms) != len(files) {
			t.Errorf("%d dashboard ConfigMaps, %d dashboards", len(cms), len(files))
		}
		for _, f := range files {
			b := filepath.Base(f)
			cm, ok := cms[b]
			if !ok {
				t.Errorf("no ConfigMap holds %s", b)
				continue
			}
			want, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if got := cm.Data[b]; got != string(want) {
				t.Errorf("ConfigMap %s: %s differs from %s (%d bytes, want %d)", cm.Name, b, f, len(got), len(want))
			}
			if cm.Namespace != ns {
				t.Errorf("ConfigMap %s in namespace %q, want %q", cm.Name, cm.Namespace, ns)
			}
			for k, v := range labels {
				if got, ok := cm.Labels[k]; v == "" && ok || v != "" && got != v {
					t.Errorf("ConfigMap %s: label %s=%q, want %q", cm.Name, k, got, v)
				}
			}
			if !reflect.DeepEqual(cm.Annotations, annotations) {
				t.Errorf("ConfigMap %s: annotations %v, want %v", cm.Name, cm.Annotations, annotations)
			}
		}
	}
	check(helmTemplate(t), namespace, map[string]string{"grafana_dashboard": "1"}, nil)
	check(helmTemplate(t, `
dashboards:
  namespace: grafana
  labels:
    grafana_dashboard: null
    fabric_dashboards: "yes"
  annotations:
    grafana_folder: Fabric
`), "grafana", map[string]string{"grafana_dashboard": "", "fabric_dashboards": "yes"}, map[string]string{"grafana_folder": "Fabric"})
	if n := len(find(t, helmTemplate(t, "dashboards:\n  enabled: false\n"), "ConfigMap")); n != 0 {
		t.Errorf("dashboards.enabled=false: %d ConfigMaps", n)
	}
}

// The chart's copies of the rule file and the dashboards are their sources
// byte for byte (make rules and make dashboards run go run ./deploy/helm/gen).
func TestChartCopiesUpToDate(t *testing.T) {
	d, err := Drift(repo)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range d {
		t.Error(s)
	}
	if len(d) > 0 {
		t.Log("run `make rules` (or `go run ./deploy/helm/gen`)")
	}
}

// Sync copies, Drift finds a changed, missing or stale copy, Sync repairs
// each.
func TestSyncDrift(t *testing.T) {
	root := t.TempDir()
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(RulesPath, "groups: []\n")
	write(DashboardsDir+"/a.json", "{}\n")
	write(DashboardsDir+"/b.json", "[]\n")
	if d, _ := Drift(root); len(d) != 3 {
		t.Errorf("before Sync: %q, want 3 missing", d)
	}
	if err := Sync(root); err != nil {
		t.Fatal(err)
	}
	if d, err := Drift(root); err != nil || len(d) != 0 {
		t.Fatalf("after Sync: %q %v", d, err)
	}
	write(DashboardsDir+"/a.json", "{\"a\":1}\n")
	write(ChartDir+"/"+ChartDashboardsDir+"/old.json", "{}\n")
	if err := os.Remove(filepath.Join(root, DashboardsDir, "b.json")); err != nil {
		t.Fatal(err)
	}
	d, _ := Drift(root)
	if len(d) != 3 || !strings.Contains(d[0], "a.json differs") || !strings.Contains(d[1], "b.json") || !strings.Contains(d[2], "old.json") {
		t.Errorf("drift %q", d)
	}
	if err := Sync(root); err != nil {
		t.Fatal(err)
	}
	if d, err := Drift(root); err != nil || len(d) != 0 {
		t.Errorf("after Sync: %q %v", d, err)
	}
	got, _ := os.ReadFile(filepath.Join(root, ChartDir, ChartDashboardsDir, "a.json"))
	if !bytes.Equal(got, []byte("{\"a\":1}\n")) {
		t.Errorf("a.json copy %q", got)
	}
}
