package app

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// The embedded default's token file: made once, owner-only, read back by
// every later start (and by starts racing the first); a file others may
// read, or holding no real token, is refused saying how to mend it.
func TestTokenInDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	const racers = 8
	tokens := make([]string, racers)
	var made sync.WaitGroup
	var mu sync.Mutex
	makers := 0
	for i := range racers {
		made.Go(func() {
			token, _, m, err := tokenInDir(dir)
			if err != nil {
				t.Errorf("start %d: %v", i, err)
			}
			tokens[i] = token
			if m {
				mu.Lock()
				makers++
				mu.Unlock()
			}
		})
	}
	made.Wait()
	if makers != 1 {
		t.Errorf("%d starts made a token, want exactly one", makers)
	}
	for i, tok := range tokens {
		if tok != tokens[0] || len(tok) < minTokenLen {
			t.Fatalf("start %d read %q, start 0 %q: want one token of %d characters or more", i, tok, tokens[0], minTokenLen)
		}
	}
	path := filepath.Join(dir, operatorTokenFile)
	if fi, err := os.Stat(path); runtime.GOOS != "windows" && (err != nil || fi.Mode().Perm() != 0o600) {
		t.Errorf("the token's file: %v %v, want mode 0600", fi, err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, operatorTokenFile+".*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}

	refused := func(content string, mode os.FileMode, want string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		if tok, _, _, err := tokenInDir(dir); !errors.Is(err, errTokenFile) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
			t.Errorf("a token file of %q, mode %04o: token %q, error %v; want errTokenFile naming the file and saying %q", content, mode, tok, err, want)
		}
	}
	refused("\n", 0o600, "remove it")
	refused("short\n", 0o600, "16 characters or more")
	refused("two tokens on one line\n", 0o600, "one line")
	// A file others may read is made the owner's alone, then read.
	if runtime.GOOS != "windows" {
		if err := os.WriteFile(path, []byte(tokens[0]+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, 0o644); err != nil {
			t.Fatal(err)
		}
		tok, _, _, err := tokenInDir(dir)
		if err != nil || tok != tokens[0] || !ownerOnly(path) {
			t.Errorf("a token file of mode 0644: token %q, error %v, owner's alone after: %v; want it read, made 0600", tok, err, ownerOnly(path))
		}
	}
}

// On a file system without hard links the token is written in place.
func TestWriteNewRefusesAnExistingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), operatorTokenFile)
	if err := writeNew(path, "abcdefghijklmnopqrstuvwxyz"); err != nil {
		t.Fatal(err)
	}
	if tok, err := readTokenFile(path); err != nil || tok != "abcdefghijklmnopqrstuvwxyz" {
		t.Errorf("read back %q %v", tok, err)
	}
	if err := writeNew(path, "another-token-of-enough-length"); !os.IsExist(err) {
		t.Errorf("writing over a kept token: %v, want it refused as existing", err)
	}
}

// A refused file stops the start, saying why; a directory that cannot be
// written lets it start with a token it does not keep.
func TestTokenFromDirStopsOnARefusedFile(t *testing.T) {
	dir := t.TempDir()
	a := &App{Config: Config{DataDir: dir}, log: slog.New(slog.DiscardHandler)}
	if err := os.WriteFile(filepath.Join(dir, operatorTokenFile), []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok, _, err := a.tokenFromDir(); !errors.Is(err, errTokenFile) || tok != "" {
		t.Errorf("a refused token file: token %q, error %v; want the start stopped with errTokenFile", tok, err)
	}
	a.Config.DataDir = filepath.Join(dir, operatorTokenFile, "below-a-file") // cannot be made
	if tok, file, err := a.tokenFromDir(); err != nil || len(tok) < minTokenLen || file != "" {
		t.Errorf("a data directory that cannot be made: token %q, file %q, error %v; want a fresh token, not kept", tok, file, err)
	}
}

// A short ADMIN_TOKEN is taken, with a warning: the class token derived
// from it lets its holders test guesses of it offline.
func TestAShortOperatorTokenIsWarnedOf(t *testing.T) {
	for token, warned := range map[string]bool{"s3cret": true, "a-long-random-operator-token": false} {
		var log strings.Builder
		a := &App{Config: Config{AdminToken: token}, log: slog.New(slog.NewTextHandler(&log, nil))}
		got, err := a.operator(t.Context())
		if err != nil || got != token {
			t.Fatalf("operator() with ADMIN_TOKEN %q: %q %v", token, got, err)
		}
		if strings.Contains(log.String(), "is short") != warned {
			t.Errorf("ADMIN_TOKEN %q: log %q, want a warning: %v", token, log.String(), warned)
		}
	}
}
