package idgen

import (
	"context"
	"fmt"

	"github.com/google/uuid"
)

// UUIDv7 issues RFC 9562 version 7 UUIDs: 48 bits of Unix milliseconds, then
// random bits. They need no coordination at all, and sort by time as text;
// within one process github.com/google/uuid also keeps them strictly
// increasing, using the 12 bits after the version as a sub-millisecond
// counter. The price is size: 16 bytes, 36 characters as text.
type UUIDv7 struct{}

// NextString returns a new UUIDv7 in its canonical text form.
func (UUIDv7) NextString(context.Context) (string, error) {
	u, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("generating uuidv7: %w", err)
	}
	return u.String(), nil
}
