package idgen_test

import (
	"database/sql"
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"

	_ "github.com/glebarez/go-sqlite" // registers the "sqlite" driver
	"github.com/google/go-cmp/cmp"

	"seckill/internal/idgen"
)

func TestEpoch(t *testing.T) {
	want := time.Date(2022, 1, 1, 0, 0, 0, 0, time.UTC)
	if got := time.Unix(idgen.EpochUnix, 0).UTC(); !got.Equal(want) {
		t.Errorf("EpochUnix is %v, want %v", got, want)
	}
}

func TestParseID(t *testing.T) {
	tests := []struct {
		in      string
		want    idgen.ID
		wantErr bool
	}{
		{"0", 0, false},
		{"1", 1, false},
		{"662920535620976682", 662920535620976682, false},
		{"9223372036854775807", math.MaxInt64, false},
		{"9223372036854775808", 0, true},
		{"-1", 0, true},
		{"", 0, true},
		{"12a", 0, true},
		{"1.0", 0, true},
		{"1e3", 0, true},
		{" 1", 0, true},
	}
	for _, tt := range tests {
		got, err := idgen.ParseID(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseID(%q) = %d, %v; want %d, error %t", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err != nil && !errors.Is(err, idgen.ErrInvalidID) {
			t.Errorf("ParseID(%q) error %v is not ErrInvalidID", tt.in, err)
		}
		if err == nil && got.String() != tt.in {
			t.Errorf("ParseID(%q).String() = %q", tt.in, got.String())
		}
	}
}

// order stands for a struct the API encodes.
type order struct {
	ID     idgen.ID `json:"id"`
	UserID int64    `json:"user_id"`
}

// TestIDJSON checks that an ID travels as a JSON string and comes back
// whole, above 2^53 where a float64 would round it.
func TestIDJSON(t *testing.T) {
	const big = 1<<53 + 1 // the first integer float64 cannot hold
	in := order{ID: big, UserID: 7}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"id":"9007199254740993","user_id":7}`; string(b) != want {
		t.Errorf("Marshal = %s, want %s", b, want)
	}
	var out order
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, out); diff != "" {
		t.Errorf("round trip (-sent +received):\n%s", diff)
	}
	// What a JavaScript client would have done with a bare number.
	var f float64
	if err := json.Unmarshal([]byte("9007199254740993"), &f); err != nil {
		t.Fatal(err)
	}
	if int64(f) == big {
		t.Errorf("float64 kept %d: the reason for strings is gone", int64(big))
	}
}

func TestIDUnmarshalJSON(t *testing.T) {
	tests := []struct {
		in      string
		want    idgen.ID
		wantErr bool
	}{
		{`{"id":"662920535620976682"}`, 662920535620976682, false},
		{`{"id":662920535620976682}`, 662920535620976682, false}, // a bare number, parsed exactly
		{`{"id":"0"}`, 0, false},
		{`{"id":null}`, 5, false}, // null leaves the field alone
		{`{}`, 5, false},
		{`{"id":""}`, 5, true},
		{`{"id":"-3"}`, 5, true},
		{`{"id":-3}`, 5, true},
		{`{"id":1.5}`, 5, true},
		{`{"id":"abc"}`, 5, true},
		{`{"id":"9223372036854775808"}`, 5, true},
		{`{"id":true}`, 5, true},
	}
	for _, tt := range tests {
		got := order{ID: 5}
		err := json.Unmarshal([]byte(tt.in), &got)
		if (err != nil) != tt.wantErr || got.ID != tt.want {
			t.Errorf("Unmarshal(%s) = %d, %v; want %d, error %t", tt.in, got.ID, err, tt.want, tt.wantErr)
		}
		if err != nil && !errors.Is(err, idgen.ErrInvalidID) {
			t.Errorf("Unmarshal(%s) error %v is not ErrInvalidID", tt.in, err)
		}
	}
}

// TestIDSQL checks that database/sql stores and scans an ID as the int64
// it is, without a Valuer or Scanner: GORM relies on the same conversions.
func TestIDSQL(t *testing.T) {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1) // one connection, one in-memory database
	ctx := t.Context()
	if _, err := db.ExecContext(ctx, "CREATE TABLE orders (id BIGINT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	const want = idgen.ID(math.MaxInt64)
	if _, err := db.ExecContext(ctx, "INSERT INTO orders (id) VALUES (?)", want); err != nil {
		t.Fatalf("inserting an ID: %v", err)
	}
	var got idgen.ID
	if err := db.QueryRowContext(ctx, "SELECT id FROM orders").Scan(&got); err != nil {
		t.Fatalf("scanning an ID: %v", err)
	}
	if got != want {
		t.Errorf("stored %d, scanned %d", want, got)
	}
}
