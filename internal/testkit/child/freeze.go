package child

// Freeze pauses a whole process (SIGSTOP) and Thaw resumes it (SIGCONT), as
// a frozen VM or a long stop-the-world pause would. A signal is delivered
// asynchronously: Freeze returns only once the kernel reports the process
// stopped, so that whatever the caller does next meets a process that no
// longer runs.

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// stopWait bounds how long Freeze waits for the kernel to stop the process.
const stopWait = 5 * time.Second

// Freeze sends p SIGSTOP and waits until it is stopped.
func Freeze(p *os.Process) error {
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("pausing process %d: %w", p.Pid, err)
	}
	deadline := time.Now().Add(stopWait)
	for {
		state, err := procState(p.Pid)
		if err != nil {
			return nil // no /proc to ask: the signal was sent
		}
		if state == 'T' || state == 't' {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d was sent SIGSTOP and is still in state %c after %s", p.Pid, state, stopWait)
		}
		time.Sleep(time.Millisecond) // the poll interval
	}
}

// Thaw resumes a stopped process (SIGCONT).
func Thaw(p *os.Process) error {
	if err := p.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("resuming process %d: %w", p.Pid, err)
	}
	return nil
}

// procState reads a process's state letter from /proc/PID/stat (Linux): the
// field after the command name, which is in parentheses and may hold any
// character.
func procState(pid int) (byte, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, fmt.Errorf("unexpected /proc/%d/stat: %q", pid, b)
	}
	return b[i+2], nil
}
