package harness

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"seckill/internal/api"
)

// conn is one worker's keep-alive HTTP/1.1 connection to one target. The
// worker writes a request and reads its answer on its own goroutine: no
// transport goroutines, channels or pool locks between them, which is what
// lets a Go load generator keep up with wrk on the same cores (see the
// loadtest self-test). Answers are parsed by http.ReadResponse, so chunked
// bodies and "Connection: close" are handled as net/http would.
type conn struct {
	addr string // host:port
	head []byte // the request line and the headers every request carries
	c    net.Conn
	br   *bufio.Reader
	bw   *bufio.Writer
	stop func() bool // unregisters the context hook
}

// newConn prepares a connection to POST to target+path; it dials on first use.
func newConn(target, path string) (*conn, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("parsing target %q: %w", target, err)
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("target %q: only http is spoken by the fast path", target)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "80")
	}
	head := "POST " + u.EscapedPath() + path + " HTTP/1.1\r\nHost: " + u.Host +
		"\r\nUser-Agent: seckill-harness\r\nContent-Type: " + api.MediaType + "\r\n"
	return &conn{addr: host, head: []byte(head)}, nil
}

var dialer = net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}

// do sends body, with a signed-in buyer's token unless it is "", and
// returns the answer, whose Body the caller reads and closes before the
// next do. An error closes the connection; the next do dials again. A
// request is never retried: an order may have been placed.
func (c *conn) do(ctx context.Context, buf *[]byte, token string, body []byte) (*http.Response, error) {
	if c.c == nil {
		nc, err := dialer.DialContext(ctx, "tcp", c.addr)
		if err != nil {
			return nil, err
		}
		c.c = nc
		c.br = bufio.NewReaderSize(nc, 4<<10)
		c.bw = bufio.NewWriterSize(nc, 4<<10)
		// Cancelling the run unblocks a read or write in flight.
		c.stop = context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	}
	b := append((*buf)[:0], c.head...)
	if token != "" {
		b = append(b, "Authorization: Bearer "...)
		b = append(b, token...)
		b = append(b, "\r\n"...)
	}
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n\r\n"...)
	b = append(b, body...)
	*buf = b
	if _, err := c.bw.Write(b); err != nil {
		c.close()
		return nil, err
	}
	if err := c.bw.Flush(); err != nil {
		c.close()
		return nil, err
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		c.close()
		if err == io.EOF {
			err = io.ErrUnexpectedEOF // the server closed the connection without answering
		}
		return nil, err
	}
	if resp.Close {
		resp.Body = &closeAfter{ReadCloser: resp.Body, c: c}
	}
	return resp, nil
}

func (c *conn) close() {
	if c.c == nil {
		return
	}
	c.stop()
	c.c.Close()
	c.c = nil
}

// closeAfter closes the connection with the body of an answer that said
// "Connection: close".
type closeAfter struct {
	io.ReadCloser
	c *conn
}

func (r *closeAfter) Close() error {
	err := r.ReadCloser.Close()
	r.c.close()
	return err
}
