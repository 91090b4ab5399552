package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/gin-gonic/gin"
)

// errBadBody wraps every error of a body that is not the JSON asked for.
var errBadBody = errors.New("invalid body")

// decode reads the request's body, one JSON object and nothing after it,
// into v: every body this API takes goes through here. It refuses unknown
// fields (a typo such as "hold" for "hold_ms" would otherwise pass
// unnoticed) and trailing data.
func (s *Server) decode(c *gin.Context, v any) error {
	dec := json.NewDecoder(c.Request.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("unexpected data after the JSON object")
	}
	var (
		syntax   *json.SyntaxError
		typ      *json.UnmarshalTypeError
		tooLarge *http.MaxBytesError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &tooLarge):
		return fmt.Errorf("body larger than %d bytes: %w", maxBody, err)
	case errors.Is(err, io.EOF):
		err = errors.New("empty body; want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		err = errors.New("malformed JSON: the body ends inside the object")
	case errors.As(err, &syntax):
		err = fmt.Errorf("malformed JSON at byte %d: %v", syntax.Offset, syntax)
	case errors.As(err, &typ):
		err = fmt.Errorf("field %q must be %s, not %s", typ.Field, jsonKind(typ.Type.Kind().String()), typ.Value)
	}
	return fmt.Errorf("%w: %w", errBadBody, err)
}

func jsonKind(goKind string) string {
	switch goKind {
	case "int", "int64", "int32":
		return "an integer"
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	}
	return "of another type"
}
