package session

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"seckill/internal/api"
)

// ErrBadName: a name a buyer cannot sign in with (empty, too long, not
// printable text).
var ErrBadName = errors.New("session: bad name")

// MaxName bounds a name, in characters.
const MaxName = 40

// Buyer is a named buyer.
type Buyer struct {
	// ID is the buyer's user id: api.FirstNamedBuyer and above, a range
	// of its own (see Buyers).
	ID   int64
	Name string
}

// buyerRow is a row of the buyers table: a name, kept once.
type buyerRow struct {
	ID uint64 `gorm:"primaryKey"`
	// Key is the name folded to lower case, so that "Alice" and "alice"
	// are one buyer on every database; bytes, so that MySQL's collation
	// does not fold more than that (accents) on one database and not
	// on another.
	Key       []byte `gorm:"column:name_key;type:varbinary(256);not null;uniqueIndex"`
	Name      string `gorm:"size:256;not null"`
	CreatedAt time.Time
}

func (buyerRow) TableName() string { return "buyers" }

// Buyers keeps names to buyer ids durably: the same name is the same buyer
// across sign-ins, instances and restarts, so that a person sees their
// orders again. A buyer's id is api.FirstNamedBuyer plus its row's id, a
// range the lab's numeric user ids never reach (they stay below it): a
// lab request that names a user id cannot be a named buyer, nor spend a
// named buyer's rate limit, which is kept by id across products.
type Buyers struct{ db *gorm.DB }

// NewBuyers keeps the buyers in db; Migrate must have made the table.
func NewBuyers(db *gorm.DB) *Buyers { return &Buyers{db: db} }

// Migrate creates the buyers table. Two processes migrating one MySQL
// database at once may both try to create it, and one fails: then the
// table exists, and the loser's second try only checks it.
func Migrate(ctx context.Context, db *gorm.DB) error {
	err := db.WithContext(ctx).AutoMigrate(&buyerRow{})
	if err != nil && db.WithContext(ctx).Migrator().HasTable(&buyerRow{}) {
		err = db.WithContext(ctx).AutoMigrate(&buyerRow{})
	}
	if err != nil {
		return fmt.Errorf("migrating the buyers: %w", err)
	}
	return nil
}

// CleanName trims a name and checks it: 1 to MaxName printable
// characters. Its error wraps ErrBadName with what is wrong.
func CleanName(name string) (string, error) {
	name = strings.TrimSpace(name)
	switch n := utf8.RuneCountInString(name); {
	case !utf8.ValidString(name):
		return "", fmt.Errorf("%w: the name is not UTF-8 text", ErrBadName)
	case n == 0:
		return "", fmt.Errorf("%w: the name is empty", ErrBadName)
	case n > MaxName:
		return "", fmt.Errorf("%w: the name has %d characters; at most %d", ErrBadName, n, MaxName)
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return "", fmt.Errorf("%w: the name holds %U, which is not a printable character", ErrBadName, r)
		}
	}
	return name, nil
}

// SignIn returns the buyer of a name, made on its first sign-in. The name
// is cleaned first (CleanName); the buyer keeps the spelling of its first
// sign-in.
func (b *Buyers) SignIn(ctx context.Context, name string) (Buyer, error) {
	name, err := CleanName(name)
	if err != nil {
		return Buyer{}, err
	}
	key := []byte(strings.ToLower(name))
	row, err := b.find(ctx, key)
	if errors.Is(err, gorm.ErrRecordNotFound) {
		// Two first sign-ins of one name at once: one inserts, the other
		// does nothing, and both read the one row.
		fresh := buyerRow{Key: key, Name: name}
		if err = b.db.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&fresh).Error; err == nil {
			row, err = b.find(ctx, key)
		}
	}
	if err != nil {
		return Buyer{}, fmt.Errorf("signing %q in: %w", name, err)
	}
	return Buyer{ID: api.FirstNamedBuyer + int64(row.ID), Name: row.Name}, nil
}

func (b *Buyers) find(ctx context.Context, key []byte) (buyerRow, error) {
	var row buyerRow
	err := b.db.WithContext(ctx).Where("name_key = ?", key).Take(&row).Error
	return row, err
}
