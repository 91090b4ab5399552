package gate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"text/template"
	"time"

	gateconf "seckill/deploy/gate"
	"seckill/internal/api"
	"seckill/internal/freeport"
)

// NginxOptions configure a gate run by StartNginx.
type NginxOptions struct {
	// Upstreams are the replicas, host:port. Required.
	Upstreams []string
	// Front, Control and Plain are listen addresses (host:port): the gate,
	// its control endpoint, and, when Plain is set, a plain proxy to the
	// same replicas without the gate, for comparisons. "" for Front or
	// Control picks a free loopback port.
	Front, Control, Plain string
	// Secret is the control endpoint's secret. Default: none (loopback only).
	Secret string
	// TTL is how long a learned sold-out holds. Default: 5s.
	TTL time.Duration
	// Workers is nginx's worker processes. Default: 1.
	Workers int
	// Stderr receives nginx's own output. Default: discarded.
	Stderr io.Writer
}

// Nginx is a gate running as a child process.
type Nginx struct {
	// URL is the gate's base URL, ControlURL its control endpoint's,
	// PlainURL the plain proxy's ("" without one).
	URL, ControlURL, PlainURL string

	cmd    *exec.Cmd
	dir    string
	exited chan struct{}
	err    error // what Wait returned, once exited is closed
}

// nginxModules are the dynamic modules Debian's nginx needs for Lua.
var nginxModules = []string{"ndk_http_module.so", "ngx_http_lua_module.so"}

// FindNginx finds nginx on PATH and the Lua module (Debian's
// libnginx-mod-http-lua) among its modules.
func FindNginx() (path string, modules []string, err error) {
	if path, err = exec.LookPath("nginx"); err != nil {
		return "", nil, err
	}
	for _, m := range nginxModules {
		found := ""
		for _, dir := range []string{"/usr/lib/nginx/modules", "/usr/share/nginx/modules"} {
			if _, err := os.Stat(filepath.Join(dir, m)); err == nil {
				found = filepath.Join(dir, m)
				break
			}
		}
		if found == "" {
			return "", nil, fmt.Errorf("%s not found in /usr/lib/nginx/modules (apt-get install libnginx-mod-http-lua)", m)
		}
		modules = append(modules, found)
	}
	return path, modules, nil
}

// FreeAddr returns a loopback address whose port was free a moment ago.
func FreeAddr() (string, error) { return freeport.Addr() }

var nginxConf = template.Must(template.New("nginx.conf").Parse(`# Written by internal/gate.StartNginx.
{{range .Modules}}load_module {{.}};
{{end}}{{if .Root}}user root;
{{end}}worker_processes {{.Workers}};
daemon off;
master_process on;
pid {{.Dir}}/nginx.pid;
error_log {{.Dir}}/error.log warn;
env SECKILL_GATE_SECRET;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path {{.Dir}}/body;
    proxy_temp_path {{.Dir}}/proxy;
    fastcgi_temp_path {{.Dir}}/fastcgi;
    uwsgi_temp_path {{.Dir}}/uwsgi;
    scgi_temp_path {{.Dir}}/scgi;
    lua_shared_dict seckill_gate 10m;
    lua_package_path "{{.Dir}}/?.lua;;";
    init_by_lua_block { require("seckill_gate").configure({ ttl = {{.TTL}} }) }
    upstream seckill {
{{range .Upstreams}}        server {{.}};
{{end}}        keepalive 64;
    }
    server {
        listen {{.Front}};
        include {{.Dir}}/locations.conf;
    }
    server {
        listen {{.Control}};
        include {{.Dir}}/control.conf;
    }
{{if .Plain}}    server {
        listen {{.Plain}};
        location / {
            proxy_pass http://seckill;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
        }
    }
{{end}}}
`))

// nginxStart bounds nginx's start-up.
const nginxStart = 15 * time.Second

// StartNginx writes the gate's files and a config in a temporary directory
// and runs nginx on it until Stop; it returns once the control endpoint
// answers. The nginx.conf of deploy/gate is the compose lab's; this one has
// the same locations and Lua, on loopback ports.
func StartNginx(ctx context.Context, opt NginxOptions) (_ *Nginx, err error) {
	path, modules, err := FindNginx()
	if err != nil {
		return nil, err
	}
	if len(opt.Upstreams) == 0 {
		return nil, errors.New("gate: nginx needs at least one upstream")
	}
	if err := opt.fill(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "seckill-gate-")
	if err != nil {
		return nil, fmt.Errorf("creating the gate's directory: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	confPath, err := writeGateDir(dir, modules, opt)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, "-p", dir, "-c", confPath)
	cmd.Env = append(os.Environ(), "SECKILL_GATE_SECRET="+opt.Secret)
	cmd.Stdout, cmd.Stderr = opt.Stderr, opt.Stderr
	// Its own process group: a signal to the test's group does not reach
	// it twice, and Stop ends its workers with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting nginx: %w", err)
	}
	n := &Nginx{URL: "http://" + opt.Front, ControlURL: "http://" + opt.Control, cmd: cmd, dir: dir, exited: make(chan struct{})}
	if opt.Plain != "" {
		n.PlainURL = "http://" + opt.Plain
	}
	go func() {
		n.err = cmd.Wait()
		close(n.exited)
	}()
	if err := n.await(ctx, opt.Secret); err != nil {
		n.Stop()
		return nil, err
	}
	return n, nil
}

// fill gives the options' unset fields their defaults: free loopback
// addresses for the front and the control endpoint, a 5s TTL, one worker,
// no output.
func (opt *NginxOptions) fill() error {
	for _, a := range []*string{&opt.Front, &opt.Control} {
		if *a == "" {
			var err error
			if *a, err = FreeAddr(); err != nil {
				return err
			}
		}
	}
	if opt.TTL <= 0 {
		opt.TTL = 5 * time.Second
	}
	if opt.Workers <= 0 {
		opt.Workers = 1
	}
	if opt.Stderr == nil {
		opt.Stderr = io.Discard
	}
	return nil
}

// writeGateDir writes the gate's files and its nginx.conf for opt into dir,
// and returns the config's path.
func writeGateDir(dir string, modules []string, opt NginxOptions) (string, error) {
	if err := os.CopyFS(dir, gateconf.Files); err != nil {
		return "", fmt.Errorf("writing the gate's files: %w", err)
	}
	// nginx's workers run as root only when the master does; else as the
	// master's user, who owns dir.
	if err := fs.WalkDir(os.DirFS(dir), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chmod(filepath.Join(dir, p), map[bool]os.FileMode{true: 0o700, false: 0o600}[d.IsDir()])
	}); err != nil {
		return "", fmt.Errorf("setting the gate's files' modes: %w", err)
	}
	upstreams := make([]string, len(opt.Upstreams))
	for i, u := range opt.Upstreams {
		upstreams[i] = strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://")
	}
	var conf bytes.Buffer
	err := nginxConf.Execute(&conf, map[string]any{"Modules": modules, "Root": os.Geteuid() == 0, "Workers": opt.Workers,
		"Dir": dir, "TTL": opt.TTL.Seconds(), "Upstreams": upstreams, "Front": opt.Front, "Control": opt.Control, "Plain": opt.Plain})
	if err != nil {
		return "", fmt.Errorf("writing the gate's nginx.conf: %w", err)
	}
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, conf.Bytes(), 0o600); err != nil {
		return "", fmt.Errorf("writing the gate's nginx.conf: %w", err)
	}
	return confPath, nil
}

// await polls the control endpoint until it answers.
func (n *Nginx) await(ctx context.Context, secret string) error {
	deadline := time.Now().Add(nginxStart)
	c := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.ControlURL+api.GateStatePath, nil)
		if err != nil {
			return err
		}
		req.Header.Set(api.HeaderGateSecret, secret)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		select {
		case <-n.exited:
			return fmt.Errorf("nginx exited at start (%v): %s", n.err, n.ErrorLog())
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nginx's control endpoint did not answer within %s: %w; %s", nginxStart, err, n.ErrorLog())
		}
	}
}

// ErrorLog is nginx's error log so far.
func (n *Nginx) ErrorLog() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "error.log"))
	return string(b)
}

// Stop shuts nginx down (SIGTERM, then SIGKILL after 10s) and removes its
// directory.
func (n *Nginx) Stop() error {
	defer os.RemoveAll(n.dir)
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
		return nil
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
		<-n.exited
		return errors.New("nginx did not stop within 10s: killed")
	}
}
