package connlimit_test

import (
	"io"
	"net"
	"net/http"
	"testing"

	"seckill/internal/connlimit"
)

// BenchmarkListener is the cap's cost per request, beside a bare listener:
// keep-alive requests (two ConnState calls each) and a new connection per
// request (the accept's bookkeeping too). Run with -cpu 1 on a busy
// machine: both sides then queue the same way.
func BenchmarkListener(b *testing.B) {
	for _, capped := range []bool{false, true} {
		for _, keepAlive := range []bool{true, false} {
			name := map[bool]string{false: "bare", true: "capped"}[capped] + map[bool]string{false: "/new-conn", true: "/keep-alive"}[keepAlive]
			b.Run(name, func(b *testing.B) {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				srv := &http.Server{Handler: ok}
				var l net.Listener = ln
				if capped {
					c := connlimit.NewListener(ln, connlimit.Options{PerAddress: 512, Total: 10000})
					l, srv.ConnState = c, c.ConnState
				}
				go srv.Serve(l)
				defer srv.Close()
				client := &http.Client{Transport: &http.Transport{DisableKeepAlives: !keepAlive}}
				url := "http://" + ln.Addr().String() + "/"
				b.ResetTimer()
				for b.Loop() {
					resp, err := client.Get(url)
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
	}
}
