package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"seckill/internal/api"
	"seckill/internal/catalogue"
	"seckill/internal/idgen"
	"seckill/internal/lab/harness"
	"seckill/internal/order"
	"seckill/internal/outbox"
	"seckill/internal/reconcile"
	"seckill/internal/session"
	"seckill/internal/stock"
)

// ceilingTarget is what the lua mode through HTTP should reach: this share
// of the requests per second of a bare Gin handler doing one EVALSHA of the
// same script, on the same machine, in the same run.
const ceilingTarget = 0.70

// writesTarget is what the async mode should reach with its consumers
// running beside it, its orders written: this share of the same bare
// handler's requests per second (issue 22, item 5).
const writesTarget = 0.50

// bareLevel is how much of a purchase a bare handler does, each level
// adding one step to the one before: the script, then the order id, then
// the order row.
type bareLevel int

const (
	evalOnly   bareLevel = iota // one EVALSHA of the lua mode's script
	evalIncr                    // and one INCR, the round trip of drawing an order id
	evalInsert                  // and one INSERT of the order into SQL
)

// bareLevels name the levels and give their routes' prefixes.
var bareLevels = []struct {
	name, prefix string
}{
	evalOnly:   {"bare EVALSHA", ""},
	evalIncr:   {"bare EVALSHA+INCR", "/incr"},
	evalInsert: {"bare +INCR+INSERT", "/insert"},
}

// bareOrder is the bare handlers' request: the fields the service reads.
type bareOrder struct {
	UserID    int64 `json:"user_id"`
	ProductID int64 `json:"product_id"`
}

// bareHandler is Gin with no middleware: POST {prefix}/api/orders binds the
// body and runs its level's steps on shard 0 of the product. Nothing else:
// no product lookup, no lock, no fallback, no metrics. The order ids are
// product<<20 + an INCR of idKey, apart from any id the service draws.
// POST /refuse/api/orders binds the body and answers 409 sold_out.
func bareHandler(rdb redis.Cmdable, db *gorm.DB, idKey string) http.Handler {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	take := func(c *gin.Context, level bareLevel) {
		var in bareOrder
		if err := c.ShouldBindJSON(&in); err != nil {
			c.JSON(http.StatusBadRequest, api.Error{Code: api.CodeBadRequest, Error: err.Error()})
			return
		}
		ctx := c.Request.Context()
		l := stock.Layout{ID: in.ProductID, Shards: 1, Epoch: 1}
		keys := []string{l.StockKey(0), l.LedgerKey(0), l.BuyerKey(in.UserID)}
		// The record the service writes: order key shard millis.
		rec := "0 bare 0 " + strconv.FormatInt(time.Now().UnixMilli(), 10)
		res, err := stock.TakeScript().Run(ctx, rdb, keys, in.UserID, rec).Slice()
		var n int64
		if err == nil {
			n, _ = res[0].(int64)
		}
		user := in.UserID
		o := order.Order{ProductID: in.ProductID, Sale: 1, Buyer: &user, UserID: user, Lock: "none", Mode: api.ModeLua,
			Status: order.Unpaid, Key: "bare"}
		if err == nil && n == 1 && level >= evalIncr {
			var seq int64
			seq, err = rdb.Incr(ctx, idKey).Result()
			o.ID = idgen.ID(in.ProductID<<20 + seq)
		}
		if err == nil && n == 1 && level >= evalInsert {
			err = db.WithContext(ctx).Create(&o).Error
		}
		switch {
		case err != nil:
			c.JSON(http.StatusInternalServerError, api.Error{Code: api.CodeInternal, Error: err.Error()})
		case n == 1:
			c.JSON(http.StatusCreated, o)
		case n == 0:
			c.JSON(http.StatusConflict, api.Error{Code: api.CodeSoldOut, Error: "sold out"})
		default:
			c.JSON(http.StatusConflict, api.Error{Code: api.CodeAlreadyBought, Error: "already bought"})
		}
	}
	for level, l := range bareLevels {
		r.POST(l.prefix+"/api/orders", func(c *gin.Context) { take(c, bareLevel(level)) })
	}
	r.POST(bareRefusePrefix+"/api/orders", bareRefuse)
	return r
}

// serveLoopback serves h on a free loopback port until stop is called.
func serveLoopback(h http.Handler) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("listening for the bare handler: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // returns ErrServerClosed on Close
	}()
	return "http://" + ln.Addr().String(), func() { srv.Close(); <-done }, nil
}

// ceilingSide is one of the compared paths and its rounds' throughputs.
type ceilingSide struct {
	name string
	mode string // a service side's mode; "" for a bare handler
	// writes: the async mode with its consumers running during the load,
	// its rate counted until the last order is written.
	writes bool
	target float64 // a service side's share of the bare EVALSHA handler's rate
	rps    []float64
	// loadRPS are a writes side's req/s during the load alone (its rps
	// count until the last row).
	loadRPS []float64
}

// drainTarget is what the async mode's consumers should write per second:
// this many times the orders per second of the lua mode, which writes each
// order synchronously, in the same run.
const drainTarget = 3.0

// ceilingModes are the service's modes -ceiling measures: -mode when given
// (lua and async only: the modes with no lock), else both.
func ceilingModes(o options) ([]string, error) {
	if !o.set["mode"] {
		return []string{api.ModeLua, api.ModeAsync}, nil
	}
	modes := strings.Split(o.modes, ",")
	for _, m := range modes {
		if m != api.ModeLua && m != api.ModeAsync {
			return nil, fmt.Errorf("-ceiling measures the lua and async modes, not %q", m)
		}
	}
	return modes, nil
}

// luaCeiling compares the lua mode through the service with bare Gin
// handlers doing only part of its work, on the same Redis and database, at
// the same concurrency, in alternating rounds so that a machine shared with
// other work loads every side alike; it reports the ratios of the medians.
// Each round buys a fresh product whose stock outlasts the round, with
// distinct buyers, so that every request takes a unit (the script's longest
// path). Unless -ceiling-refusals=false, each round also sends signed-in
// buyers' purchases of a sold-out product to the service and to a bare
// handler answering a constant 409.
func luaCeiling(ctx context.Context, o options, getenv func(string) string, stdout, stderr io.Writer) error {
	_, err := measureCeiling(ctx, o, getenv, stdout, stderr)
	return err
}

// measureCeiling is luaCeiling, returning what it measured.
func measureCeiling(ctx context.Context, o options, getenv func(string) string, stdout, stderr io.Writer) (*ceilingRun, error) {
	cfg, err := serviceConfig(getenv, o.lockTTL, o.lockWait, o.spec.AdminToken)
	if err != nil {
		return nil, err
	}
	if len(cfg.RedisCluster) > 0 {
		// Its bare handlers run one script over the shard and the buyer,
		// which a cluster refuses (CROSSSLOT): they measure one Redis.
		return nil, fmt.Errorf("-ceiling measures the service against bare handlers on one Redis; unset REDIS_CLUSTER (%s)", strings.Join(cfg.RedisCluster, ","))
	}
	modes, err := ceilingModes(o)
	if err != nil {
		return nil, err
	}
	// The async side times its consumers itself (asyncCeiling).
	cfg.Consume = false
	c, err := startCluster(ctx, 1, clusterNeeds{}, cfg, stderr)
	if err != nil {
		return nil, err
	}
	defer func() {
		if serr := c.stop(); serr != nil {
			fmt.Fprintln(stderr, "loadtest: stopping the service:", serr)
		}
	}()
	// The service's own clients: the same pools on every side.
	r := &ceilingRun{c: c, rdb: c.first.Redis()}
	db := c.first.DB()
	product := o.spec.ProductID
	if product == 0 {
		product = 1_000_000 + rand.Int64N(1_000_000_000)
	}
	idKey := fmt.Sprintf("seckill:ceiling:id:%d", product)
	defer r.cleanUp(ctx, db, idKey, stderr) // runs before c.stop: the clients are still open
	bare, stop, err := serveLoopback(bareHandler(r.rdb, db, idKey))
	if err != nil {
		return nil, err
	}
	defer stop()
	r.bare = bare

	r.client = harness.NewClient(1)
	defer r.client.CloseIdleConnections()
	rep := harness.Report{
		Title:   "seckill lua ceiling",
		Started: time.Now().UTC(),
		Machine: harness.DetectMachine(ctx, r.client, c.URLs),
	}
	for _, l := range rep.MachineLines() {
		fmt.Fprintln(stdout, l)
	}
	conc := o.spec.Concurrency
	fmt.Fprintf(stdout, "lua ceiling: %d connections, %d rounds of %s, %d CPUs; service %s, bare Gin handlers %s\n",
		conc, o.selfRounds, o.selfDur, runtime.NumCPU(), c.URLs[0], bare)

	r.sides, r.services = ceilingSides(modes)
	// The async mode's consumers, from its first 202 to its last row: the
	// queue is never empty meanwhile (acceptance outruns the writes), so
	// this is what the consumers write per second.
	r.drained = ceilingSide{name: "async drain"}
	load := harness.Spec{
		Stock: catalogue.MaxStock, Buyers: 1 << 30, Concurrency: conc, Lock: "none",
		Duration: harness.Duration(o.selfDur), Timeout: harness.Duration(o.selfDur + time.Minute),
		AdminToken: c.first.Config.AdminToken,
	}
	if o.refusals {
		// The product after every round's.
		id := product + int64(o.selfRounds*len(r.sides))
		if r.refusals, err = r.prepareRefusals(ctx, id, load.AdminToken, stderr); err != nil {
			return nil, err
		}
	}
	for round := range o.selfRounds {
		for i := range r.sides {
			s := load
			s.ProductID = product + int64(round*len(r.sides)+i)
			if err := r.round(ctx, stdout, round, i, s); err != nil {
				return nil, err
			}
		}
		if r.refusals != nil {
			if err := r.refusalRound(ctx, stdout, round, load); err != nil {
				return nil, err
			}
		}
	}
	if err := r.printMedians(stdout, o.selfRounds); err != nil {
		return nil, err
	}
	printCeilingNotes(stdout, rep.Machine.SQL)
	if r.refusals != nil {
		r.refusals.note(stdout)
	}
	return r, nil
}

// ceilingRun is one -ceiling measurement: the service, the bare handlers
// beside it, and every side's rates so far.
type ceilingRun struct {
	c        *cluster
	rdb      redis.UniversalClient
	client   *http.Client
	bare     string // the bare handlers' base URL
	sides    []ceilingSide
	services int // sides[:services] are the service's modes, the rest the bare levels
	drained  ceilingSide
	// What the run stocked and sold, deleted at the end: the bare
	// handlers' keys, and every side's product.
	bareKeys []string
	products []int64
	accounts []int64 // the buyers signed in for the refusals
	// refusals are the sold-out refusals' sides; nil when skipped.
	refusals *refusals
}

// ceilingSides are a side per service mode, then one per bare level.
func ceilingSides(modes []string) (sides []ceilingSide, services int) {
	for _, m := range modes {
		sides = append(sides, ceilingSide{name: "service " + m, mode: m, target: ceilingTarget})
		if m == api.ModeAsync {
			sides = append(sides, ceilingSide{name: "service async+writes", mode: m, writes: true, target: writesTarget})
		}
	}
	services = len(sides)
	for _, l := range bareLevels {
		sides = append(sides, ceilingSide{name: l.name})
	}
	return sides, services
}

// cleanUp deletes the keys and orders of every product the run sold: the
// service's sides leave a buyer key per request (tens of thousands a
// round), which would otherwise stay in Redis for good; and the marks of
// the accounts it made, which would stay a day.
func (r *ceilingRun) cleanUp(ctx context.Context, db *gorm.DB, idKey string, stderr io.Writer) {
	cctx := context.WithoutCancel(ctx)
	keys := append(append(r.bareKeys, idKey), session.MarkKeys(r.accounts...)...)
	var extra []string // the reconciler's keys: the service's passes leave them
	for _, p := range r.products {
		extra = append(extra, reconcile.ProductKeys(p)...)
	}
	err := errors.Join(r.rdb.Unlink(cctx, keys...).Err(), stock.Purge(cctx, r.rdb, r.products, extra...))
	if err != nil {
		fmt.Fprintln(stderr, "loadtest: deleting the run's keys:", err)
	}
	if len(r.products) > 0 {
		if err := db.WithContext(cctx).Where("product_id IN ?", r.products).Delete(&order.Order{}).Error; err != nil {
			fmt.Fprintln(stderr, "loadtest: deleting the run's orders:", err)
		}
	}
}

// round drives side i for one round on s's product, records its rate and
// prints it. Every request must take a unit, or the comparison is void.
func (r *ceilingRun) round(ctx context.Context, stdout io.Writer, round, i int, s harness.Spec) error {
	if i >= r.services {
		if err := r.stockBare(ctx, &s); err != nil {
			return err
		}
	} else {
		r.products = append(r.products, s.ProductID)
	}
	row, rate, err := r.drive(ctx, i, s)
	if err != nil {
		return fmt.Errorf("round %d, %s: %w", round+1, r.sides[i].name, err)
	}
	if row.OK != row.Requests {
		return fmt.Errorf("round %d, %s: %d of %d requests did not take a unit (%v): the comparison needs every one to",
			round+1, r.sides[i].name, row.Requests-row.OK, row.Requests, row.ErrorSamples)
	}
	r.sides[i].rps = append(r.sides[i].rps, rate)
	if r.sides[i].writes {
		r.sides[i].loadRPS = append(r.sides[i].loadRPS, row.RPS)
	}
	extra := ""
	if row.Verdict != "" {
		extra = ", verdict " + row.Verdict
	}
	switch {
	case r.sides[i].writes:
		extra += fmt.Sprintf("; the consumers running, the last of its %d rows %.2fs after the load: %.0f orders/s answered and written",
			row.Sold, row.DrainS, rate)
	case r.sides[i].mode == api.ModeAsync:
		extra += fmt.Sprintf("; then the consumers alone wrote %d rows in %.2fs: %.0f orders/s",
			row.Sold, row.DrainS, r.drained.rps[len(r.drained.rps)-1])
	}
	fmt.Fprintf(stdout, "round %d %-27s %6.0f req/s (%d requests, p50 %.2fms, p99 %.2fms%s)\n",
		round+1, r.sides[i].name+":", row.RPS, row.Requests, row.P50MS, row.P99MS, extra)
	return nil
}

// stockBare stocks s's product for a bare handler, in the lua mode's keys.
func (r *ceilingRun) stockBare(ctx context.Context, s *harness.Spec) error {
	s.Mode = api.ModeLua
	l := stock.Layout{ID: s.ProductID, Shards: 1, Epoch: 1}
	keys := []string{l.StockKey(0), l.LedgerKey(0)}
	r.bareKeys = append(r.bareKeys, keys...)
	r.products = append(r.products, s.ProductID)
	if err := r.rdb.Set(ctx, keys[0], s.Stock, 0).Err(); err != nil {
		return fmt.Errorf("stocking the bare handlers' product: %w", err)
	}
	return nil
}

// drive runs side i's load and returns its row and its rate: the async
// mode with its consumers running (the rate counts until the last row), or
// in its two parts (the 202s' rate); another mode through the service's
// whole purchase (reset, drive, audit), a bare level on its handler.
func (r *ceilingRun) drive(ctx context.Context, i int, s harness.Spec) (harness.Row, float64, error) {
	var row harness.Row
	var err error
	switch {
	case r.sides[i].writes: // 202s and their rows, the consumers running
		s.Targets, s.Mode = r.c.URLs, r.sides[i].mode
		return asyncWithWrites(ctx, r.c, s, r.client)
	case r.sides[i].mode == api.ModeAsync: // 202s with the consumers stopped, then the drain alone
		s.Targets, s.Mode = r.c.URLs, r.sides[i].mode
		var drained float64
		row, drained, err = asyncCeiling(ctx, r.c, s, r.client)
		if err == nil {
			r.drained.rps = append(r.drained.rps, drained)
		}
	case i < r.services: // reset, drive, audit: the service's whole purchase
		s.Targets, s.Mode = r.c.URLs, r.sides[i].mode
		row, err = harness.Run(ctx, s, nil)
	default:
		s.Targets = []string{r.bare + bareLevels[i-r.services].prefix}
		row, err = harness.Drive(ctx, s, nil)
	}
	return row, row.RPS, err
}

// printMedians prints each side's median rate over the rounds, a bare
// level's against every service mode, and the async drain's against the
// lua mode's synchronous writes.
func (r *ceilingRun) printMedians(stdout io.Writer, rounds int) error {
	fmt.Fprintf(stdout, "medians over %d rounds:\n", rounds)
	ratios := func(name string, v, bare float64) string {
		return fmt.Sprintf("%s / this = %.0f%%", name, 100*v/bare)
	}
	for i, sd := range r.sides {
		m := harness.Median(sd.rps)
		if i < r.services {
			unit := "req/s"
			if sd.writes {
				unit = fmt.Sprintf("orders/s answered and written (%.0f req/s during the load alone)", harness.Median(sd.loadRPS))
			}
			fmt.Fprintf(stdout, "  %-26s %6.0f %s\n", sd.name, m, unit)
			continue
		}
		if m == 0 {
			return errors.New("a bare handler served nothing")
		}
		line := fmt.Sprintf("  %-26s %6.0f req/s;", sd.name, m)
		for _, svc := range r.sides[:r.services] {
			line += " " + ratios(svc.name, harness.Median(svc.rps), m)
			if bareLevel(i-r.services) == evalOnly {
				target := "meets"
				if harness.Median(svc.rps) < svc.target*m {
					target = "BELOW"
				}
				line += fmt.Sprintf(" (%s the %.0f%% target)", target, 100*svc.target)
			}
			line += ";"
		}
		fmt.Fprintln(stdout, strings.TrimSuffix(line, ";"))
	}
	if len(r.drained.rps) > 0 {
		d := harness.Median(r.drained.rps)
		line := fmt.Sprintf("  %-26s %6.0f orders/s written by the consumers", r.drained.name, d)
		for _, svc := range r.sides[:r.services] {
			if svc.mode == api.ModeLua && harness.Median(svc.rps) > 0 {
				lua := harness.Median(svc.rps)
				target := "meets"
				if d < drainTarget*lua {
					target = "BELOW"
				}
				line += fmt.Sprintf("; = %.2f× the lua mode's synchronous writes (%s the %.0f× target)", d/lua, target, drainTarget)
			}
		}
		fmt.Fprintln(stdout, line)
	}
	if r.refusals != nil {
		return r.refusals.print(stdout)
	}
	return nil
}

// printCeilingNotes says what the comparison leaves out.
func printCeilingNotes(stdout io.Writer, sql string) {
	fmt.Fprintf(stdout, "note: the service's lua purchase also reads the product (cached in the process), draws an order id "+
		"(one EVALSHA of a script around HINCRBY, within a block of ids reserved in SQL) and inserts the order into SQL (%s), behind its recovery, metrics and "+
		"body-limit middleware; bare EVALSHA does none of that, +INCR adds the id's round trip, +INSERT the order row.\n",
		sql)
	fmt.Fprintln(stdout, "note: the service async side's 202s are sent with no consumer running (the orders pile up in the streams); "+
		"then one consumer (batches of 200, one transaction each) writes them alone, timed from its start to the last row.")
	fmt.Fprintln(stdout, "note: service async+writes runs that consumer in this process during the load, INSERTing into the same "+
		"database, and counts its 202s over the time from the first request to the last order written.")
}

// drainBound bounds the wait for the consumers to drain a round's orders.
const drainBound = 2 * time.Minute

// asyncCeiling measures the async mode in two parts that do not share the
// CPU: the 202s, with no consumer running (the orders pile up in the
// streams), then a consumer of this process alone writing them, timed from
// its start to the last row. row.DrainS is that time, row.Sold the rows.
func asyncCeiling(ctx context.Context, c *cluster, s harness.Spec, client *http.Client) (harness.Row, float64, error) {
	if err := resetProduct(ctx, client, s.Targets[0], s.ProductID, s.Stock, s.Mode, s.AdminToken); err != nil {
		return harness.Row{}, 0, err
	}
	row, err := harness.Drive(ctx, s, nil)
	if err != nil {
		return row, 0, err
	}
	cons := startConsumer(c)
	defer cons.Close()
	start := time.Now()
	if err := awaitDrain(ctx, c, s.ProductID, &row); err != nil {
		return row, 0, err
	}
	row.DrainS = time.Since(start).Seconds()
	return row, float64(row.Sold) / row.DrainS, nil
}

// asyncWithWrites measures the async mode as a sale runs it: its consumer
// running in this process during the load, INSERTing into the same
// database, and the rate the 202s over the time from the first request to
// the last row. row.DrainS is the wait for the rows after the load.
func asyncWithWrites(ctx context.Context, c *cluster, s harness.Spec, client *http.Client) (harness.Row, float64, error) {
	if err := resetProduct(ctx, client, s.Targets[0], s.ProductID, s.Stock, s.Mode, s.AdminToken); err != nil {
		return harness.Row{}, 0, err
	}
	cons := startConsumer(c)
	defer cons.Close()
	start := time.Now()
	row, err := harness.Drive(ctx, s, nil)
	if err != nil {
		return row, 0, err
	}
	loaded := time.Now()
	if err := awaitDrain(ctx, c, s.ProductID, &row); err != nil {
		return row, 0, err
	}
	row.DrainS = time.Since(loaded).Seconds()
	return row, float64(row.OK) / time.Since(start).Seconds(), nil
}

// startConsumer starts a consumer of the async mode's orders in this
// process, as the service runs one (app.Start with Config.Consume).
func startConsumer(c *cluster) *outbox.Consumer {
	cons := order.NewConsumer(c.first.DB(), c.first.Orders, outbox.Options{ClaimIdle: c.first.Config.ClaimIdle, Log: slog.New(slog.DiscardHandler)})
	cons.Start()
	return cons
}

// awaitDrain polls the product's audit until its queue is empty and it
// counts row.OK orders at least, within drainBound; it sets row.Sold and
// row.Verdict from the audit.
func awaitDrain(ctx context.Context, c *cluster, product int64, row *harness.Row) error {
	start := time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		_, a, err := c.first.Reconciler.Audit(ctx, product)
		if err != nil {
			return fmt.Errorf("auditing product %d during the drain: %w", product, err)
		}
		if a.Queued == 0 && a.Orders >= row.OK {
			row.Sold = a.Orders
			row.Verdict = harness.Safe
			if a.Verdict != api.VerdictOK || a.Orders != row.OK {
				row.Verdict = fmt.Sprintf("%s (%d orders for %d 202s)", a.Verdict, a.Orders, row.OK)
			}
			return nil
		}
		if time.Since(start) > drainBound {
			return fmt.Errorf("the consumers did not drain product %d within %s: %+v", product, drainBound, a)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
