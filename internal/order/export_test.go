package order

import (
	"gorm.io/gorm"

	"seckill/internal/outbox"
)

// Writer is the consumers' Sink, for a test that hands it a batch it held
// across a change of the store (a consumer with orders in hand).
func Writer(db *gorm.DB, s *Service) outbox.Sink { return writer{db: db, life: s.life} }
