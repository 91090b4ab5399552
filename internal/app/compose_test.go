package app

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/go-sql-driver/mysql"
	"sigs.k8s.io/yaml"
)

// There is no Docker engine where the tests run, so the compose file is
// checked the way Compose itself reads it: loaded, validated against the
// schema and interpolated by compose-go, then held against what the service
// reads (EnvNames) and what the other deployment files name.

const repoRoot = "../.."

// loadCompose loads docker-compose.yml with every profile enabled and an empty
// host environment, so every ${VAR:-default} takes its default.
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	dir, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	details := types.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(dir, "docker-compose.yml")}},
		Environment: types.Mapping{},
	}
	p, err := loader.LoadWithContext(t.Context(), details,
		func(o *loader.Options) { o.SetProjectName("seckill", true) },
		loader.WithProfiles([]string{"*"}))
	if err != nil {
		t.Fatalf("loading docker-compose.yml: %v", err)
	}
	return p
}

// servers are the services that run the seckill server: built from this
// repository with the image's entrypoint left alone.
func servers(p *types.Project) map[string]types.ServiceConfig {
	out := map[string]types.ServiceConfig{}
	for name, s := range p.Services {
		if s.Build != nil && len(s.Entrypoint) == 0 {
			out[name] = s
		}
	}
	return out
}

func TestComposeServices(t *testing.T) {
	p := loadCompose(t)
	for _, name := range []string{"redis", "mysql", "rabbitmq", "etcd", "seckill", "nginx", "loadtest"} {
		if _, ok := p.Services[name]; !ok {
			t.Errorf("service %q missing; have %v", name, p.ServiceNames())
		}
	}
	if _, ok := servers(p)["seckill"]; !ok {
		t.Errorf("service seckill does not run the server (build: . and the image's entrypoint)")
	}
	for _, name := range []string{"redis", "mysql", "rabbitmq", "etcd"} {
		if hc := p.Services[name].HealthCheck; hc == nil || hc.Disable || len(hc.Test) == 0 {
			t.Errorf("service %q has no healthcheck", name)
		}
	}
	// A service_healthy condition on a service without a healthcheck never
	// comes true, and `compose up` waits for it forever.
	for name, s := range p.Services {
		for dep, d := range s.DependsOn {
			if _, ok := p.Services[dep]; !ok {
				t.Errorf("%s depends on %s, which is not a service", name, dep)
				continue
			}
			hc := p.Services[dep].HealthCheck
			if d.Condition == types.ServiceConditionHealthy && (hc == nil || hc.Disable) {
				t.Errorf("%s waits for %s to be healthy, but %s has no healthcheck", name, dep, dep)
			}
		}
	}
	for name, s := range p.Services {
		for _, port := range s.Ports {
			if ip := net.ParseIP(port.HostIP); ip == nil || !ip.IsLoopback() {
				t.Errorf("%s publishes port %d on %q; publish on 127.0.0.1 only", name, port.Target, port.HostIP)
			}
		}
	}
}

func TestComposeServerEnvironment(t *testing.T) {
	p := loadCompose(t)
	known := EnvNames()
	srv := servers(p)
	if len(srv) == 0 {
		t.Fatal("no service runs the server")
	}
	for name, s := range srv {
		t.Run(name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range s.Environment {
				if !slices.Contains(known, k) {
					t.Errorf("sets %s, which the server does not read (it reads %v)", k, known)
				}
				if v != nil {
					env[k] = *v
				}
			}
			for _, k := range []string{"HTTP_ADDR", "MYSQL_DSN", "RABBITMQ_URL"} {
				if env[k] == "" {
					t.Errorf("%s is not set", k)
				}
			}
			if (env["REDIS_ADDR"] == "") == (env["REDIS_CLUSTER"] == "") {
				t.Errorf("REDIS_ADDR=%q REDIS_CLUSTER=%q: want exactly one", env["REDIS_ADDR"], env["REDIS_CLUSTER"])
			}

			host, port, err := net.SplitHostPort(env["HTTP_ADDR"])
			if err != nil {
				t.Fatalf("HTTP_ADDR=%q: %v", env["HTTP_ADDR"], err)
			}
			// A container's address is not known in advance: only the
			// unspecified address is reachable from its network and its
			// published ports.
			if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
				t.Errorf("HTTP_ADDR=%q listens on %q; want 0.0.0.0 or [::]", env["HTTP_ADDR"], host)
			}
			for _, pub := range s.Ports {
				if strconv.Itoa(int(pub.Target)) != port {
					t.Errorf("publishes container port %d, but the server listens on %s", pub.Target, port)
				}
			}

			// Every server the service connects to is a service it waits for.
			var backends []string
			for _, k := range []string{"REDIS_ADDR", "REDIS_ADDRS", "REDIS_CLUSTER"} {
				if v := env[k]; v != "" {
					backends = append(backends, strings.Split(v, ",")...)
				}
			}
			dsn, err := mysql.ParseDSN(env["MYSQL_DSN"])
			if err != nil {
				t.Fatalf("MYSQL_DSN=%q: %v", env["MYSQL_DSN"], err)
			}
			if !dsn.ParseTime {
				t.Errorf("MYSQL_DSN=%q lacks parseTime=true", env["MYSQL_DSN"])
			}
			backends = append(backends, dsn.Addr)
			broker, err := url.Parse(env["RABBITMQ_URL"])
			if err != nil || broker.Scheme != "amqp" || broker.Port() == "" {
				t.Errorf("RABBITMQ_URL=%q: want amqp://user:pass@host:port/ (%v)", env["RABBITMQ_URL"], err)
			} else {
				backends = append(backends, broker.Host)
			}
			for _, ep := range strings.Split(env["ETCD_ENDPOINTS"], ",") {
				if ep == "" {
					continue
				}
				u, err := url.Parse(ep)
				if err != nil || u.Scheme != "http" || u.Port() == "" {
					t.Errorf("ETCD_ENDPOINTS names %q: want http://host:port (%v)", ep, err)
					continue
				}
				backends = append(backends, u.Host)
			}
			for _, addr := range backends {
				h, _, err := net.SplitHostPort(addr)
				if err != nil {
					t.Errorf("address %q: %v", addr, err)
					continue
				}
				if d, ok := s.DependsOn[h]; !ok || d.Condition != types.ServiceConditionHealthy {
					t.Errorf("connects to %s but does not wait for service %q to be healthy", addr, h)
				}
			}
		})
	}
}

// upstreamServer matches a server line inside deploy/gate/nginx.conf's upstream block.
var upstreamServer = regexp.MustCompile(`(?m)^\s*server\s+([^\s:;]+):(\d+)\s*;`)

// controlPort matches the listen line of the gate's control server block.
var controlPort = regexp.MustCompile(`listen\s+(\d+);\s*\n\s*include\s+\S*control\.conf;`)

func TestComposeLab(t *testing.T) {
	p := loadCompose(t)
	srv := servers(p)

	conf, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "gate", "nginx.conf"))
	if err != nil {
		t.Fatal(err)
	}
	upstreams := upstreamServer.FindAllStringSubmatch(string(conf), -1)
	if len(upstreams) < 3 {
		t.Errorf("deploy/gate/nginx.conf names %d upstream servers; the lab needs three processes", len(upstreams))
	}
	for _, m := range upstreams {
		name, port := m[1], m[2]
		s, ok := srv[name]
		if !ok {
			t.Errorf("nginx proxies to %s, which is not a server service", name)
			continue
		}
		if !slices.Contains(s.Profiles, "lab") {
			t.Errorf("upstream %s is not in profile lab", name)
		}
		if addr := s.Environment["HTTP_ADDR"]; addr == nil || !strings.HasSuffix(*addr, ":"+port) {
			t.Errorf("nginx proxies to %s:%s, but it listens on %v", name, port, addr)
		}
		// The harness's scenarios send the same buyers again seconds later;
		// a per-user rate limit answers them 429 and the run ends in ERRORS.
		if rl := s.Environment["RATE_LIMIT"]; rl == nil {
			t.Errorf("upstream %s keeps the default rate limit; set RATE_LIMIT to 0 for the harness", name)
		} else if d, err := time.ParseDuration(*rl); err != nil || d != 0 {
			t.Errorf("upstream %s has RATE_LIMIT=%q; the harness needs 0", name, *rl)
		}
		// Every replica tells the gate when a product has stock again,
		// at the control port the gate listens on, with its secret.
		gate, secret := s.Environment["GATE_URLS"], s.Environment["GATE_SECRET"]
		wantGate := "http://nginx:" + controlPort.FindStringSubmatch(string(conf))[1]
		if gate == nil || *gate != wantGate {
			t.Errorf("upstream %s has GATE_URLS=%v; the gate's control endpoint is %s", name, gate, wantGate)
		}
		if gs := p.Services["nginx"].Environment["SECKILL_GATE_SECRET"]; secret == nil || gs == nil || *secret != *gs || *secret == "" {
			t.Errorf("upstream %s sends GATE_SECRET=%v; the gate expects %v", name, secret, gs)
		}
		// The per-address limit believes the X-Forwarded-For of the gate
		// alone: trusting more lets a client name its own address.
		var gateAddr string
		if n := p.Services["nginx"].Networks["default"]; n != nil {
			gateAddr = n.Ipv4Address
		}
		if tp := s.Environment["TRUSTED_PROXIES"]; gateAddr == "" || tp == nil || *tp != gateAddr {
			t.Errorf("upstream %s has TRUSTED_PROXIES=%v; the gate's address is %q", name, tp, gateAddr)
		}
		if _, ok := p.Services["nginx"].DependsOn[name]; !ok {
			t.Errorf("nginx does not depend on its upstream %s, so it may start without it", name)
		}
	}

	lt := p.Services["loadtest"]
	args := append(slices.Clone([]string(lt.Entrypoint)), lt.Command...)
	i := slices.Index(args, "-target")
	if i < 0 || i+1 >= len(args) {
		t.Fatalf("loadtest has no -target: %q", args)
	}
	for _, target := range strings.Split(args[i+1], ",") {
		u, err := url.Parse(target)
		if err != nil {
			t.Errorf("loadtest -target %q: %v", target, err)
			continue
		}
		if _, ok := p.Services[u.Hostname()]; !ok {
			t.Errorf("loadtest targets %s, which is not a service", u.Host)
		}
		if _, ok := lt.DependsOn[u.Hostname()]; !ok {
			t.Errorf("loadtest targets %s but does not depend on it", u.Host)
		}
	}
}

// The observability profile: the collector hands the servers' spans to
// Jaeger, Prometheus scrapes every server at the port it listens on, and
// Grafana's data sources name the services of the profile. Every file they
// mount is in deploy/observability.
func TestComposeObservability(t *testing.T) {
	p := loadCompose(t)
	obs := map[string]types.ServiceConfig{}
	for name, s := range p.Services {
		if slices.Contains(s.Profiles, "observability") {
			obs[name] = s
		}
	}
	for _, name := range []string{"otel-collector", "jaeger", "prometheus", "grafana"} {
		if _, ok := obs[name]; !ok {
			t.Errorf("service %q is not in profile observability", name)
		}
	}
	for name, s := range obs {
		for _, v := range s.Volumes {
			if _, err := os.Stat(v.Source); err != nil {
				t.Errorf("%s mounts %s: %v", name, v.Source, err)
			}
		}
	}
	readYAML := func(rel string, out any) {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(repoRoot, rel))
		if err == nil {
			err = yaml.Unmarshal(data, out)
		}
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
	}
	// The servers' endpoint names the collector's OTLP/HTTP port.
	var col struct {
		Receivers struct {
			OTLP struct {
				Protocols struct {
					HTTP struct{ Endpoint string }
				}
			}
		}
		Exporters map[string]struct{ Endpoint string }
		Service   struct {
			Pipelines map[string]struct{ Receivers, Exporters []string }
		}
	}
	readYAML("deploy/observability/otel-collector.yaml", &col)
	if _, port, _ := net.SplitHostPort(col.Receivers.OTLP.Protocols.HTTP.Endpoint); port != "4318" {
		t.Errorf("the collector takes OTLP/HTTP at %q; the compose file's comment and README send to :4318", col.Receivers.OTLP.Protocols.HTTP.Endpoint)
	}
	traces, ok := col.Service.Pipelines["traces"]
	if !ok || !slices.Contains(traces.Receivers, "otlp") || len(traces.Exporters) == 0 {
		t.Fatalf("the collector has no traces pipeline from otlp: %+v", col.Service.Pipelines)
	}
	for _, e := range traces.Exporters {
		host, _, err := net.SplitHostPort(col.Exporters[e].Endpoint)
		if _, ok := obs[host]; err != nil || !ok {
			t.Errorf("the collector exports to %q, not a service of the profile", col.Exporters[e].Endpoint)
		}
	}
	// Prometheus scrapes every server, at the port it listens on.
	var prom struct {
		ScrapeConfigs []struct {
			StaticConfigs []struct{ Targets []string } `json:"static_configs"`
		} `json:"scrape_configs"`
	}
	readYAML("deploy/observability/prometheus.yml", &prom)
	scraped := map[string]bool{}
	for _, sc := range prom.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				host, port, err := net.SplitHostPort(target)
				srv, ok := servers(p)[host]
				if err != nil || !ok {
					t.Errorf("Prometheus scrapes %q, which is not a server service", target)
					continue
				}
				if _, listens, _ := net.SplitHostPort(*srv.Environment["HTTP_ADDR"]); listens != port {
					t.Errorf("Prometheus scrapes %s, which listens on %s", target, listens)
				}
				scraped[host] = true
			}
		}
	}
	for name := range servers(p) {
		if !scraped[name] {
			t.Errorf("Prometheus does not scrape server %s", name)
		}
	}
	var ds struct {
		Datasources []struct{ Type, URL string }
	}
	readYAML("deploy/observability/grafana/provisioning/datasources/datasources.yaml", &ds)
	for _, d := range ds.Datasources {
		u, err := url.Parse(d.URL)
		if _, ok := obs[u.Hostname()]; err != nil || !ok {
			t.Errorf("Grafana's %s data source is %q, not a service of the profile", d.Type, d.URL)
		}
	}
}
