package order

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"seckill/internal/api"
	"seckill/internal/catalogue"
	"seckill/internal/idgen"
	"seckill/internal/lock"
	"seckill/internal/stock"
	"seckill/internal/telemetry"
)

// ErrUnsettled: a purchase's outcome is unknown (a write was sent and no
// answer came back). Nothing is undone on a guess: the error is an
// *UnsettledError with the order id, and the reconciler settles it.
var ErrUnsettled = errors.New("order: outcome unknown")

// UnsettledError is ErrUnsettled for one order.
type UnsettledError struct {
	Order idgen.ID
	Err   error
}

func (e *UnsettledError) Error() string {
	return fmt.Sprintf("%v for order %s: %v", ErrUnsettled, e.Order, e.Err)
}

// Is makes errors.Is(err, ErrUnsettled) true.
func (e *UnsettledError) Is(target error) bool { return target == ErrUnsettled }

func (e *UnsettledError) Unwrap() error { return e.Err }

// errStale: the layout the purchase took from is no longer the product's
// (a reset or a rebuild), or its keys are gone. Buy reads the product again.
var errStale = errors.New("order: the product's layout changed during the purchase")

// LabOptions are a purchase's teaching knobs. They are honoured on lab
// products only (Product.Lab): on any other product they are ErrLabOnly,
// so that nobody can make a real sale oversell or stall.
type LabOptions struct {
	Lock, Mode string // "" uses the product's
	Faults     Faults
	// Trace, when not nil, records the purchase's critical sections.
	Trace *stock.Trace
}

func (o LabOptions) set() bool { return o != LabOptions{} }

// hooks are the take's: the faults', then the trace's (which so notes
// the COMMIT once the faults' hold before it is spent). Nil for a
// purchase without lab options, which pays nothing more.
func (o LabOptions) hooks() *stock.Hooks {
	if !o.set() {
		return nil
	}
	return stock.Compose(o.Faults.Hooks(), o.Trace.Hooks())
}

// Purchase is one buyer's request.
type Purchase struct {
	UserID, ProductID int64
	// Key identifies the purchase across retries (the client's
	// Idempotency-Key): a purchase with the key of an earlier one gets that
	// one's outcome. Up to MaxKeyLen characters among A–Z a–z 0–9 . _ : -.
	// Default: a key drawn for this purchase alone.
	Key string
	// Path is the purchase path token the product may ask for
	// (Product.Path): issued to the buyer for this product, spent here.
	Path string
	// Client is the address the purchase came from, for the per-address
	// limit (Options.PerAddress). Default: "", not limited by address (or
	// counted in it already: the server counts a purchase whose product it
	// had to read from SQL before that read).
	Client string
	Lab    LabOptions
}

func (in Purchase) check() error {
	invalid := func(msg string, a ...any) error { return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(msg, a...)) }
	switch {
	case in.UserID <= 0 || in.ProductID <= 0:
		return invalid("user_id and product_id must be positive integers")
	case in.Lab.Faults.Hold < 0 || in.Lab.Faults.Hold > MaxHold:
		return invalid("hold must be between 0 and %s", MaxHold)
	case in.Lab.Faults.Lock.ClockSkew < -MaxClockSkew || in.Lab.Faults.Lock.ClockSkew > MaxClockSkew:
		return invalid("clock skew must be within ±%s", MaxClockSkew)
	case len(in.Key) > MaxKeyLen:
		return invalid("the idempotency key must be at most %d characters", MaxKeyLen)
	}
	for _, c := range in.Key {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return invalid("the idempotency key may hold only letters, digits and . _ : -")
		}
	}
	return nil
}

// Receipt tells how a purchase went, whether or not it succeeded.
type Receipt struct {
	Lock, Mode string
	LockWait   time.Duration
	LeaseLost  bool // the lock had expired by the time it was released
	// Order is the id of the purchase's order: drawn for it, or the one an
	// earlier purchase with the same key or buyer holds.
	Order idgen.ID
	// Replayed: the purchase repeated an earlier one with the same key,
	// whose outcome it returns.
	Replayed bool
	// Queued: the order is queued (the async mode), not written yet.
	Queued bool
}

// plan is how one purchase takes its unit.
type plan struct {
	mode   Mode
	locker lock.Locker // locked modes only
	// retry: the client sent its own idempotency key (see sale.retry).
	retry bool
}

func (s *Service) plan(p catalogue.Product, in Purchase, rc *Receipt) (plan, error) {
	if in.Lab.set() && !p.Lab {
		return plan{}, fmt.Errorf("%w: product %d is sold under lock %s and mode %s; the lock, mode, hold_ms and fault options are for lab products",
			ErrLabOnly, p.ID, p.Lock, p.Mode)
	}
	rc.Lock, rc.Mode = cmp.Or(in.Lab.Lock, p.Lock), cmp.Or(in.Lab.Mode, p.Mode)
	mode, err := ModeNamed(rc.Mode)
	if err != nil {
		return plan{}, err
	}
	if err := p.Stock().Accepts(mode.Name, mode.Store()); err != nil {
		return plan{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := refuseFaults(mode, in.Lab); err != nil {
		return plan{}, err
	}
	if err := mode.seller.admit(s, in.Lab); err != nil {
		return plan{}, err
	}
	pl := plan{mode: mode, retry: in.Key != ""}
	if _, err := lock.Lookup(rc.Lock); err != nil {
		return plan{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if mode.Locked {
		if pl.locker, err = s.cat.Locker(rc.Lock); err != nil {
			return plan{}, err
		}
	}
	return pl, nil
}

// Buy sells one unit of a product to a user. Once it has begun, the
// purchase no longer follows ctx's cancellation — a client that hangs up
// must not strand a unit between the store and the orders — but it is
// bounded in time all the same (Budget.Purchase).
func (s *Service) Buy(ctx context.Context, in Purchase) (_ Order, rc Receipt, err error) {
	if err := in.check(); err != nil {
		return Order{}, rc, err
	}
	p, err := s.cat.Product(ctx, in.ProductID)
	if err != nil {
		return Order{}, rc, err
	}
	// The lab options are checked before anything costs a round trip, so
	// that bad input costs the buyer nothing.
	pl, err := s.plan(p, in, &rc)
	if err != nil {
		return Order{}, rc, err
	}
	if err := s.door.admit(ctx, p, in); err != nil {
		return Order{}, rc, err
	}
	if err := s.flight.enter(); err != nil {
		return Order{}, rc, err
	}
	defer s.flight.working.Done()
	// Shed past every refusal known cheaply, before anything is drawn or taken.
	done, err := s.door.shed(p)
	if err != nil {
		return Order{}, rc, err
	}
	defer func() { done(err) }()
	s.opt.Repairs.Touch(p.ID)

	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.Budget().Purchase())
	defer cancel()
	ctx, span := telemetry.Start(ctx, "order.buy")
	defer func() { endBuy(span, in, rc, err) }()
	var gen uint64 // the server changes the product was repaired after
	if p.Store == string(stock.InRedis) {
		if gen, err = s.opt.Repairs.AwaitRepair(ctx, p.ID); err != nil {
			return Order{}, rc, err
		}
	}
	ctx, t, err := s.ticket(ctx, p, in)
	if err != nil {
		return Order{}, rc, err
	}
	rc.Order = t.Order
	o, err := s.sellFresh(ctx, p, pl, in, t, gen, &rc)
	// The buyer is told of the order: counted once, by its first answer
	// (a replay's order was counted then). The mq mode's 202 is the
	// broker's to keep, and its audit counts no queue.
	if err == nil && !rc.Replayed && rc.Mode != api.ModeMQ {
		s.told.add(p.ID, o.Sale)
	}
	return o, rc, err
}

// ticket names the purchase of in: its key (the client's, or one made up),
// its order id, and the lock owner ctx now carries.
func (s *Service) ticket(ctx context.Context, p catalogue.Product, in Purchase) (context.Context, stock.Ticket, error) {
	key := cmp.Or(in.Key, rand.Text())
	// The purchase owns its locks: a retry of it (same buyer, same key)
	// re-enters a reentrant lock its first attempt still holds instead of
	// waiting for itself, and the take then finds that attempt's record.
	// The owner is the server's name for the purchase, never the client's
	// key alone: two buyers who send one key are two owners (issue 19).
	ctx = lock.WithOwner(ctx, purchaseOwner(p.ID, in.UserID, key))
	t := stock.Ticket{User: in.UserID, Key: key}
	// Drawn before the take in every mode, so that a take whose reply is
	// lost still names the order that will settle, and its retry the same.
	dctx, draw := telemetry.Start(ctx, "idgen.draw")
	var err error
	t.Order, err = s.ids.Next(dctx)
	telemetry.Fail(draw, err)
	draw.End()
	if err != nil {
		return ctx, t, fmt.Errorf("drawing an order id: %w", err)
	}
	return ctx, t, nil
}

// endBuy ends the purchase's span with what it came to.
func endBuy(span trace.Span, in Purchase, rc Receipt, err error) {
	if span.IsRecording() {
		span.SetAttributes(attribute.Int64("seckill.product_id", in.ProductID), attribute.Int64("seckill.user_id", in.UserID),
			attribute.String("seckill.mode", rc.Mode), attribute.String("seckill.lock", rc.Lock),
			attribute.String("seckill.order_id", rc.Order.String()), attribute.Bool("seckill.queued", rc.Queued))
		if err != nil {
			span.SetAttributes(attribute.String("seckill.refusal", err.Error()))
		}
	}
	span.End()
}

// sellFresh sells from the product's current layout: once more from the
// new one when a reset or a rebuild laid it out anew during the purchase.
func (s *Service) sellFresh(ctx context.Context, p catalogue.Product, pl plan, in Purchase, t stock.Ticket, gen uint64, rc *Receipt) (Order, error) {
	for attempt := 0; ; attempt++ {
		o, err := s.sell(ctx, p, pl, in.Lab, t, gen, rc)
		if !errors.Is(err, errStale) {
			return o, s.answer(ctx, p, err)
		}
		fresh, err := s.cat.Refresh(ctx, p.ID)
		if err != nil {
			return Order{}, err
		}
		if fresh.Epoch == p.Epoch {
			// The layout is current and its keys are gone: Redis lost them.
			s.cat.RebuildLater(fresh)
			return Order{}, fmt.Errorf("%w: product %d", ErrRebuilding, p.ID)
		}
		if attempt > 0 {
			return Order{}, fmt.Errorf("product %d was laid out anew twice during one purchase; nothing was sold", p.ID)
		}
		// Reset (a new sale) or rebuilt: sell from the new layout, in
		// the new sale's window.
		p = fresh
		if err := s.door.window(p); err != nil {
			return Order{}, err
		}
		if pl, err = s.plan(p, in, rc); err != nil {
			return Order{}, err
		}
	}
}

// purchaseOwner is the lock owner of a purchase: the key is scoped to its
// buyer and product, as the take's record is (the ledger and the buyer's key
// hold one record per buyer, and resume compares keys within it). Ids hold no
// ':', so two triples never give one name.
func purchaseOwner(product, user int64, key string) string {
	return "purchase:" + strconv.FormatInt(product, 10) + ":" + strconv.FormatInt(user, 10) + ":" + key
}

// sell takes a unit for t and writes its order, as the plan's mode does;
// gen is what Repairs.AwaitRepair returned.
func (s *Service) sell(ctx context.Context, p catalogue.Product, pl plan, lab LabOptions, t stock.Ticket, gen uint64, rc *Receipt) (Order, error) {
	locked := s.locked(pl.locker, lab)
	req := stock.Request{Product: p.Stock(), Ticket: t, Taker: pl.mode.taker(locked, nil), Hooks: lab.hooks()}
	return pl.mode.seller.sell(ctx, s, sale{p: p, mode: pl.mode, locked: locked, req: req, lab: lab, gen: gen, retry: pl.retry}, rc)
}

// takeInRedis takes the unit in Redis, for the modes whose stock is there,
// and hands it to then. What the take found instead of a unit it settles
// itself: the buyer's earlier take (its order is found or written), the
// product sold out, the layout gone.
func (s *Service) takeInRedis(ctx context.Context, sl sale, rc *Receipt,
	then func(context.Context, sale, stock.Taken, *Receipt) (Order, error)) (Order, error) {
	tctx, span := telemetry.Start(ctx, "stock.take")
	taken, err := s.take(tctx, sl.req)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("seckill.order_id", sl.req.Ticket.Order.String()), attribute.String("seckill.mode", sl.mode.Name),
			attribute.Int("seckill.shard", taken.Shard), attribute.Int64("seckill.lock_wait_us", taken.LockWait.Microseconds()))
		if err != nil {
			span.SetAttributes(attribute.String("seckill.refusal", err.Error()))
		}
	}
	span.End()
	rc.LockWait += taken.LockWait
	rc.LeaseLost = rc.LeaseLost || taken.LeaseLost
	var before *stock.TakenBefore
	switch {
	case errors.As(err, &before):
		return s.resume(ctx, sl.p, sl.req, before.Prior, rc)
	case errors.Is(err, stock.ErrSoldOut) && sl.retry:
		// The sold-out flag and an empty shard answer before the buyer's
		// record is read: a retry whose first attempt took a unit must get
		// that outcome, not "sold out". Only retries pay this round trip.
		if prior, found, ferr := s.stock.Ledgers().FindTake(ctx, sl.p.Stock().Layout, sl.req.Ticket.User); ferr == nil && found {
			return s.resume(ctx, sl.p, sl.req, prior, rc)
		}
		return Order{}, err
	case errors.Is(err, stock.ErrNotLaidOut):
		return Order{}, errStale
	case err != nil:
		return Order{}, err
	}
	if taken.ReleaseErr != nil {
		s.log.WarnContext(ctx, "the lock was not released after the unit was taken; it will expire",
			"product", sl.p.ID, "shard", taken.Shard, "error", taken.ReleaseErr)
	}
	return then(ctx, sl, taken, rc)
}

// keep decides whether a unit taken in Redis goes on to its order. The
// take may have run on a server that forgot takes not restored yet, and
// taken one of their units: it goes back, unsold. The lab's crash stops
// the purchase here, as a process that died here would: no order, no
// give-back.
func (s *Service) keep(ctx context.Context, sl sale, taken stock.Taken) error {
	if s.opt.Repairs.ChangedSince(sl.gen) {
		if err := s.returns.giveBack(ctx, sl.req, taken.Entry, "Redis changed during the take"); err != nil {
			// The take may stand: "rebuilding" would tell the buyer that
			// nothing was sold. Its order is unsettled, and its mark lets
			// the reconciler return it without the grace.
			return &UnsettledError{Order: taken.Entry.Order,
				Err: fmt.Errorf("product %d: its Redis changed during the purchase, and the unit taken could not be given back: %w", sl.p.ID, err)}
		}
		return fmt.Errorf("%w: product %d: its Redis changed during the purchase", ErrRebuilding, sl.p.ID)
	}
	if sl.lab.Faults.CrashAfterTake {
		return fmt.Errorf("%w: order %s of product %d", ErrCrashed, sl.req.Ticket.Order, sl.p.ID)
	}
	return nil
}

// recordTaken writes the order of a unit taken in Redis.
func (s *Service) recordTaken(ctx context.Context, sl sale, taken stock.Taken, rc *Receipt) (Order, error) {
	if err := s.keep(ctx, sl, taken); err != nil {
		return Order{}, err
	}
	return s.record(ctx, sl.p, sl.req, taken.Entry, rc)
}

// take runs the take, and once more if its outcome is unknown: the take is
// idempotent, so the second run either takes or finds the first one's record.
func (s *Service) take(ctx context.Context, req stock.Request) (stock.Taken, error) {
	var waited time.Duration
	for try := 0; ; try++ {
		tctx, cancel := context.WithTimeout(ctx, s.Budget().Take())
		taken, err := s.stock.Take(tctx, req)
		cancel()
		waited += taken.LockWait
		taken.LockWait = waited
		if errors.Is(err, stock.ErrNotReplicated) {
			// Taken on the master only: a failover now would lose it. Not
			// tried again (it waited already); the reconciler settles it.
			return taken, &UnsettledError{Order: cmp.Or(taken.Order, req.Ticket.Order), Err: err}
		}
		if !errors.Is(err, stock.ErrOutcomeUnknown) {
			return taken, err
		}
		if try == 1 {
			return taken, &UnsettledError{Order: req.Ticket.Order, Err: err}
		}
	}
}

// resume finishes a purchase whose buyer took a unit already: the same
// purchase retried (same key), or another purchase of the same buyer. An
// earlier take without its order (still in flight, or given up) is written
// now, as it would have been.
func (s *Service) resume(ctx context.Context, p catalogue.Product, req stock.Request, prior stock.Entry, rc *Receipt) (Order, error) {
	rc.Order = prior.Order
	same := prior.Key == req.Ticket.Key
	o, found, err := find(ctx, s.db, prior.Order)
	switch {
	case err != nil:
		return Order{}, err
	case found && o.Live() && same:
		rc.Replayed = true
		return o, nil
	case found && o.Live():
		return Order{}, &stock.TakenBefore{Prior: prior}
	case found:
		return Order{}, &UnsettledError{Order: prior.Order,
			Err: errors.New("an earlier purchase of this buyer was voided and its unit is going back; try again shortly")}
	}
	// Queued (the async mode): the consumer writes it.
	if q, queued, err := s.queue.queued(ctx, prior.Order); err != nil {
		return Order{}, err
	} else if queued {
		rc.Queued = true
		if same {
			rc.Replayed = true
			return q, nil
		}
		return Order{}, &stock.TakenBefore{Prior: prior}
	}
	req.Ticket = stock.Ticket{User: req.Ticket.User, Order: prior.Order, Key: prior.Key}
	if o, err = s.record(ctx, p, req, prior, rc); err != nil {
		return Order{}, err
	}
	if same {
		rc.Replayed = true
		return o, nil
	}
	return Order{}, &stock.TakenBefore{Prior: prior}
}

// queuedView is the order an async take queued, as the API shows it until
// the consumer writes it.
func queuedView(p catalogue.Product, e stock.Entry, rc *Receipt) Order {
	at := e.At
	return Order{ID: e.Order, ProductID: p.ID, Sale: p.Sale, UserID: e.User, Shard: e.Shard,
		Lock: rc.Lock, Mode: rc.Mode, Status: Pending, Key: e.Key, AcceptedAt: &at, CreatedAt: at}
}
