package main

import (
	"errors"
	"os"
	"testing"

	"seckill/internal/api"
	"seckill/internal/testkit"
)

// etcdCluster starts a 3-member cluster of the test's own.
func etcdCluster(t *testing.T) EtcdCluster {
	t.Helper()
	c, kind, stop, err := StartEtcdCluster(t.Context(), os.Args[0], t.TempDir(), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	t.Logf("etcd members: %s", kind)
	return c
}

// failover starts a Redis master and its replica, in sync, and sets up the
// drill on them; it skips, naming redis-server, where there is none.
func failover(t *testing.T, lock string) Failover {
	t.Helper()
	f, stop, err := StartFailover(t.Context(), os.Args[0], t.TempDir(), testkit.RealRedis(t).Addr(), lock, os.Stderr)
	if errors.Is(err, ErrNeedsRedisServer) {
		testkit.Skip(t, testkit.NoRedisServer, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return f
}

// TestAPvsCP sets the AP lock beside the CP one. Redis replicates after it
// answers: a master that grants the lock and dies before its replica has it
// takes the grant with it, the promoted replica grants it again, and the
// read-modify-write oversells, unless the lock waits for a replica (WAIT 1)
// or a fence drawn from the store refuses the stale write; the fenced
// strategy's own counter fails over with the lock, so it draws A's token
// again. etcd answers a grant once a majority has it: its leader killed
// under a held lock, the lock survives and no second holder appears.
func TestAPvsCP(t *testing.T) {
	t.Run("CP/etcd leader killed", func(t *testing.T) {
		out, err := EtcdLeaderKill(t.Context(), testkit.RealRedis(t).Addr(), etcdCluster(t), "etcd, leader killed")
		if err != nil {
			t.Fatal(err)
		}
		t.Log(out)
		if out.Verdict != api.VerdictOK || out.Sold != 1 {
			t.Errorf("verdict %s, sold %d; want OK, 1 sold (%s)", out.Verdict, out.Sold, out.Detail)
		}
	})
	for _, tc := range []struct {
		lock string
		want string
		sold int
	}{
		{FailoverToken, api.VerdictOversold, 2},
		// B is refused too: the promoted replica has no replica of its
		// own, and WAIT 1 refuses every grant until one attaches.
		{FailoverTokenWait, api.VerdictOK, 0},
		{FailoverFenced, api.VerdictOversold, 2},
		{FailoverFenceStore, api.VerdictOK, 1},
	} {
		t.Run("AP/redis failover/"+tc.lock, func(t *testing.T) {
			out, err := failover(t, tc.lock).Run(t.Context(), "redis failover, "+tc.lock)
			if err != nil {
				t.Fatal(err)
			}
			t.Log(out)
			if out.Verdict != tc.want || out.Sold != tc.sold {
				t.Errorf("verdict %s, sold %d; want %s, %d sold (%s)", out.Verdict, out.Sold, tc.want, tc.sold, out.Detail)
			}
		})
	}
}

// TestEtcdMinorityPartition: the holder's only member is cut off from the
// majority. It cannot renew; the majority expires its lease and grants the
// lock to B, who sells; the holder, unaware, writes its stale read, and the
// fence refuses it.
func TestEtcdMinorityPartition(t *testing.T) {
	out, err := EtcdPartition(t.Context(), testkit.RealRedis(t).Addr(), etcdCluster(t), "etcd, minority partition")
	if err != nil {
		t.Fatal(err)
	}
	t.Log(out)
	if out.Verdict != api.VerdictOK || out.Sold != 1 {
		t.Errorf("verdict %s, sold %d; want OK, 1 sold (%s)", out.Verdict, out.Sold, out.Detail)
	}
}
