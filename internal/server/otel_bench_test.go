package server_test

import (
	"fmt"
	"net/http"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"seckill/internal/app"
	"seckill/internal/telemetry"
	"seckill/internal/testkit/testenv"
)

// BenchmarkPurchaseTracing is one async purchase through the handler with
// tracing off (no OTEL_* set: what every deployment without a collector
// runs) and on (every trace sampled, batched to an exporter that drops
// them: the SDK's and the instrumentations' cost without the network's).
// One buyer per purchase, one at a time, on testenv's backends, with no
// consumer and no reconciler running: what is measured is the purchase.
func BenchmarkPurchaseTracing(b *testing.B) {
	for _, tc := range []struct {
		name string
		on   bool
	}{{"off", false}, {"on", true}} {
		b.Run(tc.name, func(b *testing.B) {
			if tc.on {
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
					sdktrace.WithBatcher(tracetest.NewNoopExporter()))
				restore := telemetry.Use(tp)
				b.Cleanup(func() {
					restore()
					tp.Shutdown(b.Context())
				})
			}
			benchAsyncPurchases(b)
		})
	}
}

func benchAsyncPurchases(b *testing.B) {
	cfg := testenv.Config(b)
	cfg.LogLevel = "error"
	// The purchase's path alone: no consumer writing meanwhile (the orders
	// stay queued), no reconciler passes.
	cfg.Consume, cfg.ReconcileEvery = false, 0
	srv := testenv.Start(b, cfg, app.Extras{})
	id := testenv.ProductID(b)
	p := fmt.Sprintf(`{"id":%d,"stock":%d,"shards":5,"mode":"async","lab":true}`, id, b.N+1)
	if rec := post(srv.Handler, "/api/products", p, srv.Config.AdminToken); rec.Code != http.StatusOK {
		b.Fatalf("creating product %d: %d %s", id, rec.Code, rec.Body)
	}
	b.Cleanup(func() { testenv.DropProductKeys(b, srv.RedisAddr(), id) })
	bodies := make([]string, b.N)
	for i := range b.N {
		bodies[i] = fmt.Sprintf(`{"user_id":%d,"product_id":%d}`, i+1, id)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if rec := post(srv.Handler, "/api/orders", bodies[i], ""); rec.Code != http.StatusAccepted {
			b.Fatalf("purchase %d: %d %s", i, rec.Code, rec.Body)
		}
	}
}
