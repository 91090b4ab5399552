//go:build unix

package app

import "syscall"

// openFileLimit is the process's soft RLIMIT_NOFILE, 0 when unreadable.
func openFileLimit() int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur > 1<<30 {
		return 0
	}
	return int(r.Cur)
}
