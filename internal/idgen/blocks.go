package idgen

import (
	"context"
	"fmt"
	"sync"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Blocks reserves the sequence numbers Redis may issue, a block at a time,
// in a store that outlives Redis. Redis issues no number above the block it
// was given, so the store's ceiling bounds every number ever issued, drawn
// and lost with Redis included; a block reserved after a loss starts past
// it, and no ID is issued twice (the segment allocation of Meituan's Leaf).
type Blocks interface {
	// Reserve records that key's numbers up to to may be issued, and returns
	// the block (from, to]: from is at least floor, and at least the end of
	// every block reserved for key before, so none of it was ever handed out.
	Reserve(ctx context.Context, key string, floor uint64, size uint32) (from, to uint64, err error)
}

var (
	_ Blocks = (*SQLBlocks)(nil)
	_ Blocks = (*MemoryBlocks)(nil)
)

// SQLBlocks keeps the ceilings in the table id_blocks, one row per day key
// (see MigrateBlocks): the database the orders are written to, whose
// durability the IDs then share. One reservation is an insert-if-absent,
// then a transaction of an UPDATE that moves the ceiling and a read of it,
// once a block.
type SQLBlocks struct {
	DB *gorm.DB
}

// idBlock is a day key's ceiling: the end of the last block reserved.
type idBlock struct {
	DayKey  string `gorm:"primaryKey;size:64"`
	Ceiling uint64 `gorm:"not null"`
}

func (idBlock) TableName() string { return "id_blocks" }

// MigrateBlocks creates the table SQLBlocks keeps its ceilings in.
func MigrateBlocks(ctx context.Context, db *gorm.DB) error {
	if err := db.WithContext(ctx).AutoMigrate(&idBlock{}); err != nil {
		return fmt.Errorf("migrating id_blocks: %w", err)
	}
	return nil
}

// Reserve moves key's ceiling past floor and on by size, and reads it back
// in the same transaction: the UPDATE locks the row until the commit (on
// SQLite, the database), so the ceiling read is the one this reservation
// set, and no two reservations get the same block, on MySQL, MariaDB and
// SQLite alike.
func (b *SQLBlocks) Reserve(ctx context.Context, key string, floor uint64, size uint32) (from, to uint64, err error) {
	db := b.DB.WithContext(ctx)
	if err := db.Clauses(clause.OnConflict{DoNothing: true}).Create(&idBlock{DayKey: key}).Error; err != nil {
		return 0, 0, fmt.Errorf("reserving a block of %s in SQL: %w", key, err)
	}
	err = db.Transaction(func(tx *gorm.DB) error {
		moved := gorm.Expr("CASE WHEN ceiling < ? THEN ? ELSE ceiling END + ?", floor, floor, size)
		if err := tx.Model(&idBlock{}).Where("day_key = ?", key).Update("ceiling", moved).Error; err != nil {
			return err
		}
		var row idBlock
		if err := tx.Take(&row, "day_key = ?", key).Error; err != nil {
			return err
		}
		to = row.Ceiling
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("reserving a block of %s in SQL: %w", key, err)
	}
	return to - uint64(size), to, nil
}

// MemoryBlocks keeps the ceilings in the process's memory: no more durable
// than the process. It suits tests, examples and a process whose Redis
// cannot outlive it (the embedded one); never several processes on one
// Redis, which would each reserve the same blocks. The zero value is ready.
type MemoryBlocks struct {
	mu       sync.Mutex
	ceilings map[string]uint64
}

// Reserve moves key's ceiling past floor and on by size.
func (m *MemoryBlocks) Reserve(_ context.Context, key string, floor uint64, size uint32) (from, to uint64, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ceilings == nil {
		m.ceilings = make(map[string]uint64)
	}
	from = max(m.ceilings[key], floor)
	to = from + uint64(size)
	m.ceilings[key] = to
	return from, to, nil
}
