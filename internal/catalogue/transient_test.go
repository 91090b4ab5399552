package catalogue

import (
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// A consumer retries a batch the database refused for a reason of the
// moment, and dead-letters only what it refused for the row: telling the
// two apart decides whether a good order is parked.
func TestTransientRefusals(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&mysql.MySQLError{Number: 1213, Message: "Deadlock found"}, true},
		{fmt.Errorf("writing: %w", &mysql.MySQLError{Number: 1205, Message: "Lock wait timeout exceeded"}), true},
		{&mysql.MySQLError{Number: 1040, Message: "Too many connections"}, true},
		{&mysql.MySQLError{Number: 1406, Message: "Data too long for column 'idem_key'"}, false},
		{&mysql.MySQLError{Number: 1062, Message: "Duplicate entry"}, false},
		{errors.New("database is locked (5) (SQLITE_BUSY)"), true},
		{errors.New("UNIQUE constraint failed: orders.buyer"), false},
		{nil, false},
	} {
		if got := Transient(tc.err); got != tc.want {
			t.Errorf("Transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
