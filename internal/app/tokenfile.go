package app

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) { // another process kept its own first
			token, err = readTokenFile(path)
			return token, path, false, err
		}
		return "", path, false, fmt.Errorf("keeping the operator token: %w", err)
	}
	return token, path, true, nil
}

// readTokenFile reads a kept token; an empty file is an error that says
// how to mend it, not a token of "".
func readTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("the operator token file %s is empty: remove it to have a new one made", path)
	}
	return token, nil
}
