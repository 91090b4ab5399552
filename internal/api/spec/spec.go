// Package spec builds the API's OpenAPI 3.1 description, docs/openapi.yaml,
// from the operations listed here and the body types of package api, so
// that the description and the code cannot drift apart: TestDocIsCurrent
// compares the file with what Build makes, the server's tests validate
// every request and answer they exchange against the file, and they check
// that its paths are the server's routes.
package spec

import (
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3gen"
	"sigs.k8s.io/yaml"

	"seckill/internal/api"
)

// Who may call an operation.
type access int

const (
	anyone   access = iota
	buyer           // a buyer's token, or a user_id on a lab product
	operator        // the operator's token
	class           // the class token, or the operator's
	// anyone, and the class token or the operator's reads more (a class's
	// names)
	anyoneOrClass
)

// An op is one operation: its route, what it takes, and what it answers
// besides an api.Error (every 4xx and 5xx).
type op struct {
	method, path string // the path as gin writes it (":id")
	summary      string
	who          access
	body         any // the request body's type; nil: none
	optional     bool
	answers      []answer
}

// An answer is a status and its body's type: nil for none, a string for
// a media type other than JSON.
type answer struct {
	status int
	body   any
}

// freeForm is a JSON object the service passes through: the WebAuthn
// ceremony's options and credentials.
type freeForm map[string]any

// unavailable is GET /healthz's 503.
type unavailable struct {
	Status string `json:"status"`
	api.Error
}

// ops is the API as the server routes it (internal/server/routes.go).
var ops = []op{
	{"GET", "/healthz", "Redis and the database answer", anyone, nil, false, []answer{{200, api.Health{}}, {503, unavailable{}}}},
	{"GET", "/metrics", "Prometheus metrics", anyone, nil, false, []answer{{200, "text/plain"}}},
	{"GET", "/openapi.json", "this description, as JSON", anyone, nil, false, []answer{{200, freeForm{}}}},
	{"GET", "/api/locks", "the lock ladder, with what each rung fixes and breaks", anyone, nil, false, []answer{{200, []api.LockInfo{}}}},
	{"GET", "/api/modes", "the ways to take stock", anyone, nil, false, []answer{{200, []api.ModeInfo{}}}},
	{"POST", "/api/products", "create a product, or start a new sale of it", operator, api.ProductRequest{}, false, []answer{{200, api.ProductView{}}}},
	{"GET", "/api/products/:id", "a product: its stock per shard, sold, sold out", anyone, nil, false, []answer{{200, api.ProductView{}}}},
	{"GET", "/api/products/:id/audit", "the product's sale audited: store, queue and orders", anyone, nil, false, []answer{{200, api.Audit{}}}},
	{"GET", "/api/products/:id/drain", "whether the product's queue is drained", anyone, nil, false, []answer{{200, api.Drain{}}}},
	{"POST", "/api/products/:id/path", "a purchase path token, with the solved captcha where the product asks for one", buyer, api.PathRequest{}, true, []answer{{201, api.Path{}}}},
	{"POST", "/api/products/:id/reservation", "the buyer's reservation of a product that sells only to buyers who reserved, until its opening: 201 stored, 200 stored before", buyer, api.ReservationRequest{}, true, []answer{{201, api.Reservation{}}, {200, api.Reservation{}}}},
	{"POST", "/api/products/:id/reconcile", "return the units of takes whose order never came", operator, nil, false, []answer{{200, api.Reconciliation{}}}},
	{"POST", "/api/accounts", "make an account", anyone, api.AccountRequest{}, false, []answer{{201, api.Account{}}}},
	{"POST", "/api/accounts/bulk", "make and sign in many demo accounts (the harness's)", operator, api.BulkAccounts{}, false, []answer{{201, api.BulkSessions{}}}},
	{"GET", "/api/accounts/options", "what making an account asks", anyone, nil, false, []answer{{200, api.AccountOptions{}}}},
	{"POST", "/api/accounts/current/password", "change the signed-in buyer's password; every session ends", buyer, api.PasswordChange{}, false, []answer{{204, nil}}},
	{"POST", "/api/sessions", "sign in: a buyer's token", anyone, api.SessionRequest{}, false, []answer{{201, api.Session{}}}},
	{"GET", "/api/sessions/current", "the signed-in buyer", buyer, nil, false, []answer{{200, api.CurrentSession{}}}},
	{"DELETE", "/api/sessions/current", "sign out", buyer, nil, false, []answer{{204, nil}}},
	{"POST", "/api/accounts/current/passkeys/begin", "begin registering a passkey (WebAuthn options)", buyer, nil, false, []answer{{200, freeForm{}}}},
	{"POST", "/api/accounts/current/passkeys/finish", "finish registering a passkey (the WebAuthn credential)", buyer, freeForm{}, false, []answer{{204, nil}}},
	{"POST", "/api/sessions/passkey/begin", "begin signing in with a passkey (WebAuthn options)", anyone, nil, false, []answer{{200, freeForm{}}}},
	{"POST", "/api/sessions/passkey/finish", "finish signing in with a passkey: a buyer's token", anyone, freeForm{}, false, []answer{{201, api.Session{}}}},
	{"POST", "/api/captcha", "a captcha to solve", anyone, api.CaptchaRequest{}, true, []answer{{201, api.Captcha{}}}},
	{"GET", "/api/captcha/:id", "a captcha's image", anyone, nil, false, []answer{{200, "image/png"}}},
	{"POST", "/api/orders", "buy: 201 with the order, or 202 once it is queued (async, mq)", buyer, api.OrderRequest{}, false, []answer{{201, api.Order{}}, {202, api.Order{}}}},
	{"POST", "/api/orders/lookup", "which of the buyer's orders are written", buyer, api.LookupRequest{}, false, []answer{{200, api.Lookup{}}}},
	{"GET", "/api/orders/:id", "an order, to its buyer", buyer, nil, false, []answer{{200, api.Order{}}}},
	{"POST", "/api/orders/:id/pay", "pay an order", buyer, api.BuyerRequest{}, true, []answer{{200, api.Order{}}}},
	{"POST", "/api/orders/:id/cancel", "cancel an order; its unit goes back on sale", buyer, api.BuyerRequest{}, true, []answer{{200, api.Order{}}}},
	{"POST", "/api/runs", "start a lab run", class, api.RunSpec{}, false, []answer{{202, api.Run{}}}},
	{"GET", "/api/runs", "the lab's runs, finished, going and queued; ?seat= keeps one seat's; the seats and students of others' runs are the class's to read", anyoneOrClass, nil, false, []answer{{200, []api.Run{}}}},
	{"GET", "/api/runs/:id", "a lab run, with its progress and result; its seat and student are read with ?seat= that seat, or by the class", anyoneOrClass, nil, false, []answer{{200, api.Run{}}}},
	{"GET", "/api/runs/:id/timeline", "a lab run's races as a timeline", anyone, nil, false, []answer{{200, api.Timeline{}}}},
	{"POST", "/api/class/answers", "keep a class seat's answer to a course lesson", class, api.ClassAnswer{}, false, []answer{{201, api.ClassAnswer{}}}},
	{"GET", "/api/class/answers", "the class's answers by lesson: the teacher's view", operator, nil, false, []answer{{200, []api.ClassLesson{}}}},
}

// Routes returns every operation as "METHOD /path" with gin's ":id".
func Routes() []string {
	out := make([]string, len(ops))
	for i, o := range ops {
		out[i] = o.method + " " + o.path
	}
	return out
}

// Build makes the description.
func Build() (*openapi3.T, error) {
	doc := &openapi3.T{
		OpenAPI: "3.1.0",
		Info: &openapi3.Info{Title: "seckill", Version: "1",
			Description: "A flash sale's HTTP API. docs/API.md says what each answer means; this file is built from internal/api/spec and checked by the server's tests."},
		Paths: openapi3.NewPaths(),
		Components: &openapi3.Components{
			Schemas: openapi3.Schemas{},
			SecuritySchemes: openapi3.SecuritySchemes{
				"buyer":    bearer("a buyer's token (POST /api/sessions); on a lab product, a user_id in the body instead"),
				"operator": bearer("the operator's token (ADMIN_TOKEN, or the one the service printed at start)"),
				"class":    bearer("the class token, a student's: lab runs and lesson answers only (the service prints it at start, beside the operator's)"),
			},
		},
	}
	requests := map[reflect.Type]bool{}
	for _, o := range ops {
		if o.body != nil {
			reachable(reflect.TypeOf(o.body), requests)
		}
	}
	g := openapi3gen.NewGenerator(openapi3gen.UseAllExportedFields(), openapi3gen.SchemaCustomizer(customizer(requests)),
		openapi3gen.CreateComponentSchemas(openapi3gen.ExportComponentSchemasOptions{ExportComponentSchemas: true, ExportTopLevelSchema: true}),
		openapi3gen.CreateTypeNameGenerator(func(t reflect.Type) string { return t.Name() }))
	schema := func(v any) (*openapi3.SchemaRef, error) {
		return g.NewSchemaRefForValue(v, doc.Components.Schemas)
	}
	errRef, err := schema(api.Error{})
	if err != nil {
		return nil, err
	}
	for _, o := range ops {
		item := doc.Paths.Value(openAPIPath(o.path))
		if item == nil {
			item = &openapi3.PathItem{}
			doc.Paths.Set(openAPIPath(o.path), item)
		}
		operation, err := o.operation(schema, errRef)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", o.method, o.path, err)
		}
		item.SetOperation(o.method, operation)
	}
	return doc, nil
}

func (o op) operation(schema func(any) (*openapi3.SchemaRef, error), errRef *openapi3.SchemaRef) (*openapi3.Operation, error) {
	op := &openapi3.Operation{Summary: o.summary, Responses: openapi3.NewResponses()}
	op.Responses.Delete("default")
	switch o.who {
	case buyer:
		op.Security = &openapi3.SecurityRequirements{{"buyer": {}}, {}}
	case operator:
		op.Security = &openapi3.SecurityRequirements{{"operator": {}}}
	case class:
		op.Security = &openapi3.SecurityRequirements{{"class": {}}, {"operator": {}}}
	case anyoneOrClass:
		op.Security = &openapi3.SecurityRequirements{{"class": {}}, {"operator": {}}, {}}
	}
	for _, name := range pathParams(o.path) {
		id := openapi3.NewStringSchema()
		if strings.HasPrefix(o.path, "/api/products/") || strings.HasPrefix(o.path, "/api/orders/") {
			id = id.WithPattern(`^[0-9]+$`) // decimal digits, and nothing else (docs/API.md)
		}
		op.Parameters = append(op.Parameters, &openapi3.ParameterRef{Value: openapi3.NewPathParameter(name).WithSchema(id)})
	}
	if o.body != nil {
		ref, err := schema(o.body)
		if err != nil {
			return nil, err
		}
		op.RequestBody = &openapi3.RequestBodyRef{Value: openapi3.NewRequestBody().
			WithRequired(!o.optional).WithJSONSchemaRef(ref)}
	}
	for _, a := range o.answers {
		desc := http.StatusText(a.status)
		r := &openapi3.Response{Description: &desc}
		switch body := a.body.(type) {
		case nil:
		case string:
			r.Content = openapi3.Content{body: &openapi3.MediaType{Schema: openapi3.NewStringSchema().NewRef()}}
		default:
			ref, err := schema(body)
			if err != nil {
				return nil, err
			}
			r.Content = openapi3.NewContentWithJSONSchemaRef(ref)
		}
		op.Responses.Set(strconv.Itoa(a.status), &openapi3.ResponseRef{Value: r})
	}
	if !slices.ContainsFunc(o.answers, func(a answer) bool { return a.status >= 400 }) {
		desc := "an error: code says which, error says what to do"
		op.Responses.Set("default", &openapi3.ResponseRef{Value: &openapi3.Response{Description: &desc,
			Content: openapi3.NewContentWithJSONSchemaRef(errRef)}})
	}
	return op, nil
}

func bearer(desc string) *openapi3.SecuritySchemeRef {
	s := openapi3.NewJWTSecurityScheme()
	s.BearerFormat, s.Description = "", desc
	return &openapi3.SecuritySchemeRef{Value: s}
}

// openAPIPath writes gin's ":id" as OpenAPI's "{id}".
func openAPIPath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		if name, ok := strings.CutPrefix(s, ":"); ok {
			parts[i] = "{" + name + "}"
		}
	}
	return strings.Join(parts, "/")
}

func pathParams(p string) []string {
	var out []string
	for s := range strings.SplitSeq(p, "/") {
		if name, ok := strings.CutPrefix(s, ":"); ok {
			out = append(out, name)
		}
	}
	return out
}

var timeType = reflect.TypeFor[time.Time]()

// customizer makes the generated schemas say what the service's JSON
// does. A time is an RFC 3339 string. A pointer may be sent as null, and so
// may a slice or a map that is not omitted when empty (Go writes a nil one
// as null): 3.1's type lists, not 3.0's nullable. No field is sent but
// those named (additionalProperties false). In an answer, a struct's
// fields without omitempty, and not pointers, are always sent (required);
// in a request (the types requests reach), every field may be left out:
// the service defaults it.
func customizer(requests map[reflect.Type]bool) openapi3gen.SchemaCustomizerFn {
	return func(name string, t reflect.Type, tag reflect.StructTag, s *openapi3.Schema) error {
		_, opts, _ := strings.Cut(tag.Get("json"), ",")
		omitted := strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero")
		if s.Nullable || (t.Kind() == reflect.Slice && t.Elem().Kind() != reflect.Uint8 || t.Kind() == reflect.Map) && !omitted && name != "_root" {
			s.Nullable = false
			orNull(s)
		}
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t == timeType || t.Kind() != reflect.Struct {
			return nil
		}
		no := false
		s.AdditionalProperties = openapi3.AdditionalProperties{Has: &no}
		if !requests[t] {
			s.Required = required(t)
		}
		return nil
	}
}

func orNull(s *openapi3.Schema) {
	if s.Type != nil && !s.Type.Includes("null") {
		types := append(openapi3.Types{}, *s.Type...)
		types = append(types, "null")
		s.Type = &types
	}
}

// reachable adds to seen the struct types t reaches, t's own included.
func reachable(t reflect.Type, seen map[reflect.Type]bool) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == timeType || seen[t] {
		return
	}
	seen[t] = true
	for f := range t.Fields() {
		reachable(f.Type, seen)
	}
}

// required lists the JSON names of t's fields sent always.
func required(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			out = append(out, required(f.Type)...)
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || f.Type.Kind() == reflect.Pointer || strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero") {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	return out
}

// YAML is Build's description as docs/openapi.yaml holds it.
func YAML() ([]byte, error) {
	doc, err := Build()
	if err != nil {
		return nil, err
	}
	j, err := doc.MarshalJSON()
	if err != nil {
		return nil, err
	}
	y, err := yaml.JSONToYAML(j)
	if err != nil {
		return nil, err
	}
	return append([]byte("# Built by internal/api/spec: go test ./internal/api/spec -update. Do not edit.\n"), y...), nil
}
