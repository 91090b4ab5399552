package api

// ErrorStatus is one row of the table in which a package says how the
// server answers its sentinel error: an error that is (errors.Is) Err gets
// Status and Code. Each domain package keeps its own table (Statuses);
// internal/server's classify reads them in a fixed order, the first row
// that matches answering.
type ErrorStatus struct {
	Err    error
	Status int
	Code   string
}
