package session

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"seckill/internal/api"
)

// Outcomes of the accounts a caller branches on.
var (
	// ErrBadName: a name an account cannot have (empty, too long, not
	// printable text).
	ErrBadName = errors.New("session: bad name")
	// ErrNameTaken: an account has the name already.
	ErrNameTaken = errors.New("session: name taken")
	// ErrNoAccount: no account has the name or the id; a token whose
	// buyer has none is refused with it (401), whatever key signed it.
	ErrNoAccount = errors.New("session: no such account")
)

// MaxName bounds a name, in characters.
const MaxName = 40

// idSpan is how many buyer ids there are: from api.FirstNamedBuyer up to
// 2^53, so that a JavaScript number holds each.
const idSpan = 1<<53 - api.FirstNamedBuyer

// numberedRows is where the rows of numbered buyers start (see Numbered):
// numbered buyer n is row numberedRows+n, above every drawn id (drawID
// stays below idSpan) and, n being below api.FirstNamedBuyer, below 2^53.
const numberedRows = uint64(idSpan)

// idTries bounds the draws for a fresh id: two draws from 2^51 collide
// once in about 10^15 accounts, so a second try is already a curiosity.
const idTries = 4

// Buyer is an account, as the purchase path needs it.
type Buyer struct {
	// ID is the buyer's user id: api.FirstNamedBuyer and above, a range
	// of its own (see Accounts).
	ID int64
	// Name is the name as the buyer spelled it when signing in.
	Name string
	// Created is when the account was made: a product may sell only to
	// accounts made before a time (catalogue's AccountsBefore).
	Created time.Time
}

// accountRow is a row of the buyers table: a name, kept once, and its
// credential.
type accountRow struct {
	// ID is the buyer's id less api.FirstNamedBuyer, drawn at random.
	ID uint64 `gorm:"primaryKey;autoIncrement:false"`
	// Key is the name folded to lower case, so that "Alice" and "alice"
	// are one buyer on every database; bytes, so that MySQL's collation
	// does not fold more than that (accents) on one database and not
	// on another.
	Key  []byte `gorm:"column:name_key;type:varbinary(256);not null;uniqueIndex"`
	Name string `gorm:"size:256;not null"`
	// Password is the argon2id hash (a PHC string); empty for an account
	// made by the demo sign-in or the operator's bulk creation, which no
	// password signs in to.
	Password string `gorm:"size:160;not null;default:''"`
	// Generation counts the password's changes; a token of an earlier
	// generation is refused (Desk.Verify).
	Generation int64 `gorm:"not null;default:0"`
	CreatedAt  time.Time
}

func (accountRow) TableName() string { return "buyers" }

func (r accountRow) buyer() Buyer {
	id := api.FirstNamedBuyer + int64(r.ID)
	if r.ID >= numberedRows {
		id = int64(r.ID - numberedRows)
	}
	return Buyer{ID: id, Name: r.Name, Created: r.CreatedAt}
}

// rowID is the row of buyer id: a named buyer's from api.FirstNamedBuyer,
// a numbered buyer's from numberedRows.
func rowID(id int64) uint64 {
	if id < api.FirstNamedBuyer {
		return numberedRows + uint64(id)
	}
	return uint64(id - api.FirstNamedBuyer)
}

// Accounts keeps names to buyer ids durably: the same name is the same
// buyer across sign-ins, instances and restarts, so that a person sees
// their orders again. A buyer's id is api.FirstNamedBuyer plus a random
// 51-bit number, a range the lab's numeric user ids never reach (they stay
// below it): a lab request that names a user id cannot be a named buyer.
// Random, not a counter, so that an id tells neither how many buyers
// there are nor another buyer's id.
type Accounts struct{ db *gorm.DB }

// NewAccounts keeps the accounts in db; Migrate must have made the table.
func NewAccounts(db *gorm.DB) *Accounts { return &Accounts{db: db} }

// Migrate creates the buyers table and their passkeys'. Two processes migrating one MySQL
// database at once may both try to create it, and one fails: then the
// table exists, and the loser's second try only checks it.
func Migrate(ctx context.Context, db *gorm.DB) error {
	err := db.WithContext(ctx).AutoMigrate(&accountRow{}, &passkeyRow{})
	if err != nil && db.WithContext(ctx).Migrator().HasTable(&accountRow{}) {
		err = db.WithContext(ctx).AutoMigrate(&accountRow{}, &passkeyRow{})
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

// nameKey is the name an account is found by: cleaned, lower case.
func nameKey(clean string) []byte { return []byte(strings.ToLower(clean)) }

// create makes the account of a cleaned name with a password hash ("" for
// none). A name taken is ErrNameTaken.
func (a *Accounts) create(ctx context.Context, name, hash string) (accountRow, error) {
	for range idTries {
		row := accountRow{ID: drawID(), Key: nameKey(name), Name: name, Password: hash}
		res := a.db.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&row)
		if res.Error != nil {
			return accountRow{}, fmt.Errorf("making the account %q: %w", name, res.Error)
		}
		if res.RowsAffected == 1 {
			return row, nil
		}
		// Nothing inserted: the name is taken, or (once in 10^15) the id.
		if _, err := a.byName(ctx, name); err == nil {
			return accountRow{}, fmt.Errorf("%w: %q", ErrNameTaken, name)
		} else if !errors.Is(err, ErrNoAccount) {
			return accountRow{}, err
		}
	}
	return accountRow{}, fmt.Errorf("making the account %q: %d ids drawn were all taken", name, idTries)
}

// drawID draws an account row's id: uniform below idSpan.
func drawID() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return binary.LittleEndian.Uint64(b[:]) % uint64(idSpan)
}

// named returns the account of a cleaned name, made without a password
// on its first sign-in (the demo sign-in).
func (a *Accounts) named(ctx context.Context, name string) (accountRow, error) {
	row, err := a.byName(ctx, name)
	if errors.Is(err, ErrNoAccount) {
		row, err = a.create(ctx, name, "")
		if errors.Is(err, ErrNameTaken) { // two first sign-ins at once
			row, err = a.byName(ctx, name)
		}
	}
	return row, err
}

func (a *Accounts) byName(ctx context.Context, name string) (accountRow, error) {
	var row accountRow
	err := a.db.WithContext(ctx).Where("name_key = ?", nameKey(name)).Take(&row).Error
	return row, found(err, "reading the account of a name")
}

func (a *Accounts) byID(ctx context.Context, id int64) (accountRow, error) {
	var row accountRow
	if id <= 0 || id >= 1<<53 {
		return row, ErrNoAccount
	}
	err := a.db.WithContext(ctx).Where("id = ?", rowID(id)).Take(&row).Error
	return row, found(err, "reading an account")
}

// Numbered makes accounts, without a password, for numbered buyers: ids
// below api.FirstNamedBuyer, the range of a lab product's user_id, which
// no sign-in ever gives. A token for such an id is refused (ErrNoAccount)
// unless its account was made here: for tests and drills that keep their
// numbered buyers on products that are not lab products, minting their
// tokens with the key (testenv.Token). An id that has its account already
// is left as it is. Each account is marked in rdb (the service's Redis,
// see MarkTTL), so that the service takes its tokens without reading SQL.
// Their names ("#7") hold a key no sign-in can reach: it starts with a
// byte CleanName refuses.
func (a *Accounts) Numbered(ctx context.Context, rdb redis.Cmdable, ids ...int64) error {
	if len(ids) == 0 {
		return nil
	}
	rows := make([]accountRow, 0, len(ids))
	rowIDs := make([]uint64, 0, len(ids))
	for _, id := range ids {
		if id <= 0 || id >= api.FirstNamedBuyer {
			return fmt.Errorf("%w: %d is not a numbered buyer (1 to %d)", ErrBadName, id, api.FirstNamedBuyer-1)
		}
		name := "#" + strconv.FormatInt(id, 10)
		rows = append(rows, accountRow{ID: rowID(id), Key: []byte("\x00" + name), Name: name})
		rowIDs = append(rowIDs, rowID(id))
	}
	err := a.db.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).CreateInBatches(rows, numberedBatch).Error
	if err != nil {
		return fmt.Errorf("making %d numbered accounts: %w", len(ids), err)
	}
	// Marked as they are kept: an account made before keeps its time.
	for len(rowIDs) > 0 {
		n := min(len(rowIDs), numberedBatch)
		var kept []accountRow
		if err := a.db.WithContext(ctx).Where("id IN ?", rowIDs[:n]).Find(&kept).Error; err != nil {
			return fmt.Errorf("reading %d numbered accounts: %w", n, err)
		}
		if err := mark(ctx, rdb, kept...); err != nil {
			return err
		}
		rowIDs = rowIDs[n:]
	}
	return nil
}

// numberedBatch is how many numbered accounts one statement makes or reads.
const numberedBatch = 500

// setPassword stores a new hash for the account, if its generation is
// still gen (a change made meanwhile wins), and returns the generation it
// made. The account's passkeys go with the old password, in the same
// transaction: a change of password is how an owner takes the account
// back, and a passkey added with a stolen token or password must not
// outlive it.
func (a *Accounts) setPassword(ctx context.Context, id uint64, gen int64, hash string) (int64, error) {
	err := a.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Model(&accountRow{}).Where("id = ? AND generation = ?", id, gen).
			Updates(map[string]any{"password": hash, "generation": gen + 1})
		switch {
		case res.Error != nil:
			return fmt.Errorf("changing a password: %w", res.Error)
		case res.RowsAffected == 0:
			return fmt.Errorf("%w: the password changed meanwhile", ErrBadCredentials)
		}
		if err := tx.Where("buyer = ?", api.FirstNamedBuyer+int64(id)).Delete(&passkeyRow{}).Error; err != nil {
			return fmt.Errorf("removing the passkeys of a changed password: %w", err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return gen + 1, nil
}

func found(err error, doing string) error {
	switch {
	case errors.Is(err, gorm.ErrRecordNotFound):
		return ErrNoAccount
	case err != nil:
		return fmt.Errorf("%s: %w", doing, err)
	}
	return nil
}
