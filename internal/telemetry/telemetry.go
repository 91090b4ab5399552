// Package telemetry is the service's OpenTelemetry tracing: the tracer
// provider set up from the standard OTEL_* environment, the spans of a
// purchase's own moments, the trace context a queued order carries (a W3C
// traceparent), and a slog handler that puts trace_id and span_id on the
// lines logged inside a span.
//
// With no OTEL_* exporter configured, tracing is off: no provider, no
// exporter, no instrumentation installed, and each moment's Start is one
// atomic load that returns a shared no-op span without allocating.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
)

// Name is the instrumentation scope of the service's own spans, and the
// service name when OTEL_SERVICE_NAME does not give one.
const Name = "seckill"

// on is whether tracing is on; read at every moment, written at start.
var on atomic.Bool

// On reports whether tracing is on: Setup found an exporter configured, or
// a test called Use.
func On() bool { return on.Load() }

// nop is the span a moment gets while tracing is off: shared, so that
// Start allocates nothing.
var nop trace.Span = noop.Span{}

// propagator carries a span's context as a W3C traceparent.
var propagator = propagation.TraceContext{}

// EnvNames are the OTEL_* variables Setup reads itself; the exporter and the
// SDK read the others of the specification (OTEL_EXPORTER_OTLP_HEADERS,
// OTEL_TRACES_SAMPLER_ARG, OTEL_RESOURCE_ATTRIBUTES …).
var EnvNames = []string{
	"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME", "OTEL_TRACES_SAMPLER",
	"OTEL_TRACES_SAMPLER_ARG", "OTEL_RESOURCE_ATTRIBUTES",
}

// Enabled reports whether getenv configures an exporter: an OTLP endpoint,
// or OTEL_TRACES_EXPORTER (otlp exports to the default localhost:4318);
// never with OTEL_SDK_DISABLED=true or
// OTEL_TRACES_EXPORTER=none.
func Enabled(getenv func(string) string) bool {
	exporter := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))
	switch {
	case strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true"), exporter == "none":
		return false
	case exporter != "":
		return true // otlp, or one Setup refuses
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// ErrExporter: OTEL_TRACES_EXPORTER names an exporter this service does not
// have (it has otlp and none).
var ErrExporter = errors.New("telemetry: unsupported OTEL_TRACES_EXPORTER")

// Setup turns tracing on when getenv configures an exporter (Enabled): an
// OTLP exporter over HTTP, or gRPC when OTEL_EXPORTER_OTLP_PROTOCOL (or its
// TRACES twin) is grpc, batching, with the sampler of OTEL_TRACES_SAMPLER
// (default: parentbased_always_on). It returns the shutdown that flushes the
// spans still batched; with tracing off, a shutdown that does nothing.
func Setup(ctx context.Context, getenv func(string) string) (shutdown func(context.Context) error, err error) {
	none := func(context.Context) error { return nil }
	if !Enabled(getenv) {
		return none, nil
	}
	if e := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); e != "" && e != "otlp" {
		return none, fmt.Errorf("%w %q", ErrExporter, e)
	}
	var exp sdktrace.SpanExporter
	protocol := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if protocol == "grpc" {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return none, fmt.Errorf("starting the OTLP trace exporter: %w", err)
	}
	// The default name first: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// (WithFromEnv, after it) override it.
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", Name)),
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost())
	if err != nil {
		return none, fmt.Errorf("describing the service to the tracer: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	Use(tp)
	return func(ctx context.Context) error {
		on.Store(false)
		return tp.Shutdown(ctx)
	}, nil
}

// Use makes tp the provider of every span (the global one, which otelgin,
// redisotel and GORM's plugin use too) and turns tracing on; restore turns
// it off again and puts the previous provider back. For Setup, and for tests
// and benchmarks with an in-memory recorder.
func Use(tp trace.TracerProvider) (restore func()) {
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagator)
	on.Store(true)
	return func() {
		on.Store(false)
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
	}
}

// tracer is the service's own, from the global provider at each use: Use may
// change it.
func tracer() trace.Tracer { return otel.GetTracerProvider().Tracer(Name) }

// Start starts a span of one of the purchase's moments, a child of ctx's.
// While tracing is off it returns ctx and a shared no-op span: nothing is
// allocated. Attributes are set on the span after, when it IsRecording, so
// that an untraced call builds none.
func Start(ctx context.Context, name string) (context.Context, trace.Span) {
	if !on.Load() {
		return ctx, nop
	}
	return tracer().Start(ctx, name)
}

// StartLinked starts a span of its own trace linked to each of the
// traceparents (the purchases a consumer's batch writes); attrs(i) are the
// attributes of the link to parents[i]. A parent that does not read is
// skipped. Off, it is Start's no-op.
func StartLinked(ctx context.Context, name string, parents []string, attrs func(i int) []attribute.KeyValue) (context.Context, trace.Span) {
	if !on.Load() {
		return ctx, nop
	}
	var links []trace.Link
	for i, p := range parents {
		if sc := SpanContextOf(p); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc, Attributes: attrs(i)})
		}
	}
	return tracer().Start(ctx, name, trace.WithLinks(links...), trace.WithNewRoot())
}

// TraceParent is ctx's span as a W3C traceparent, for a message to carry:
// "" when tracing is off or ctx holds no span.
func TraceParent(ctx context.Context) string {
	if !on.Load() || !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c["traceparent"]
}

// SpanContextOf reads a W3C traceparent; the zero (invalid) SpanContext when
// it does not read.
func SpanContextOf(traceparent string) trace.SpanContext {
	if traceparent == "" {
		return trace.SpanContext{}
	}
	ctx := propagator.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent})
	return trace.SpanContextFromContext(ctx)
}

// Fail marks span failed with err, unless err is nil.
func Fail(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}

// ChildrenOnly is the global provider for an instrumentation that would
// otherwise start a trace of its own for every background command (the
// consumers' reads, the reconciler's passes): its spans are started only
// under a span already there, a purchase's or a batch's.
func ChildrenOnly() trace.TracerProvider { return childrenOnly{} }

type childrenOnly struct{ embedded.TracerProvider }

func (childrenOnly) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return childTracer{name: name, opts: opts}
}

type childTracer struct {
	embedded.Tracer
	name string
	opts []trace.TracerOption
}

func (c childTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, nop
	}
	return otel.GetTracerProvider().Tracer(c.name, c.opts...).Start(ctx, name, opts...)
}
