package web_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"
)

// apiCall is one request of the page to the API, as the browser saw it.
type apiCall struct {
	method, url string
	status      int    // the answer's status, 0 when none came
	logged      string // the browser's console error about it, "" when none
}

// unrecovered returns the console errors about API calls that a browser
// test must fail on. calls are in the order the browser sent them. A
// refusal (4xx) is the page's business: it shows it. A failed GET (5xx, or
// no answer) is forgiven when a GET of the same URL sent after it was
// answered 2xx: a poll that timed out under load, which the page's next
// poll recovered from. Anything else is returned: a failed POST or DELETE
// (an action, which nothing repeats), a poll whose URL never answered well
// again, a log entry about a request the ledger never saw sent.
func unrecovered(calls []apiCall) []string {
	var bad []string
	for i, c := range calls {
		if c.logged == "" || c.status >= 400 && c.status < 500 {
			continue
		}
		if c.method == "GET" && answeredLater(calls[i+1:], c.url) {
			continue
		}
		bad = append(bad, fmt.Sprintf("%s (%s %s)", c.logged, c.method, c.url))
	}
	return bad
}

// answeredLater says whether a GET of url among calls was answered 2xx.
func answeredLater(calls []apiCall, url string) bool {
	for _, c := range calls {
		if c.method == "GET" && c.url == url && c.status >= 200 && c.status < 300 {
			return true
		}
	}
	return false
}

// pageConsole holds what a page's console said, and the page's API calls.
type pageConsole struct {
	mu    sync.Mutex
	said  []string  // errors, warnings, exceptions, markup advice
	calls []apiCall // in the order the browser sent them
	byID  map[network.RequestID]int
}

// watchConsole collects, from now on, what the page's console says that a
// browser test fails on: errors, warnings, uncaught exceptions, Chromium's
// objections to the markup ("[DOM] …"), and the API calls unrecovered
// forgives not.
func watchConsole(t *testing.T, ctx context.Context) *pageConsole {
	t.Helper()
	c := &pageConsole{byID: map[network.RequestID]int{}}
	// Listen sees the network's events in the order they came, each before
	// the next; the console's entries about a request name it by its id.
	if err := chromedp.Listen(ctx, c.note); err != nil {
		t.Fatalf("listening to the page: %v", err)
	}
	console := chromedp.Console(ctx) // subscribes now, before the page loads
	go func() {
		for m, err := range console {
			if err != nil {
				return
			}
			if m.Source == "network" && strings.Contains(m.URL, "/api/") {
				continue // the ledger's, in note
			}
			dom := m.Type == chromedp.ConsoleDebug && strings.HasPrefix(m.Text, "[DOM]")
			if m.Type == chromedp.ConsoleError || m.IsException() || m.Type == chromedp.ConsoleWarning || dom {
				c.mu.Lock()
				c.said = append(c.said, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line))
				c.mu.Unlock()
			}
		}
	}()
	return c
}

// note keeps the ledger of API calls from the browser's events. It runs on
// the tab's reading goroutine: it only records.
func (c *pageConsole) note(ev any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch ev := ev.(type) {
	case *network.EventRequestWillBeSent:
		if strings.Contains(ev.Request.URL, "/api/") {
			c.byID[ev.RequestID] = len(c.calls)
			c.calls = append(c.calls, apiCall{method: ev.Request.Method, url: ev.Request.URL})
		}
	case *network.EventResponseReceived:
		if i, ok := c.byID[ev.RequestID]; ok {
			c.calls[i].status = int(ev.Response.Status)
		}
	case *log.EventEntryAdded:
		e := ev.Entry
		if e.Source != log.EntrySourceNetwork || !strings.Contains(e.URL, "/api/") {
			return
		}
		if i, ok := c.byID[e.NetworkRequestID]; ok && c.calls[i].logged == "" {
			c.calls[i].logged = e.Text
		} else {
			c.calls = append(c.calls, apiCall{url: e.URL, logged: e.Text})
		}
	}
}

// problems lists what the test fails on, as of now: call it at the test's
// end, for a poll's failure is forgiven only by a success before then.
func (c *pageConsole) problems() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append(slices.Clone(c.said), unrecovered(c.calls)...)
}

// failedCalls counts the API calls logged with a 5xx answer or none.
func (c *pageConsole) failedCalls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, call := range c.calls {
		if call.logged != "" && (call.status == 0 || call.status >= 500) {
			n++
		}
	}
	return n
}

// TestUnrecovered: a poll's failure is forgiven by a later success of the
// same URL, nothing else is.
func TestUnrecovered(t *testing.T) {
	const (
		product = "http://h/api/products/7"
		other   = "http://h/api/products/8"
		runs    = "http://h/api/runs"
		e503    = "the server responded with a status of 503"
	)
	get := func(url string, status int, logged string) apiCall { return apiCall{"GET", url, status, logged} }
	for _, tc := range []struct {
		name  string
		calls []apiCall
		want  []string
	}{
		{"a poll's 503, then its success", []apiCall{get(product, 503, e503), get(product, 200, "")}, nil},
		{"a poll unanswered, then its success", []apiCall{get(product, 0, "net::ERR_EMPTY_RESPONSE"), get(product, 200, "")}, nil},
		{"a poll's 503, recovered after another 503",
			[]apiCall{get(product, 503, e503), get(product, 503, e503), get(product, 200, "")}, nil},
		{"a poll's 503, nothing after", []apiCall{get(product, 200, ""), get(product, 503, e503)},
			[]string{e503 + " (GET " + product + ")"}},
		{"a poll's 503, then 503 to the end", []apiCall{get(product, 503, e503), get(product, 503, e503)},
			[]string{e503 + " (GET " + product + ")", e503 + " (GET " + product + ")"}},
		{"a poll's 503, then another product's success", []apiCall{get(product, 503, e503), get(other, 200, "")},
			[]string{e503 + " (GET " + product + ")"}},
		{"an action's 503, then a GET of its URL", []apiCall{{"POST", runs, 503, e503}, get(runs, 200, "")},
			[]string{e503 + " (POST " + runs + ")"}},
		{"a refusal", []apiCall{{"POST", runs, 409, "status of 409"}, get(product, 404, "status of 404")}, nil},
		{"an entry about a request never seen sent", []apiCall{{url: product, logged: e503}, get(product, 200, "")},
			[]string{e503 + " ( " + product + ")"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, unrecovered(tc.calls)); diff != "" {
				t.Errorf("unrecovered (-want +got):\n%s", diff)
			}
		})
	}
}
