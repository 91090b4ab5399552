package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// The etcd drills run from the command line like the other scenarios: the
// paused holder's two variants, each with its verdict and count.
func TestEtcdPauseDrill(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"loadtest", "-scenario", "etcd-pause"}, os.Getenv, strings.NewReader(""), &stdout, &stderr)
	t.Logf("stdout:\n%s", stdout.String())
	if err != nil {
		t.Fatalf("scenario etcd-pause: %v\nstderr:\n%s", err, stderr.String())
	}
	for _, want := range []string{"etcd, no fence: OVERSOLD×1 1/1", "etcd, revision fence: OK×1 1/1"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
