package stock

// Inside returns r with f run between its read and its write: the tests'
// way into a read-modify-write's critical section.
func Inside(r Request, f func()) Request {
	r.inside = f
	return r
}
