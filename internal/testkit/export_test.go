package testkit

// SkipLine is skipLine, for the test of the summary.
var SkipLine = skipLine

// SwapSkips empties the record of skips, so that a test of it starts from
// none, and returns a func that puts the package's own back.
func SwapSkips() (restore func()) {
	skipped.Lock()
	absent, tests := skipped.absent, skipped.tests
	skipped.absent, skipped.tests = nil, nil
	skipped.Unlock()
	return func() {
		skipped.Lock()
		skipped.absent, skipped.tests = absent, tests
		skipped.Unlock()
	}
}
