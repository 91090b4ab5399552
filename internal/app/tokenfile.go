package app

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
	"unicode"
)

// operatorTokenFile is the file in Config.DataDir that keeps the embedded
// default's operator token.
const operatorTokenFile = "operator-token"

// tokenInDir returns the operator token kept in dir, making and keeping a
// new one when there is none. The embedded default keeps its database and
// its Redis in memory: without the file, each start made a new token, and
// the one a browser had saved went stale at every restart (issue 41,
// finding 2). The file is written beside and linked into place, so two
// processes starting at once on one directory read the same token, never
// a half-written one.
func tokenInDir(dir string) (token, path string, made bool, err error) {
	path = filepath.Join(dir, operatorTokenFile)
	if token, err = readTokenFile(path); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return token, path, false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", path, false, fmt.Errorf("making the data directory: %w", err)
	}
	tmp, err := os.CreateTemp(dir, operatorTokenFile+".*") // mode 0600
	if err != nil {
		return "", path, false, fmt.Errorf("keeping the operator token: %w", err)
	}
	defer os.Remove(tmp.Name())
	token = rand.Text()
	_, err = tmp.WriteString(token + "\n")
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", path, false, fmt.Errorf("keeping the operator token: %w", err)
	}
	err = os.Link(tmp.Name(), path)
	if lerr := err; err != nil && !errors.Is(err, fs.ErrExist) {
		// A file system without hard links: created only if absent, the
		// file may be read half-written by a process starting that very
		// moment, which reads it again a moment later.
		if err = writeNew(path, token); err != nil && !errors.Is(err, fs.ErrExist) {
			err = fmt.Errorf("%w (linking it into place: %w)", err, lerr)
		}
	}
	if errors.Is(err, fs.ErrExist) { // another process kept its own first
		for range 10 {
			if token, err = readTokenFile(path); !errors.Is(err, errShortToken) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		return token, path, false, err
	}
	if err != nil {
		return "", path, false, fmt.Errorf("keeping the operator token: %w", err)
	}
	return token, path, true, nil
}

// writeNew writes token to path, which must not exist yet, readable by its
// owner alone.
func writeNew(path, token string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(token + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// minTokenLen is the shortest kept token read: the service makes 26
// characters (rand.Text, 130 bits).
const minTokenLen = 16

// errTokenFile wraps every refusal of an existing token file: the start
// stops, saying how to mend it, rather than run with a token it cannot keep.
var errTokenFile = errors.New("the operator token file is refused")

// errShortToken is a file without a whole token, perhaps still being
// written.
var errShortToken = fmt.Errorf("%w: no token of %d characters or more on one line", errTokenFile, minTokenLen)

// readTokenFile reads a kept token. A file another user may read, or that
// holds a token too short to guess slowly, is refused with how to mend it,
// as ssh refuses a private key others can read: the token opens every
// operator's request.
func readTokenFile(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	// Windows keeps no Unix permission bits: every file reads as 0666.
	if loose := fi.Mode().Perm()&0o077 != 0; loose && runtime.GOOS != "windows" {
		// Tightened if it can be: a file system that keeps no modes (vfat,
		// a Windows drive under WSL) shows every file open to all.
		if os.Chmod(path, 0o600) != nil || !ownerOnly(path) {
			return "", fmt.Errorf("%w: %s may be read by other users (mode %04o) and could not be made 0600: a file system that keeps no modes "+
				"cannot keep it; choose -data-dir elsewhere, or remove the file to have a new one made", errTokenFile, path, fi.Mode().Perm())
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	token := strings.TrimSpace(string(b))
	if len(token) < minTokenLen || strings.ContainsFunc(token, unicode.IsSpace) {
		return "", fmt.Errorf("%w: %s: remove it to have a new one made", errShortToken, path)
	}
	return token, nil
}

// ownerOnly reports whether path is readable by its owner alone now.
func ownerOnly(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().Perm()&0o077 == 0
}
