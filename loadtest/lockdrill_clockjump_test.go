package main

import (
	"testing"
	"time"

	"seckill/internal/api"
	"seckill/internal/testkit"
)

// clockJumpNodes returns n Redlock nodes whose first one's clock can jump:
// an embedded Redis, since a redis-server cannot be given a clock of its
// own here (see embedded.Redis.JumpClock); the others are redis-server
// processes when one is on PATH.
func clockJumpNodes(t *testing.T, n int) (ClockJump, *testkit.RedisServer) {
	jumper := testkit.NewEmbeddedRedis(t)
	servers := append([]*testkit.RedisServer{jumper}, testkit.RedisNodes(t, n-1)...)
	return ClockJump{StoreAddr: testkit.RealRedis(t).Addr(), Nodes: testkit.RedisClients(servers)}, jumper
}

// TestRedlockClockJump is Kleppmann's counter-example: A holds a bare
// majority, the one node both majorities share has its clock jump, and B
// gets a majority of its own while A's lease is valid by A's clock. Both
// sell the one unit. More nodes do not help (the shared node is still one),
// a fence on the store does.
func TestRedlockClockJump(t *testing.T) {
	for _, tc := range []struct {
		variant string
		nodes   int
		jump    bool
		fence   bool
		want    string
	}{
		{"5 nodes, clocks steady", 5, false, false, api.VerdictOK},
		{"5 nodes, one clock jumps", 5, true, false, api.VerdictOversold},
		{"7 nodes, one clock jumps", 7, true, false, api.VerdictOversold},
		{"5 nodes, one jumps, fenced store", 5, true, true, api.VerdictOK},
	} {
		t.Run(tc.variant, func(t *testing.T) {
			c, jumper := clockJumpNodes(t, tc.nodes)
			if tc.jump {
				c.Jump = func(d time.Duration) { jumper.JumpClock(t, d) }
			}
			c.Fence = tc.fence
			out, err := c.Run(t.Context(), tc.variant)
			if err != nil {
				t.Fatal(err)
			}
			t.Log(out)
			if out.Verdict != tc.want {
				t.Errorf("verdict %s, want %s (%s)", out.Verdict, tc.want, out.Detail)
			}
			if want := map[string]int{api.VerdictOK: 1, api.VerdictOversold: 2}[tc.want]; out.Sold != want {
				t.Errorf("sold %d, want %d", out.Sold, want)
			}
		})
	}
}
