package harness

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// Machine is what a report states about where it ran, so that numbers are
// never read without their context.
type Machine struct {
	CPU       string `json:"cpu"`
	Cores     int    `json:"cores"`
	OS        string `json:"os"`
	Go        string `json:"go"`
	Commit    string `json:"commit"`
	Service   string `json:"service_mode"` // embedded or external, from /healthz
	Redis     string `json:"redis"`
	SQL       string `json:"sql"`
	Instances int    `json:"instances"`
	Target    string `json:"target"`
	Note      string `json:"note,omitempty"` // why a field is missing
}

// DetectMachine describes this machine and the service at targets.
func DetectMachine(ctx context.Context, c *http.Client, targets []string) Machine {
	m := Machine{
		CPU:       cpuModel(),
		Cores:     runtime.NumCPU(),
		OS:        runtime.GOOS + "/" + runtime.GOARCH,
		Go:        runtime.Version(),
		Commit:    commit(ctx),
		Instances: len(targets),
	}
	if len(targets) == 0 {
		return m
	}
	m.Target = targets[0]
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	h, err := CheckHealth(ctx, c, targets[0])
	if err != nil {
		m.Note = err.Error()
		return m
	}
	m.Service, m.Redis, m.SQL = h.Mode, h.Redis, h.SQL
	return m
}

// cpuModel reads the first "model name" of /proc/cpuinfo (Linux); elsewhere
// it says only the architecture.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

// commit is the checkout's short commit when git can tell (go run from a
// checkout), else the revision the binary was built from.
func commit(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		return strings.TrimSpace(string(out))
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "unknown", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value[:min(len(s.Value), 7)]
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty {
		rev += "+dirty"
	}
	return rev
}
