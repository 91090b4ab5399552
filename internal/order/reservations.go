package order

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"seckill/internal/catalogue"
)

var (
	// ErrNotReserved: the product sells only to buyers who reserved it
	// before its opening (catalogue.Product.Reservation), and this one
	// did not.
	ErrNotReserved = errors.New("order: no reservation for this sale")
	// ErrReservationClosed: reserving ends when the sale starts.
	ErrReservationClosed = errors.New("order: reservations are closed")
	// ErrNoReservation: the product takes no reservations.
	ErrNoReservation = errors.New("order: the product takes no reservations")
)

// ClockSkew bounds how far apart the clocks of the service's instances
// may be. A reservation is kept only if its write ends while the instance
// that takes it reads a time before the opening, so one instance may still
// take one for up to ClockSkew after another's clock passed the opening:
// until then, a purchase by a buyer missing from the reservations read at
// the opening reads its buyer's row; after it, none does (see
// reservations.check).
const ClockSkew = time.Second

// reservation is one buyer's reservation of a product. It is the
// product's, not one sale's: a reset keeps it, so that the operator may
// size the sale from the count and start it again before the opening.
type reservation struct {
	ProductID int64     `gorm:"primaryKey;autoIncrement:false"`
	UserID    int64     `gorm:"primaryKey;autoIncrement:false"`
	CreatedAt time.Time `gorm:"not null"`
}

// Reserved is a buyer's reservation, stored, and the product's count.
type Reserved struct {
	Product, Buyer int64
	At             time.Time
	// Created: this call stored it; false when the buyer had reserved.
	Created bool
	Count   int64
}

// reservations keeps the reservations in SQL, which every instance reads,
// and, per product, the set of its buyers read once reserving has ended
// everywhere, which a purchase checks without a round trip.
type reservations struct {
	db  *gorm.DB
	now func() time.Time
	mu  sync.Mutex
	// closed holds, per product, the buyers who reserved it for its
	// opening: read at the opening, and again ClockSkew after it.
	closed map[int64]*reservedSet
}

// reservedSet is the buyers who reserved a product for the opening at
// starts: loaded once, then read without a lock.
type reservedSet struct {
	starts time.Time
	final  bool       // read ClockSkew after the opening, when none is taken any longer
	load   sync.Mutex // held while loading
	buyers atomic.Pointer[map[int64]struct{}]
}

func newReservations(db *gorm.DB, now func() time.Time) *reservations {
	return &reservations{db: db, now: now, closed: make(map[int64]*reservedSet)}
}

// reserve stores buyer's reservation of p, once: a second call finds it
// and stores nothing. The answer comes after the row is written.
func (r *reservations) reserve(ctx context.Context, p catalogue.Product, buyer int64) (Reserved, error) {
	now := r.now()
	switch {
	case !p.Reservation:
		return Reserved{}, fmt.Errorf("%w: product %d sells to every buyer from its opening", ErrNoReservation, p.ID)
	case p.StartsAt == nil || !now.Before(*p.StartsAt):
		return Reserved{}, fmt.Errorf("%w: product %d's reservations closed when its sale started", ErrReservationClosed, p.ID)
	}
	row := reservation{ProductID: p.ID, UserID: buyer, CreatedAt: now.UTC().Truncate(time.Millisecond)}
	res := r.db.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&row)
	if res.Error != nil {
		return Reserved{}, fmt.Errorf("storing the reservation of product %d: %w", p.ID, res.Error)
	}
	out := Reserved{Product: p.ID, Buyer: buyer, At: row.CreatedAt, Created: res.RowsAffected == 1}
	if out.Created && !r.now().Before(*p.StartsAt) {
		// The write ended after the opening, by this clock: another
		// instance's, up to ClockSkew ahead, may have read the final
		// reservations without it. It is taken back, and the buyer told.
		// (A set read in the moment the row stood lets its buyer buy.)
		if err := r.db.WithContext(context.WithoutCancel(ctx)).Delete(&row).Error; err != nil {
			return Reserved{}, fmt.Errorf("taking back a reservation of product %d stored too late: %w", p.ID, err)
		}
		return Reserved{}, fmt.Errorf("%w: product %d's sale started while the reservation was being stored", ErrReservationClosed, p.ID)
	}
	if !out.Created {
		var had reservation
		if err := r.db.WithContext(ctx).Where("product_id = ? AND user_id = ?", p.ID, buyer).Take(&had).Error; err != nil {
			return Reserved{}, fmt.Errorf("reading the reservation of product %d: %w", p.ID, err)
		}
		out.At = had.CreatedAt.UTC()
	}
	var err error
	out.Count, err = r.count(ctx, p.ID)
	return out, err
}

// count is how many buyers reserved product.
func (r *reservations) count(ctx context.Context, product int64) (int64, error) {
	var n int64
	if err := r.db.WithContext(ctx).Model(&reservation{}).Where("product_id = ?", product).Count(&n).Error; err != nil {
		return 0, fmt.Errorf("counting the reservations of product %d: %w", product, err)
	}
	return n, nil
}

// check refuses buyer a purchase of p unless p takes no reservations or
// buyer reserved it. It reads the product's reservations once at the
// opening and once more ClockSkew after it, when no instance takes one any
// longer, and checks a purchase against what it read: no round trip. In
// the opening's first ClockSkew a buyer missing from the first read may
// have reserved on an instance whose clock is behind: only that buyer's
// row is read.
func (r *reservations) check(ctx context.Context, p catalogue.Product, buyer int64) error {
	if !p.Reservation || p.StartsAt == nil {
		return nil
	}
	final := !r.now().Before(p.StartsAt.Add(ClockSkew))
	buyers, err := r.set(ctx, p, final)
	if err != nil {
		return err
	}
	_, reserved := buyers[buyer]
	if !reserved && !final {
		var n int64
		err := r.db.WithContext(ctx).Model(&reservation{}).Where("product_id = ? AND user_id = ?", p.ID, buyer).Limit(1).Count(&n).Error
		if err != nil {
			return fmt.Errorf("reading the reservation of product %d: %w", p.ID, err)
		}
		reserved = n > 0
	}
	if !reserved {
		return fmt.Errorf("%w: product %d sells only to buyers who reserved it before %s", ErrNotReserved, p.ID,
			p.StartsAt.UTC().Format(time.RFC3339))
	}
	return nil
}

// set is p's buyers who reserved it for its current opening, read from
// the database the first time it is asked for: the first read (final
// false) at the opening, the final one ClockSkew after it. A failed read is
// tried again by the next purchase.
func (r *reservations) set(ctx context.Context, p catalogue.Product, final bool) (map[int64]struct{}, error) {
	r.mu.Lock()
	s := r.closed[p.ID]
	if s == nil || !s.starts.Equal(*p.StartsAt) || final && !s.final {
		s = &reservedSet{starts: *p.StartsAt, final: final}
		r.closed[p.ID] = s
	}
	r.mu.Unlock()
	if m := s.buyers.Load(); m != nil {
		return *m, nil
	}
	s.load.Lock()
	defer s.load.Unlock()
	if m := s.buyers.Load(); m != nil {
		return *m, nil
	}
	var ids []int64
	if err := r.db.WithContext(ctx).Model(&reservation{}).Where("product_id = ?", p.ID).Pluck("user_id", &ids).Error; err != nil {
		return nil, fmt.Errorf("reading the reservations of product %d: %w", p.ID, err)
	}
	m := make(map[int64]struct{}, len(ids))
	for _, id := range ids {
		m[id] = struct{}{}
	}
	s.buyers.Store(&m)
	return m, nil
}

// Reserve stores buyer's reservation of product (idempotent): refused
// when the product takes none (ErrNoReservation) or its sale has started
// (ErrReservationClosed).
func (d *Door) Reserve(ctx context.Context, product, buyer int64) (Reserved, error) {
	p, err := d.cat.Product(ctx, product)
	if err != nil {
		return Reserved{}, err
	}
	return d.reserved.reserve(ctx, p, buyer)
}

// Reservations is how many buyers reserved product.
func (d *Door) Reservations(ctx context.Context, product int64) (int64, error) {
	return d.reserved.count(ctx, product)
}
