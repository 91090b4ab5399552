package idgen

import (
	"fmt"
	"strconv"
	"time"
)

const (
	seqBits  = 32
	timeBits = 31
)

// ID is an order ID issued by Redis: seconds since EpochUnix in bits 32–62,
// the day's sequence number in bits 0–31.
//
// Its kind is int64, so database/sql and GORM store it in a BIGINT column
// as they would an int64; JSON carries it as a string (see the package
// comment).
type ID int64

// ParseID parses the decimal form that String and MarshalJSON produce.
func ParseID(s string) (ID, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: %q", ErrInvalidID, s)
	}
	return ID(n), nil
}

// String returns the ID in decimal.
func (id ID) String() string { return strconv.FormatInt(int64(id), 10) }

// Time returns the second the ID was issued in, in UTC.
func (id ID) Time() time.Time {
	return time.Unix(EpochUnix+int64(id)>>seqBits, 0).UTC()
}

// Seq returns the ID's sequence number within its day.
func (id ID) Seq() uint32 { return uint32(id) }

// MarshalJSON returns the ID as a JSON string: IDs exceed 2^53, past which
// JavaScript numbers lose integers.
func (id ID) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 21) // 19 digits and two quotes
	b = append(b, '"')
	b = strconv.AppendInt(b, int64(id), 10)
	return append(b, '"'), nil
}

// UnmarshalJSON accepts the string form and, from clients that send one, a
// bare number; it parses the digits, never a float64, so a large number
// arrives intact. JSON null leaves the ID as it was, as encoding/json does
// for an int64.
func (id *ID) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "null" {
		return nil
	}
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	v, err := ParseID(s)
	if err != nil {
		return err
	}
	*id = v
	return nil
}
