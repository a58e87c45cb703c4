package deploy

import (
	"bytes"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/fabric-exporter/fabric_exporter/alerts"
	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

const labDir = "lab"

// decodeYAMLStrict decodes a YAML file; unknown fields are errors.
func decodeYAMLStrict(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// The subset of the Compose specification compose.yaml uses.
type composeFile struct {
	Exporter any                       `yaml:"x-exporter"`
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Build *struct {
		Context string   `yaml:"context"`
		Args    []string `yaml:"args"`
	} `yaml:"build"`
	Image       string            `yaml:"image"`
	NetworkMode string            `yaml:"network_mode"`
	ReadOnly    bool              `yaml:"read_only"`
	CapDrop     []string          `yaml:"cap_drop"`
	CapAdd      []string          `yaml:"cap_add"`
	Restart     string            `yaml:"restart"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
}

// flag returns the value of --name=value in the service's command.
func (s composeService) flag(name string) string {
	for _, a := range s.Command {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// mount returns the container path where source (relative to the compose
// file) is mounted, or "".
func (s composeService) mount(source string) string {
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && parts[0] == source {
			return parts[1]
		}
	}
	return ""
}

func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return p
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	var c composeFile
	decodeYAMLStrict(t, filepath.Join(labDir, "compose.yaml"), &c)
	return c
}

// dashboardsSource is where compose.yaml finds the dashboards (written
// separately; they may not be in this tree yet).
const dashboardsSource = "../../dashboards/json"

// compose.yaml: the services of the lab, their mounts exist, the two
// exporters run on distinct ports with the documented restrictions.
func TestLabCompose(t *testing.T) {
	c := loadCompose(t)
	var names []string
	for n := range c.Services {
		names = append(names, n)
	}
	slices.Sort(names)
	if want := []string{"alertmanager", "exporter-node1", "exporter-node2", "grafana", "prometheus"}; !slices.Equal(names, want) {
		t.Fatalf("services %v, want %v", names, want)
	}
	for name, s := range c.Services {
		if s.Image == "" {
			t.Errorf("%s: no image", name)
		}
		if s.NetworkMode != "host" {
			t.Errorf("%s: network_mode %q, want host", name, s.NetworkMode)
		}
		for _, v := range s.Volumes {
			src := strings.Split(v, ":")[0]
			if !strings.HasPrefix(src, ".") {
				if _, ok := c.Volumes[src]; !ok {
					t.Errorf("%s: named volume %q not declared", name, src)
				}
				continue
			}
			if _, err := os.Stat(filepath.Join(labDir, src)); err != nil {
				if src == dashboardsSource {
					t.Logf("%s: %s is not in this tree yet (the dashboards are written separately)", name, src)
					continue
				}
				t.Errorf("%s: mount source %s: %v", name, src, err)
			}
		}
	}
	ports := map[string]bool{}
	for _, name := range []string{"exporter-node1", "exporter-node2"} {
		s := c.Services[name]
		if s.Build == nil || filepath.Clean(filepath.Join(labDir, s.Build.Context)) != ".." {
			t.Errorf("%s: want build context ../.. (the top-level Dockerfile)", name)
		}
		p := port(t, s.flag("web.listen-address"))
		if ports[p] {
			t.Errorf("%s: port %s used twice", name, p)
		}
		ports[p] = true
		if !s.ReadOnly || !slices.Equal(s.CapDrop, []string{"ALL"}) || !slices.Equal(slices.Sorted(slices.Values(s.CapAdd)), []string{"DAC_READ_SEARCH", "SYS_PTRACE"}) {
			t.Errorf("%s: want read_only, cap_drop [ALL], cap_add [SYS_PTRACE, DAC_READ_SEARCH]", name)
		}
		if s.mount("../../collector/fixtures/sys") != "/host/sys" {
			t.Errorf("%s: the fixture sysfs tree is not mounted at /host/sys", name)
		}
		for _, f := range []string{"collector.pfc.ethtool-fixtures", "collector.phy.fixtures", "collector.gpu.fixture"} {
			if s.flag(f) == "" {
				t.Errorf("%s: no --%s", name, f)
			}
		}
	}

	// Not installed by .ci/run: without either, only the checks above.
	compose := testenv.OptionalTool("docker-compose")
	if compose == "" {
		if err := exec.Command("docker", "compose", "version").Run(); err == nil {
			compose = "docker compose"
		}
	}
	if compose == "" {
		t.Log("neither docker compose nor docker-compose installed: compose.yaml checked by this test only")
		return
	}
	args := append(strings.Fields(compose), "-f", filepath.Join(labDir, "compose.yaml"), "config", "-q")
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Errorf("%s config: %v\n%s", compose, err, out)
	}
}

// The subset of prometheus.yml checked here (promtool checks the rest).
type promConfig struct {
	RuleFiles []string `yaml:"rule_files"`
	Alerting  struct {
		Alertmanagers []struct {
			StaticConfigs []staticConfig `yaml:"static_configs"`
		} `yaml:"alertmanagers"`
	} `yaml:"alerting"`
	ScrapeConfigs []struct {
		JobName       string         `yaml:"job_name"`
		StaticConfigs []staticConfig `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

type staticConfig struct {
	Targets []string          `yaml:"targets"`
	Labels  map[string]string `yaml:"labels"`
}

// promtool accepts the lab's Prometheus configuration and the rule file it
// names (by a path relative to itself that resolves to alerts/ both in the
// repository and in the container), and the targets fit the rules and the
// compose file: job names the rules select, the cluster label, the
// exporters' and Alertmanager's ports.
func TestLabPrometheusConfig(t *testing.T) {
	promtool := testenv.Tool(t, "promtool")
	cfgPath := filepath.Join(labDir, "prometheus.yml")
	out, err := exec.Command(promtool, "check", "config", cfgPath).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "fabric-rules.yml") {
		t.Errorf("promtool did not check the rule file:\n%s", out)
	}

	var cfg promConfig
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.RuleFiles) != 1 || filepath.Clean(filepath.Join(labDir, cfg.RuleFiles[0])) != filepath.Join("..", "alerts", "fabric-rules.yml") {
		t.Errorf("rule_files %v: want the repository's alerts/fabric-rules.yml", cfg.RuleFiles)
	}
	c := loadCompose(t)
	prom := c.Services["prometheus"]
	cfgTarget := prom.mount("./prometheus.yml")
	if cfgTarget == "" || prom.flag("config.file") != cfgTarget {
		t.Errorf("prometheus: --config.file=%s, prometheus.yml mounted at %q", prom.flag("config.file"), cfgTarget)
	}
	if len(cfg.RuleFiles) == 1 {
		if rt := prom.mount("../../alerts/fabric-rules.yml"); rt == "" || path.Join(path.Dir(cfgTarget), cfg.RuleFiles[0]) != rt {
			t.Errorf("prometheus: rule file mounted at %q; the config's path resolves to %q there", rt, path.Join(path.Dir(cfgTarget), cfg.RuleFiles[0]))
		}
	}

	ac := alerts.DefaultConfig()
	jobs := map[string][]staticConfig{}
	for _, sc := range cfg.ScrapeConfigs {
		jobs[sc.JobName] = sc.StaticConfigs
		for _, st := range sc.StaticConfigs {
			if st.Labels[ac.ClusterLabel] == "" {
				t.Errorf("job %s: targets %v lack the %s label the rules aggregate by", sc.JobName, st.Targets, ac.ClusterLabel)
			}
		}
	}
	// FabricExporterDown selects the exporter's job; sglangSelector is
	// optional (empty: SGLang's series by name alone).
	for _, sel := range []string{ac.ExporterSelector, ac.SGLangSelector} {
		if sel == "" {
			continue
		}
		job := strings.TrimSuffix(strings.TrimPrefix(sel, `job="`), `"`)
		if len(jobs[job]) == 0 {
			t.Errorf("no scrape job %q for the rules' selector %s", job, sel)
		}
	}
	var exporterPorts, wantPorts []string
	for _, st := range jobs["fabric"] {
		for _, tg := range st.Targets {
			exporterPorts = append(exporterPorts, port(t, tg))
		}
	}
	for _, name := range []string{"exporter-node1", "exporter-node2"} {
		wantPorts = append(wantPorts, port(t, c.Services[name].flag("web.listen-address")))
	}
	slices.Sort(exporterPorts)
	slices.Sort(wantPorts)
	if !slices.Equal(exporterPorts, wantPorts) {
		t.Errorf("job fabric scrapes ports %v, the exporters listen on %v", exporterPorts, wantPorts)
	}
	am := cfg.Alerting.Alertmanagers
	if len(am) != 1 || len(am[0].StaticConfigs) != 1 || len(am[0].StaticConfigs[0].Targets) != 1 ||
		port(t, am[0].StaticConfigs[0].Targets[0]) != port(t, c.Services["alertmanager"].flag("web.listen-address")) {
		t.Errorf("alerting targets %+v do not match Alertmanager's --web.listen-address", am)
	}
}

// amtool accepts the Alertmanager configuration the lab mounts.
func TestLabAlertmanagerConfig(t *testing.T) {
	amtool := testenv.Tool(t, "amtool")
	am := loadCompose(t).Services["alertmanager"]
	src := ""
	for _, v := range am.Volumes {
		if parts := strings.Split(v, ":"); len(parts) >= 2 && parts[1] == am.flag("config.file") {
			src = parts[0]
		}
	}
	if src != "../alertmanager/alertmanager.yml" {
		t.Fatalf("alertmanager: --config.file %s is mounted from %q, want ../alertmanager/alertmanager.yml", am.flag("config.file"), src)
	}
	if out, err := exec.Command(amtool, "check-config", filepath.Join(labDir, src)).CombinedOutput(); err != nil {
		t.Fatalf("amtool check-config: %v\n%s", err, out)
	}
}

// Grafana's provisioning files (datasources and dashboard providers, as in
// Grafana's provisioning documentation); strict decoding catches misspelt keys.
type grafanaDatasources struct {
	APIVersion  int `yaml:"apiVersion"`
	Datasources []struct {
		Name      string         `yaml:"name"`
		UID       string         `yaml:"uid"`
		Type      string         `yaml:"type"`
		Access    string         `yaml:"access"`
		URL       string         `yaml:"url"`
		IsDefault bool           `yaml:"isDefault"`
		Editable  bool           `yaml:"editable"`
		JSONData  map[string]any `yaml:"jsonData"`
	} `yaml:"datasources"`
}

type grafanaDashboards struct {
	APIVersion int `yaml:"apiVersion"`
	Providers  []struct {
		Name                  string `yaml:"name"`
		Folder                string `yaml:"folder"`
		Type                  string `yaml:"type"`
		DisableDeletion       bool   `yaml:"disableDeletion"`
		AllowUIUpdates        bool   `yaml:"allowUiUpdates"`
		UpdateIntervalSeconds int    `yaml:"updateIntervalSeconds"`
		Options               struct {
			Path                      string `yaml:"path"`
			FoldersFromFilesStructure bool   `yaml:"foldersFromFilesStructure"`
		} `yaml:"options"`
	} `yaml:"providers"`
}

// The lab's Grafana gets one default Prometheus data source pointing at the
// lab's Prometheus, and a file provider reading the directory compose mounts
// the dashboards into; the dashboards there (when present) are JSON with a
// title and uid and use the data source through a variable or its uid.
func TestLabGrafanaProvisioning(t *testing.T) {
	c := loadCompose(t)
	g := c.Services["grafana"]
	prov := "grafana/provisioning"
	if g.mount("./"+prov) != "/etc/grafana/provisioning" {
		t.Errorf("grafana: ./%s is not mounted at /etc/grafana/provisioning", prov)
	}

	dsFiles, _ := filepath.Glob(filepath.Join(labDir, prov, "datasources", "*.yml"))
	dbFiles, _ := filepath.Glob(filepath.Join(labDir, prov, "dashboards", "*.yml"))
	if len(dsFiles) != 1 || len(dbFiles) != 1 {
		t.Fatalf("want one datasource and one dashboard provisioning file, have %v %v", dsFiles, dbFiles)
	}
	var ds grafanaDatasources
	decodeYAMLStrict(t, dsFiles[0], &ds)
	if ds.APIVersion != 1 || len(ds.Datasources) != 1 {
		t.Fatalf("%s: apiVersion %d, %d data sources", dsFiles[0], ds.APIVersion, len(ds.Datasources))
	}
	d := ds.Datasources[0]
	if d.Type != "prometheus" || !d.IsDefault || d.UID == "" || d.Name == "" || d.Access != "proxy" {
		t.Errorf("data source %+v: want a named default prometheus data source with a uid, access proxy", d)
	}
	u, err := url.Parse(d.URL)
	if err != nil || u.Scheme != "http" || u.Port() != port(t, c.Services["prometheus"].flag("web.listen-address")) {
		t.Errorf("data source URL %q does not point at the lab's Prometheus", d.URL)
	}

	var db grafanaDashboards
	decodeYAMLStrict(t, dbFiles[0], &db)
	if db.APIVersion != 1 || len(db.Providers) != 1 {
		t.Fatalf("%s: apiVersion %d, %d providers", dbFiles[0], db.APIVersion, len(db.Providers))
	}
	p := db.Providers[0]
	if p.Type != "file" || p.Name == "" || p.Options.Path == "" {
		t.Errorf("provider %+v: want a named file provider with a path", p)
	}
	if target := g.mount(dashboardsSource); target != p.Options.Path {
		t.Errorf("provider reads %s; compose mounts %s at %q", p.Options.Path, dashboardsSource, target)
	}

	t.Run("dashboard files", func(t *testing.T) {
		files, _ := filepath.Glob(filepath.Join(labDir, dashboardsSource, "*.json"))
		if len(files) == 0 {
			t.Skipf("no %s/*.json in this tree yet (the dashboards are written separately); provider path and mount checked above", dashboardsSource)
		}
		uids := map[string]string{}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var dash map[string]any
			if err := json.Unmarshal(b, &dash); err != nil {
				t.Errorf("%s: %v", f, err)
				continue
			}
			title, _ := dash["title"].(string)
			uid, _ := dash["uid"].(string)
			if title == "" || uid == "" {
				t.Errorf("%s: no title or uid", f)
			}
			if prev, ok := uids[uid]; ok {
				t.Errorf("%s and %s share uid %q", prev, f, uid)
			}
			uids[uid] = f
			for _, ref := range datasourceUIDs(dash) {
				if ref != d.UID && !strings.HasPrefix(ref, "$") && ref != "-- Grafana --" {
					t.Errorf("%s: data source uid %q is neither a variable nor the provisioned %q", f, ref, d.UID)
				}
			}
		}
		t.Logf("%d dashboards", len(files))
	})
}

// datasourceUIDs returns the uid of every "datasource": {"uid": ...} in v.
func datasourceUIDs(v any) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if k == "datasource" {
				if m, ok := e.(map[string]any); ok {
					if uid, ok := m["uid"].(string); ok {
						out = append(out, uid)
					}
				}
			}
			out = append(out, datasourceUIDs(e)...)
		}
	case []any:
		for _, e := range x {
			out = append(out, datasourceUIDs(e)...)
		}
	}
	return out
}
