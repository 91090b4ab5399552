package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	// encoding/json/v2's prototype, not a token pre-pass over encoding/json:
	// exact-case names and refused duplicates are its defaults, not our code.
	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"seckill/internal/api"
)

// Outcomes of decode besides a MaxBytesError (413).
var (
	errBadBody     = errors.New("invalid body")                    // 400
	errMediaType   = errors.New("unsupported media type")          // 415
	errBodyTimeout = errors.New("the body did not arrive in time") // 408
	errTrailing    = errors.New("unexpected data after the JSON object")
)

// decode reads the request's body, one JSON object and nothing after it,
// into v: every body this API takes goes through here. Names must match a
// field exactly, once each; a typo such as "hold" for "hold_ms" or "User_ID"
// for "user_id" is refused, not ignored.
func (s *edge) decode(c *gin.Context, v any) error { return s.decodeBody(c, v, false) }

// decodeOptional is decode for a body whose every field may be left out:
// no body, or one of white space only, leaves v as it is. Pay and cancel
// take one, so that a signed-in buyer sends its token and nothing else.
func (s *edge) decodeOptional(c *gin.Context, v any) error { return s.decodeBody(c, v, true) }

func (s *edge) decodeBody(c *gin.Context, v any, optional bool) error {
	r := c.Request
	if optional && r.ContentLength == 0 {
		return nil
	}
	if r.ContentLength != 0 { // a body, or one of unknown length
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != api.MediaType {
			return fmt.Errorf("%w: send the body as JSON with Content-Type: %s", errMediaType, api.MediaType)
		}
	}
	b, err := s.readBody(c)
	if err != nil {
		return describe(err, v)
	}
	if optional && len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	dec := jsontext.NewDecoder(bytes.NewReader(b))
	if err := json.UnmarshalDecode(dec, v, json.RejectUnknownMembers(true)); err != nil {
		return describe(err, v)
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return describe(errTrailing, v)
	}
	return nil
}

// bodyGrace is how long, once the body timeout has passed, the reading goes
// on before the body is judged late: time for a process that was not running
// (SIGSTOP, a VM or GC pause, a starved CPU) to take what had arrived.
const bodyGrace = 250 * time.Millisecond

// readBody reads the whole body within the body timeout, judged by when the
// body arrived rather than when this process got to read it. A connection
// deadline set at once would fire on waking from a pause with the body in
// the kernel's buffer: so the deadline is set only when a timer, which runs
// once the process runs, finds the body unread, and then with a grace. A
// body late even so leaves the deadline in place: the 408 closes the
// connection (net/http would otherwise wait to drain the rest of the body).
// A recorder has no connection to bound.
func (s *edge) readBody(c *gin.Context) ([]byte, error) {
	rc := http.NewResponseController(c.Writer)
	if rc.SetReadDeadline(time.Time{}) != nil { // also lifts the server's ReadTimeout, which a pause would fire
		return io.ReadAll(c.Request.Body)
	}
	var (
		mu   sync.Mutex
		done bool
	)
	timer := time.AfterFunc(s.bodyTimeout, func() {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			rc.SetReadDeadline(time.Now().Add(bodyGrace))
		}
	})
	// The whole body first: a body over the limit is 413 whatever its
	// first key, and a decoding error is never a half-read connection.
	b, err := io.ReadAll(c.Request.Body)
	timer.Stop()
	mu.Lock()
	done = true
	mu.Unlock()
	if err == nil {
		// Left in place during a long purchase, a deadline would cancel
		// the request's context (net/http's background read fails on it).
		rc.SetReadDeadline(time.Time{})
	}
	return b, err
}

// describe turns a decoding error into one that names the key at fault.
func describe(err error, v any) error {
	var (
		tooLarge *http.MaxBytesError
		semantic *json.SemanticError
		syntax   *jsontext.SyntacticError
	)
	switch {
	case errors.As(err, &tooLarge):
		return fmt.Errorf("body larger than %d bytes: %w", maxBody, err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%w: it must arrive within the body timeout", errBodyTimeout)
	case errors.Is(err, errTrailing):
	case errors.Is(err, jsontext.ErrDuplicateName) && errors.As(err, &syntax):
		err = fmt.Errorf("duplicate key %q", syntax.JSONPointer.LastToken())
	case errors.Is(err, json.ErrUnknownName) && errors.As(err, &semantic):
		name := semantic.JSONPointer.LastToken()
		err = fmt.Errorf("unknown field %q", name)
		if twin := caseTwin(v, name); twin != "" {
			err = fmt.Errorf("unknown field %q: names are case-sensitive, this one is %q", name, twin)
		}
	case errors.As(err, &semantic) && semantic.JSONPointer == "":
		err = fmt.Errorf("want a JSON object, not %s", semantic.JSONKind)
	case errors.As(err, &semantic):
		err = fmt.Errorf("field %q must be %s", semantic.JSONPointer.LastToken(), jsonKind(semantic.GoType))
		if semantic.Err != nil {
			err = fmt.Errorf("%w: %w", err, semantic.Err)
		}
	case errors.Is(err, io.EOF):
		err = errors.New("empty body; want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		err = errors.New("malformed JSON: the body ends inside the object")
	case errors.As(err, &syntax):
		err = fmt.Errorf("malformed JSON at byte %d: %w", syntax.ByteOffset, syntax.Err)
	default:
		return fmt.Errorf("reading the body: %w", err) // the connection failed: classify decides
	}
	return fmt.Errorf("%w: %w", errBadBody, err)
}

// caseTwin is the JSON name of v's field that name matches but for case,
// "" when there is none.
func caseTwin(v any, name string) string {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return ""
	}
	for i := range t.NumField() {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if strings.EqualFold(tag, name) {
			return tag
		}
	}
	return ""
}

func jsonKind(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "of another type"
	}
	if t == reflect.TypeFor[time.Time]() {
		return "an RFC 3339 time, e.g. \"2026-11-26T14:00:00Z\""
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	}
	return "of another type"
}
