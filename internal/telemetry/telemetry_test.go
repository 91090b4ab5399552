package telemetry

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestEnabled(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"nothing set", nil, false},
		{"an endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true},
		{"a traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true},
		{"otlp named", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{"exporter none", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, false},
		{"sdk disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, false},
	} {
		if got := Enabled(env(tc.env)); got != tc.want {
			t.Errorf("%s: Enabled = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestSetupOff(t *testing.T) {
	shutdown, err := Setup(t.Context(), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if On() {
		t.Fatal("tracing is on with no OTEL_* variable set")
	}
	if err := shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := Setup(t.Context(), env(map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"})); err == nil {
		t.Fatal("an exporter the service lacks was accepted")
	}
}

// TestOffIsFree: with tracing off, a moment's span and a message's trace
// context allocate nothing.
func TestOffIsFree(t *testing.T) {
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		c, span := Start(ctx, "moment")
		if span.IsRecording() {
			t.Fatal("a span records while tracing is off")
		}
		_ = TraceParent(c)
		span.End()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per moment with tracing off, want 0", allocs)
	}
}

func record(t *testing.T) *tracetest.SpanRecorder {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	t.Cleanup(Use(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))))
	return rec
}

// TestTraceParentLinks: the traceparent a message carries names the span
// that sent it, and a batch started from it links to that span.
func TestTraceParentLinks(t *testing.T) {
	rec := record(t)
	ctx, sent := Start(context.Background(), "send")
	tp := TraceParent(ctx)
	sent.End()
	if got := SpanContextOf(tp); got.TraceID() != sent.SpanContext().TraceID() || got.SpanID() != sent.SpanContext().SpanID() {
		t.Fatalf("traceparent %q reads as %v, want the span %v", tp, got, sent.SpanContext())
	}
	_, batch := StartLinked(ctx, "batch", []string{tp, "garbage"}, func(int) []attribute.KeyValue { return nil })
	batch.End()
	spans := rec.Ended()
	b := spans[len(spans)-1]
	if b.Parent().IsValid() {
		t.Errorf("the batch is a child of %v; want a root of its own", b.Parent())
	}
	if len(b.Links()) != 1 || b.Links()[0].SpanContext.SpanID() != sent.SpanContext().SpanID() {
		t.Errorf("the batch's links %v; want one, to the sender", b.Links())
	}
}

func TestLogHandler(t *testing.T) {
	rec := record(t)
	_ = rec
	var buf bytes.Buffer
	log := slog.New(LogHandler(slog.NewTextHandler(&buf, nil))).With("k", "v")
	log.InfoContext(context.Background(), "outside")
	ctx, span := Start(context.Background(), "inside")
	log.InfoContext(ctx, "inside")
	span.End()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("logged %q", buf.String())
	}
	if strings.Contains(lines[0], "trace_id") {
		t.Errorf("a line outside any span carries a trace: %s", lines[0])
	}
	sc := span.SpanContext()
	for _, want := range []string{"trace_id=" + sc.TraceID().String(), "span_id=" + sc.SpanID().String(), "k=v"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("the line inside the span lacks %s: %s", want, lines[1])
		}
	}
}
