package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRun starts the service as main would, on the embedded default, waits
// for /healthz, buys from the demo product, then shuts it down.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out, outW := io.Pipe()
	errc := make(chan error, 1)
	env := map[string]string{"HTTP_ADDR": "127.0.0.1:0", "LOG_LEVEL": "warn", "RATE_LIMIT": "0"}
	go func() {
		errc <- run(ctx, []string{"seckill"}, func(k string) string { return env[k] }, outW, io.Discard)
		outW.Close()
	}()

	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the start-up line: %v (run: %v)", err, <-errc)
	}
	go io.Copy(io.Discard, out)
	url, _, ok := strings.Cut(strings.TrimPrefix(line, "seckill serving "), "/ ")
	if !ok || !strings.Contains(line, "embedded") {
		t.Fatalf("start-up line %q: want the URL and the embedded mode", line)
	}
	waitHealthy(t, url)

	resp, err := http.Post(url+"/api/orders", "application/json", strings.NewReader(`{"user_id":1,"product_id":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Errorf("buying from the demo product: status %d, want 201", resp.StatusCode)
	}

	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("run returned %v after shutdown, want nil", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not return after its context was cancelled")
	}
}

func waitHealthy(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/healthz did not answer 200 in time: %v", url, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRunFlags(t *testing.T) {
	noenv := func(string) string { return "" }
	var help strings.Builder
	err := run(t.Context(), []string{"seckill", "-h"}, noenv, io.Discard, &help)
	if !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h returned %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{"-addr", "$HTTP_ADDR", "127.0.0.1:8080", "$REDIS_ADDR", "$MYSQL_DSN", "$RATE_LIMIT", "(default 3s)"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("-h output lacks %q:\n%s", want, help.String())
		}
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"-lock-ttl", "soon"}, nil, "invalid value"},
		{[]string{"-rate-limit", "-1s"}, nil, "must not be negative"},
		{nil, map[string]string{"LOCK_WAIT": "forever"}, "$LOCK_WAIT"},
		{[]string{"extra"}, nil, "unexpected arguments"},
		{[]string{"-log-level", "loud"}, nil, "-log-level"},
	} {
		getenv := func(k string) string { return tc.env[k] }
		err := run(t.Context(), append([]string{"seckill"}, tc.args...), getenv, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run %v env %v: error %v, want one containing %q", tc.args, tc.env, err, tc.want)
		}
	}
}
