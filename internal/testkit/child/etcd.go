package child

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"seckill/internal/embedded"
)

// EtcdFlag is the hidden first argument that makes a binary an embedded etcd
// member; a JSON etcdChild follows it.
const EtcdFlag = "-serve-etcd"

// etcdChild is what an embedded member in a process of its own is told.
type etcdChild struct {
	Member  embedded.Member
	Cluster string
	Timing  embedded.Timing
}

// Etcd is one member of an etcd cluster of the parent's own, in a process of
// its own, that can be paused and killed: the etcd binary when it is on
// PATH, else the parent's binary serving an embedded member.
type Etcd struct {
	*Process
	embedded.Member
	// Kind is "etcd" (the real binary) or "embedded".
	Kind string
}

// StartEtcdCluster starts an n-member etcd cluster on free loopback ports,
// its data under dir, and returns once every member answers and the cluster
// has a leader. exe is a binary that calls Run, for the embedded members.
func StartEtcdCluster(ctx context.Context, exe, dir string, n int, t embedded.Timing, stderr io.Writer) ([]*Etcd, error) {
	members, err := embedded.Layout(dir, n)
	if err != nil {
		return nil, err
	}
	cluster := embedded.InitialCluster(members)
	real, _ := exec.LookPath("etcd")
	var procs []*Etcd
	stop := func() {
		for _, p := range procs {
			p.Kill()
		}
	}
	for _, m := range members {
		e := &Etcd{Member: m, Kind: "embedded"}
		if real != "" {
			e.Kind = "etcd"
			// Killed with its parent: etcd does not watch its stdin.
			attr := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			e.Process, _, err = start(ctx, real, embedded.Args(m, cluster, t), stderr, "", attr)
		} else {
			arg, _ := json.Marshal(etcdChild{Member: m, Cluster: cluster, Timing: t})
			e.Process, _, err = start(ctx, exe, []string{EtcdFlag, string(arg)}, stderr, "", nil)
		}
		if err != nil {
			stop()
			return nil, fmt.Errorf("starting etcd member %s: %w", m.Name, err)
		}
		procs = append(procs, e)
	}
	if err := waitEtcd(ctx, procs); err != nil {
		stop()
		return nil, err
	}
	return procs, nil
}

// waitEtcd polls until every member answers Status with a leader.
func waitEtcd(ctx context.Context, procs []*Etcd) error {
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	for _, p := range procs {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.ClientURL}, DialTimeout: time.Second, Logger: embedded.NopLogger()})
		if err != nil {
			return err
		}
		for {
			sctx, scancel := context.WithTimeout(ctx, time.Second)
			st, err := cli.Status(sctx, p.ClientURL)
			scancel()
			if err == nil && st.Leader != 0 {
				break
			}
			select {
			case <-p.exited:
				cli.Close()
				return fmt.Errorf("etcd member %s exited: %v", p.Name, err)
			case <-ctx.Done():
				cli.Close()
				return fmt.Errorf("etcd member %s: no leader before the deadline: %v", p.Name, err)
			case <-time.After(20 * time.Millisecond):
			}
		}
		cli.Close()
	}
	return nil
}

// serveEtcd is an embedded member's side: it serves until its stdin closes.
func serveEtcd(arg string, stdin io.Reader) error {
	var c etcdChild
	if err := json.Unmarshal([]byte(arg), &c); err != nil {
		return fmt.Errorf("%s: %w", EtcdFlag, err)
	}
	if err := os.MkdirAll(filepath.Dir(c.Member.Dir), 0o755); err != nil {
		return err
	}
	gone := awaitParent(stdin)
	started := make(chan struct{})
	var (
		s   *embedded.Server
		err error
	)
	go func() { // Start waits for a quorum, which the parent may never give
		defer close(started)
		s, err = embedded.Start(c.Member, c.Cluster, c.Timing)
	}()
	select {
	case <-started:
	case <-gone:
		return errors.New("the parent went away before the cluster formed")
	}
	if err != nil {
		return err
	}
	defer s.Close()
	<-gone
	return nil
}

// StartEtcd returns ETCD_ENDPOINTS's cluster, or starts an embedded etcd that
// stop ends.
func StartEtcd() (endpoints []string, stop func(), err error) {
	if env := os.Getenv("ETCD_ENDPOINTS"); env != "" {
		return strings.Split(env, ","), func() {}, nil
	}
	s, err := embedded.StartSingle()
	if err != nil {
		return nil, nil, err
	}
	return []string{s.Endpoint()}, func() { s.Close() }, nil
}
