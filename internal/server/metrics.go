package server

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"seckill/internal/order"
	"seckill/internal/stock"
)

type metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	orders    *prometheus.CounterVec
	soldOut   prometheus.Counter
	lockTries *prometheus.CounterVec
	lockWait  *prometheus.HistogramVec
}

func newMetrics(reg *prometheus.Registry) *metrics {
	m := &metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_http_requests_total", Help: "HTTP requests by route template, method and status.",
		}, []string{"route", "method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "seckill_http_request_duration_seconds", Help: "HTTP request latency by route template.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}, []string{"route", "method"}),
		orders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_orders_total", Help: "Orders written, by lock strategy and mode.",
		}, []string{"lock", "mode"}),
		soldOut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seckill_sold_out_total", Help: "Purchases refused because the product was sold out.",
		}),
		lockTries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_lock_outcomes_total",
			Help: "Lock outcomes of rmw purchases: obtained, timeout, or lease_lost (the lock had expired before its release).",
		}, []string{"lock", "outcome"}),
		lockWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "seckill_lock_wait_seconds", Help: "Time rmw purchases spent acquiring locks.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 18),
		}, []string{"lock"}),
	}
	reg.MustRegister(m.requests, m.latency, m.orders, m.soldOut, m.lockTries, m.lockWait,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) handler() http.Handler { return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}) }

// observe records every request under its route template, so that
// /api/orders/123 and /api/orders/456 are one series. Every label comes from
// a closed set: a client that invents methods or paths must not grow
// /metrics.
func (m *metrics) observe(c *gin.Context) {
	start := time.Now()
	c.Next()
	route := c.FullPath() // a route template, or "" when none matched
	if route == "" {
		route = "unmatched"
	}
	method := c.Request.Method
	if !knownMethods[method] {
		method = "other"
	}
	m.requests.WithLabelValues(route, method, strconv.Itoa(c.Writer.Status())).Inc()
	m.latency.WithLabelValues(route, method).Observe(time.Since(start).Seconds())
}

// knownMethods are the methods of RFC 9110 and PATCH, the method labels
// besides "other".
var knownMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true, http.MethodPatch: true,
	http.MethodDelete: true, http.MethodConnect: true, http.MethodOptions: true, http.MethodTrace: true,
}

func (m *metrics) purchase(rc order.Receipt, err error) {
	switch {
	case err == nil:
		m.orders.WithLabelValues(rc.Lock, rc.Mode).Inc()
	case errors.Is(err, stock.ErrSoldOut):
		m.soldOut.Inc()
	}
	if rc.Mode == "" { // refused before a mode was chosen
		return
	}
	if mode, err := order.ModeNamed(rc.Mode); err != nil || !mode.Locked {
		return
	}
	switch {
	case errors.Is(err, stock.ErrLockTimeout):
		m.lockTries.WithLabelValues(rc.Lock, "timeout").Inc()
	case rc.LeaseLost:
		m.lockTries.WithLabelValues(rc.Lock, "lease_lost").Inc()
	case rc.LockWait > 0 || err == nil:
		m.lockTries.WithLabelValues(rc.Lock, "obtained").Inc()
	}
	if rc.LockWait > 0 {
		m.lockWait.WithLabelValues(rc.Lock).Observe(rc.LockWait.Seconds())
	}
}

// backlog reports the async mode's queue at each scrape: a few Redis
// commands per stream in use, bounded in time.
type backlog struct {
	queue                      Queue
	queued, delivered, streams *prometheus.Desc
	oldest                     *prometheus.Desc
}

func newBacklog(queue Queue) *backlog {
	return &backlog{
		queue:     queue,
		queued:    prometheus.NewDesc("seckill_queue_orders", "Orders taken and queued (async mode), not written yet.", nil, nil),
		delivered: prometheus.NewDesc("seckill_queue_delivered", "Queued orders delivered to a consumer and not acknowledged.", nil, nil),
		streams:   prometheus.NewDesc("seckill_queue_streams", "Streams the consumers read.", nil, nil),
		oldest:    prometheus.NewDesc("seckill_queue_oldest_seconds", "Age of the oldest queued order; 0 when none is.", nil, nil),
	}
}

func (b *backlog) Describe(ch chan<- *prometheus.Desc) {
	ch <- b.queued
	ch <- b.delivered
	ch <- b.streams
	ch <- b.oldest
}

func (b *backlog) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	q, err := b.queue.Backlog(ctx)
	if err != nil {
		return // Redis did not answer: no sample rather than a wrong one
	}
	ch <- prometheus.MustNewConstMetric(b.queued, prometheus.GaugeValue, float64(q.Queued))
	ch <- prometheus.MustNewConstMetric(b.delivered, prometheus.GaugeValue, float64(q.Delivered))
	ch <- prometheus.MustNewConstMetric(b.streams, prometheus.GaugeValue, float64(q.Streams))
	ch <- prometheus.MustNewConstMetric(b.oldest, prometheus.GaugeValue, q.Oldest.Seconds())
}

// GateNotices are the counts of the notices a gate notifier sent.
type GateNotices interface {
	Sent() int64
	Failed() int64
}

// gateCounts reports the notifier's own counters at each scrape, under one
// name with a closed label set: outcome is sent or failed.
type gateCounts struct {
	gate    GateNotices
	notices *prometheus.Desc
}

func newGateCounts(g GateNotices) *gateCounts {
	return &gateCounts{gate: g, notices: prometheus.NewDesc("seckill_gate_notices_total",
		"Notices (one batch of products to one gate) that products have stock again: sent, or failed after every try.",
		[]string{"outcome"}, nil)}
}

func (g *gateCounts) Describe(ch chan<- *prometheus.Desc) { ch <- g.notices }

func (g *gateCounts) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(g.notices, prometheus.CounterValue, float64(g.gate.Sent()), "sent")
	ch <- prometheus.MustNewConstMetric(g.notices, prometheus.CounterValue, float64(g.gate.Failed()), "failed")
}

// AdmissionStats are the counts of the purchases' concurrency limit.
type AdmissionStats interface {
	Admitted() int64
	Shed() int64
	Limit() int
	InFlight() int
}

// admissionMetrics read the limit's own counts at each scrape: the limit
// keeps them (atomics), so the purchase path pays nothing more.
func admissionMetrics(s AdmissionStats) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "seckill_admission_admitted_total",
			Help: "Purchases the concurrency limit let in."}, func() float64 { return float64(s.Admitted()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "seckill_admission_shed_total",
			Help: "Purchases shed by the concurrency limit (503 overloaded)."}, func() float64 { return float64(s.Shed()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "seckill_admission_limit",
			Help: "The concurrency limit: purchases let in at once."}, func() float64 { return float64(s.Limit()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "seckill_admission_in_flight",
			Help: "Purchases let in by the concurrency limit and not finished."}, func() float64 { return float64(s.InFlight()) }),
	}
}

// ConsumerStats are the counts of a queue's consumer (*outbox.Consumer).
type ConsumerStats interface {
	Batches() int64
	Orders() int64
	Writing() time.Duration
	Refused() int64
}

// consumerCounts report the consumers' own counts at each scrape, labelled
// by queue (a closed set: the ones app runs).
type consumerCounts struct {
	consumers                          map[string]ConsumerStats
	batches, orders, duration, refused *prometheus.Desc
}

func newConsumerCounts(cs map[string]ConsumerStats) *consumerCounts {
	return &consumerCounts{consumers: cs,
		batches: prometheus.NewDesc("seckill_consumer_batches_total", "Batches of queued orders the consumer wrote.", []string{"queue"}, nil),
		orders:  prometheus.NewDesc("seckill_consumer_orders_total", "Queued orders in the batches the consumer wrote.", []string{"queue"}, nil),
		duration: prometheus.NewDesc("seckill_consumer_write_seconds_total",
			"Time the consumer's batch writes took, from the first try to the one that went through.", []string{"queue"}, nil),
		refused: prometheus.NewDesc("seckill_consumer_refused_total",
			"Queued orders the database refused for the row: dead-lettered, their units back on sale.", []string{"queue"}, nil),
	}
}

func (c *consumerCounts) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.batches
	ch <- c.orders
	ch <- c.duration
	ch <- c.refused
}

func (c *consumerCounts) Collect(ch chan<- prometheus.Metric) {
	for queue, s := range c.consumers {
		ch <- prometheus.MustNewConstMetric(c.batches, prometheus.CounterValue, float64(s.Batches()), queue)
		ch <- prometheus.MustNewConstMetric(c.orders, prometheus.CounterValue, float64(s.Orders()), queue)
		ch <- prometheus.MustNewConstMetric(c.duration, prometheus.CounterValue, s.Writing().Seconds(), queue)
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(s.Refused()), queue)
	}
}
