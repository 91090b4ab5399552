package server_test

import (
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"seckill/internal/api"
	"seckill/internal/telemetry"
	"seckill/internal/testkit"
	"seckill/internal/testkit/testenv"
)

// TestTraceFollowsAPurchase: with tracing on (an in-memory recorder in
// place of the OTLP exporter), one purchase answered 202 and the row its
// consumer wrote are one picture: the HTTP request's trace holds the
// purchase, its Redis script and its enqueue (or publish); the consumer's
// batch links to that span and its INSERT is the batch's child.
func TestTraceFollowsAPurchase(t *testing.T) {
	t.Run("async", func(t *testing.T) { testTraceFollows(t, api.ModeAsync, "") })
	t.Run("mq", func(t *testing.T) {
		url := os.Getenv("RABBITMQ_URL")
		if url == "" {
			testkit.Skip(t, testkit.NoRabbitMQ, "RABBITMQ_URL is not set: the mq mode needs RabbitMQ, which a bare machine lacks")
		}
		testTraceFollows(t, api.ModeMQ, url)
	})
}

func testTraceFollows(t *testing.T, mode, rabbit string) {
	rec := tracetest.NewSpanRecorder()
	// Before the service starts: it installs the instrumentations only
	// when tracing is on. Restored after it stopped (cleanups run last first).
	t.Cleanup(telemetry.Use(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))))
	cfg := testenv.Config(t)
	if rabbit != "" {
		cfg.RabbitMQURL = rabbit
		testenv.DeleteQueueAfter(t, cfg)
	}
	e := start(t, cfg)
	id := e.reset(product{"stock": 3, "shards": 2, "mode": mode})
	var o api.Order
	if st := e.do("POST", "/api/orders", map[string]any{"user_id": 1, "product_id": id}, &o); st != http.StatusAccepted {
		t.Fatalf("buying: status %d, want 202", st)
	}

	// The batch span ends once its orders are written and acknowledged.
	var batch sdktrace.ReadOnlySpan
	testenv.WaitFor(t, "the consumer's batch span of order "+o.ID, func() bool {
		batch = find(rec.Ended(), func(s sdktrace.ReadOnlySpan) bool {
			return s.Name() == "outbox.batch" && slices.ContainsFunc(s.Links(), func(l sdktrace.Link) bool { return has(l.Attributes, "seckill.order_id", o.ID) })
		})
		return batch != nil
	})
	spans := rec.Ended()
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = s
	}
	// under reports whether s descends from ancestor.
	under := func(s, ancestor sdktrace.ReadOnlySpan) bool {
		for p := s.Parent(); p.IsValid(); {
			if p.SpanID() == ancestor.SpanContext().SpanID() {
				return true
			}
			up, ok := byID[p.SpanID()]
			if !ok {
				return false
			}
			p = up.Parent()
		}
		return false
	}
	httpSpan := find(spans, func(s sdktrace.ReadOnlySpan) bool {
		return strings.Contains(s.InstrumentationScope().Name, "otelgin") && s.SpanKind() == trace.SpanKindServer &&
			has(s.Attributes(), "http.route", "/api/orders")
	})
	if httpSpan == nil {
		t.Fatalf("no otelgin span of POST /api/orders among %s", names(spans))
	}
	inTrace := func(name string, also func(sdktrace.ReadOnlySpan) bool) sdktrace.ReadOnlySpan {
		t.Helper()
		s := find(spans, func(s sdktrace.ReadOnlySpan) bool {
			return s.Name() == name && s.SpanContext().TraceID() == httpSpan.SpanContext().TraceID() && under(s, httpSpan) && also(s)
		})
		if s == nil {
			t.Fatalf("no span %s under the request's (trace %s) among %s", name, httpSpan.SpanContext().TraceID(), names(spans))
		}
		return s
	}
	buy := inTrace("order.buy", func(s sdktrace.ReadOnlySpan) bool { return has(s.Attributes(), "seckill.order_id", o.ID) })
	inTrace("idgen.draw", func(s sdktrace.ReadOnlySpan) bool { return under(s, buy) })
	take := inTrace("stock.take", func(s sdktrace.ReadOnlySpan) bool { return has(s.Attributes(), "seckill.order_id", o.ID) })
	shard := inTrace("stock.shard", func(s sdktrace.ReadOnlySpan) bool { return under(s, take) })
	// The script is redisotel's span, under the shard it was sent to.
	inTrace("evalsha", func(s sdktrace.ReadOnlySpan) bool {
		return strings.Contains(s.InstrumentationScope().Name, "redisotel") && under(s, shard)
	})
	// The span the queued order carries: the enqueue (in the async take's
	// script, under the shard), or the publish after the take.
	var queued sdktrace.ReadOnlySpan
	if mode == api.ModeMQ {
		queued = inTrace("outbox.publish", func(s sdktrace.ReadOnlySpan) bool {
			return has(s.Attributes(), "seckill.order_id", o.ID) && under(s, buy)
		})
	} else {
		queued = inTrace("outbox.enqueue", func(s sdktrace.ReadOnlySpan) bool {
			return has(s.Attributes(), "seckill.order_id", o.ID) && under(s, shard)
		})
	}

	link := batch.Links()[slices.IndexFunc(batch.Links(), func(l sdktrace.Link) bool { return has(l.Attributes, "seckill.order_id", o.ID) })]
	if link.SpanContext.TraceID() != httpSpan.SpanContext().TraceID() || link.SpanContext.SpanID() != queued.SpanContext().SpanID() {
		t.Errorf("the batch links to %v, want the purchase's %s span %v", link.SpanContext, queued.Name(), queued.SpanContext())
	}
	insert := find(spans, func(s sdktrace.ReadOnlySpan) bool {
		return strings.Contains(s.InstrumentationScope().Name, "gorm") && has(s.Attributes(), "db.operation", "insert") &&
			has(s.Attributes(), "db.sql.table", "orders") && s.Parent().SpanID() == batch.SpanContext().SpanID()
	})
	if insert == nil {
		t.Fatalf("no INSERT into orders under the batch's span among %s", names(spans))
	}
	if insert.SpanContext().TraceID() != batch.SpanContext().TraceID() {
		t.Errorf("the INSERT is in trace %s, the batch in %s", insert.SpanContext().TraceID(), batch.SpanContext().TraceID())
	}
}

func find(spans []sdktrace.ReadOnlySpan, f func(sdktrace.ReadOnlySpan) bool) sdktrace.ReadOnlySpan {
	if i := slices.IndexFunc(spans, f); i >= 0 {
		return spans[i]
	}
	return nil
}

func has(attrs []attribute.KeyValue, key, value string) bool {
	return slices.ContainsFunc(attrs, func(a attribute.KeyValue) bool { return string(a.Key) == key && a.Value.Emit() == value })
}

func names(spans []sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "\n  %s %s (%s) parent %s", s.SpanContext().TraceID(), s.Name(), s.InstrumentationScope().Name, s.Parent().SpanID())
	}
	return b.String()
}
