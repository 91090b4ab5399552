package embedded

// etcd runs inside the process (go.etcd.io/etcd/server/v3/embed) on
// loopback, so that the etcd lock strategy, its tests and the harness run on
// a machine with nothing but Go. Layout also lays out multi-member clusters
// on free ports, whose members a test or the harness may run in processes of
// their own (see internal/testkit/child) to kill or pause them.
//
// The etcd server is a large dependency: the service starts it on first use
// of the etcd strategy (StartSingle), not at boot.

import (
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"seckill/internal/freeport"
)

// Member is one etcd member's place in a cluster: its name, its data
// directory and its URLs.
type Member struct {
	Name      string
	Dir       string
	ClientURL string // http://127.0.0.1:port, what clients dial
	PeerURL   string // http://127.0.0.1:port, what the other members dial
}

// Timing is the Raft clock of a cluster.
type Timing struct {
	// Tick is the heartbeat interval. Default: 100ms (etcd's).
	Tick time.Duration
	// Election is the election timeout. Default: 1s (etcd's). The smallest
	// lease etcd grants is 1.5 elections (so 2s by default, rounded up to
	// whole seconds): a shorter LOCK_TTL is raised to it.
	Election time.Duration
}

func (t Timing) tick() time.Duration {
	if t.Tick <= 0 {
		return 100 * time.Millisecond
	}
	return t.Tick
}

func (t Timing) election() time.Duration {
	if t.Election <= 0 {
		return time.Second
	}
	return t.Election
}

// Layout names n members on free loopback ports, with data directories under
// dir. The ports are free when Layout returns; another process may take one
// before the member binds it, which Start then reports.
func Layout(dir string, n int) ([]Member, error) {
	ms := make([]Member, n)
	for i := range ms {
		cp, err := freeport.Port()
		if err != nil {
			return nil, err
		}
		pp, err := freeport.Port()
		if err != nil {
			return nil, err
		}
		name := "m" + strconv.Itoa(i)
		ms[i] = Member{Name: name, Dir: dir + "/" + name,
			ClientURL: "http://127.0.0.1:" + strconv.Itoa(cp), PeerURL: "http://127.0.0.1:" + strconv.Itoa(pp)}
	}
	return ms, nil
}

// InitialCluster is etcd's --initial-cluster value for members.
func InitialCluster(members []Member) string {
	parts := make([]string, len(members))
	for i, m := range members {
		parts[i] = m.Name + "=" + m.PeerURL
	}
	return strings.Join(parts, ",")
}

// Endpoints are the members' client URLs.
func Endpoints(members []Member) []string {
	eps := make([]string, len(members))
	for i, m := range members {
		eps[i] = m.ClientURL
	}
	return eps
}

// Args are the etcd binary's flags for member m of cluster (for a real etcd
// in a process of its own).
func Args(m Member, cluster string, t Timing) []string {
	return []string{
		"--name", m.Name, "--data-dir", m.Dir,
		"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
		"--listen-peer-urls", m.PeerURL, "--initial-advertise-peer-urls", m.PeerURL,
		"--initial-cluster", cluster, "--initial-cluster-state", "new", "--initial-cluster-token", "seckill",
		"--heartbeat-interval", strconv.FormatInt(t.tick().Milliseconds(), 10),
		"--election-timeout", strconv.FormatInt(t.election().Milliseconds(), 10),
		"--logger", "zap", "--log-level", "error",
	}
}

// Server is an etcd member running in this process.
type Server struct {
	e      *embed.Etcd
	member Member
	owned  string // a temporary directory Close removes, or ""
}

// Start runs member m of cluster (an InitialCluster value) in this process
// and returns once it has joined, or a minute has passed: a member of a
// cluster is ready only when a quorum is up, so start the others at once.
func Start(m Member, cluster string, t Timing) (*Server, error) {
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = m.Name, m.Dir
	cu, err := url.Parse(m.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("etcd member %s: client URL: %w", m.Name, err)
	}
	pu, err := url.Parse(m.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("etcd member %s: peer URL: %w", m.Name, err)
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster, cfg.InitialClusterToken = cluster, "seckill"
	cfg.ClusterState = embed.ClusterStateFlagNew
	cfg.TickMs, cfg.ElectionMs = uint(t.tick().Milliseconds()), uint(t.election().Milliseconds())
	// The lab's data lives as long as the process: an fsync per write
	// would only slow every grant down.
	cfg.UnsafeNoFsync = true
	// No metrics listener, no log lines on the service's output.
	cfg.ListenMetricsUrls = nil
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("starting embedded etcd member %s: %w", m.Name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd member %s: %w", m.Name, err)
	case <-time.After(time.Minute):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("embedded etcd member %s: not ready within a minute", m.Name)
	}
	return &Server{e: e, member: m}, nil
}

// StartSingle runs a one-member etcd in a new temporary directory, which
// Close removes.
func StartSingle() (*Server, error) {
	dir, err := os.MkdirTemp("", "seckill-etcd-")
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	ms, err := Layout(dir, 1)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	// A single member never elects: a short election timeout only lowers
	// the smallest lease etcd grants, to 1s, so tests may use short TTLs.
	s, err := Start(ms[0], InitialCluster(ms), Timing{Tick: 50 * time.Millisecond, Election: 500 * time.Millisecond})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s.owned = dir
	return s, nil
}

// Endpoint is the URL clients dial.
func (s *Server) Endpoint() string { return s.member.ClientURL }

// Close stops the member and removes its temporary directory, if it made one.
func (s *Server) Close() error {
	s.e.Close()
	if s.owned != "" {
		return os.RemoveAll(s.owned)
	}
	return nil
}

// NopLogger is a logger for etcd clients that says nothing: the client logs
// every retry, which would drown the service's own lines.
func NopLogger() *zap.Logger { return zap.NewNop() }
