package server

import (
	"net"
	"net/http"

	"github.com/gin-gonic/gin"

	"seckill/internal/api"
	"seckill/internal/lock"
	"seckill/internal/order"
)

// labRoutes are the lab's own routes, apart from the shop's: the tables
// that explain the locks and the sale modes, and the load runs with their
// timelines. They share the edge's failure and decoding helpers.
type labRoutes struct {
	e    *edge
	runs Runs
}

// handleLocks serves the lock table itself: the page explains a strategy
// with the same text docs/LOCKS.md is generated from.
func (lr labRoutes) handleLocks(c *gin.Context) {
	var out []api.LockInfo
	for _, l := range lock.Strategies() {
		out = append(out, api.LockInfo{Name: l.Name, Summary: l.Summary, Fixes: l.Fixes, Breaks: l.Breaks, Commands: l.Commands, Test: l.Test})
	}
	c.JSON(http.StatusOK, out)
}

// handleModes serves the sale modes' table, as handleLocks the locks'.
func (lr labRoutes) handleModes(c *gin.Context) {
	var out []api.ModeInfo
	for _, m := range order.Modes() {
		out = append(out, api.ModeInfo{Name: m.Name, Short: m.Short, Summary: m.Summary, Promises: m.Promises, Breaks: m.Breaks,
			Store: string(m.Store()), Locked: m.Locked, Queued: m.Queued, Test: m.Command()})
	}
	c.JSON(http.StatusOK, out)
}

func (lr labRoutes) handleStartRun(c *gin.Context) {
	var spec api.RunSpec
	if err := lr.e.decode(c, &spec); err != nil {
		lr.e.failErr(c, err)
		return
	}
	// A student's run names its seat, which its queue places are counted
	// by: a seatless run, which no seat's limit counts, is the operator's.
	if spec.Seat == "" && !lr.e.isOperator(c) {
		lr.e.fail(c, http.StatusBadRequest, api.CodeBadRequest, "seat: a run started with the class token names its seat (the page sends it)")
		return
	}
	// The lab sends the run's orders back through this very listener unless
	// it is told otherwise.
	var self string
	if addr, ok := c.Request.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		self = "http://" + addr.String()
	}
	// The run resets its product with the operator's token, whichever of
	// the class's let the request through.
	run, err := lr.runs.Start(c.Request.Context(), spec, self, lr.e.adminToken)
	if err != nil {
		lr.e.failErr(c, err)
		return
	}
	c.Header("Location", "/api/runs/"+run.ID)
	c.JSON(http.StatusAccepted, run)
}

// handleRuns lists the runs: a seat's own (and the seatless) with ?seat=,
// everyone's without (the class's view), each as the caller may read it
// (readable).
func (lr labRoutes) handleRuns(c *gin.Context) {
	seat := c.Query("seat")
	runs := lr.runs.List(seat)
	for i := range runs {
		runs[i] = lr.readable(c, runs[i], seat)
	}
	c.JSON(http.StatusOK, runs)
}

func (lr labRoutes) handleRun(c *gin.Context) {
	run, err := lr.runs.Get(c.Param("id"))
	if err != nil {
		lr.e.failErr(c, err)
		return
	}
	c.JSON(http.StatusOK, lr.readable(c, run, c.Query("seat")))
}

// readable is run as the caller reads it. The run's own seat (?seat=) and
// the operator read it whole. A seat is a label that also keys a seat's
// answers and queue places, so the class token reads the student's name
// and not the seat; anyone else reads neither.
func (lr labRoutes) readable(c *gin.Context, run api.Run, seat string) api.Run {
	switch {
	case seat != "" && seat == run.Spec.Seat, lr.e.isOperator(c):
		return run
	case lr.e.inClass(c):
		run.Spec.Seat = ""
		return run
	default:
		return run.Unnamed()
	}
}

func (lr labRoutes) handleRunTimeline(c *gin.Context) {
	tl, err := lr.runs.Timeline(c.Param("id"))
	if err != nil {
		lr.e.failErr(c, err)
		return
	}
	c.JSON(http.StatusOK, tl)
}

// handleAnswer keeps a class seat's answer to a course lesson: the page
// sends it when a lesson's outcome is shown.
func (lr labRoutes) handleAnswer(c *gin.Context) {
	var a api.ClassAnswer
	if err := lr.e.decode(c, &a); err != nil {
		lr.e.failErr(c, err)
		return
	}
	kept, err := lr.runs.Answer(a)
	if err != nil {
		lr.e.failErr(c, err)
		return
	}
	c.JSON(http.StatusCreated, kept)
}

// handleLessons is the teacher's view: the class's answers by lesson.
func (lr labRoutes) handleLessons(c *gin.Context) { c.JSON(http.StatusOK, lr.runs.Lessons()) }
