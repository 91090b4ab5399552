package gate_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"seckill/internal/api"
	"seckill/internal/app"
	"seckill/internal/gate"
	"seckill/internal/testkit"
	"seckill/internal/testkit/child"
	"seckill/internal/testkit/testenv"
)

// TestMain lets this test binary be the service processes it starts.
func TestMain(m *testing.M) { child.Main(testkit.Summarize(m.Run), app.StartChild) }

const secret = "test-gate-secret"

// fakeGate records the stock-back notices, as the gate's control endpoint
// receives them.
type fakeGate struct {
	mu      sync.Mutex
	notices []notice
}

type notice struct {
	products string
	secret   string
}

func (g *fakeGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != api.GateStockBackPath {
		http.NotFound(w, r)
		return
	}
	g.mu.Lock()
	g.notices = append(g.notices, notice{r.URL.Query().Get("products"), r.Header.Get(api.HeaderGateSecret)})
	g.mu.Unlock()
}

// told counts the notices naming product id.
func (g *fakeGate) told(t *testing.T, id int64) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, nt := range g.notices {
		if nt.secret != secret {
			t.Errorf("a notice came with secret %q, want %q", nt.secret, secret)
		}
		if slices.Contains(strings.Split(nt.products, ","), strconv.FormatInt(id, 10)) {
			n++
		}
	}
	return n
}

// cluster is two service processes on one Redis of their own and one
// SQLite file, telling the gates at gateURLs.
type cluster struct {
	urls []string
}

func startCluster(t *testing.T, gateURLs []string) *cluster {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r, err := child.StartRedis(t.Context(), exe, dir, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Kill)
	// Every backend named, so that the test's environment (REDIS_ADDR,
	// MYSQL_DSN, RABBITMQ_URL, ADMIN_TOKEN) is not what the children use.
	// No per-address limit: every buyer here is one address, loopback.
	// Demo accounts on: the buyers sign in by name (a real redis-server
	// leaves them off by default).
	args := []string{"-addr", "127.0.0.1:0", "-redis", r.Addr, "-mysql", "", "-sqlite", filepath.Join(dir, "seckill.db"),
		"-rabbitmq-url", "", "-admin-token", operatorToken, "-rate-limit", "0", "-address-rate", "0", "-demo-stock", "0", "-log-level", "warn",
		"-demo-accounts", "true",
		"-gate", strings.Join(gateURLs, ","), "-gate-secret", secret}
	c := &cluster{}
	for range 2 {
		in, err := child.StartInstance(t.Context(), exe, args, os.Stderr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = in.Stop(10 * time.Second) })
		c.urls = append(c.urls, in.URL)
	}
	return c
}

var client = &http.Client{Timeout: 10 * time.Second}

// postAs sends a JSON body for the buyer of token ("" for none) and
// returns the status, the headers and the body.
func postAs(t *testing.T, url, token string, body any) (int, http.Header, []byte) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", api.MediaType)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, out
}

// operatorToken is the children's ADMIN_TOKEN.
const operatorToken = "gate-test-operator"

func reset(t *testing.T, base string, id int64, stock int) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"id": id, "stock": stock, "shards": 2, "reset": true})
	req, err := http.NewRequest(http.MethodPost, base+"/api/products", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", api.MediaType)
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("reset of product %d: %d %s", id, resp.StatusCode, body)
	}
}

type buyResult struct {
	code   int
	header http.Header
	err    api.Error
	order  string
}

// buyer signs buyer n in at base: the gate's products are not lab
// products, whose buyers sign in. The replicas share the signing key and
// the buyers, so a buyer's token is good at each.
func buyer(t *testing.T, base string, n int64) string {
	t.Helper()
	return testenv.SignIn(t, base, fmt.Sprintf("buyer %d", n)).Token
}

func buy(t *testing.T, base string, id, user int64) buyResult {
	t.Helper()
	return buyAs(t, base, buyer(t, base, user), id)
}

// buyAs is buy for the buyer of token, signed in already ("" for none).
func buyAs(t *testing.T, base, token string, id int64) buyResult {
	t.Helper()
	code, h, body := postAs(t, base+"/api/orders", token, map[string]any{"product_id": id})
	r := buyResult{code: code, header: h}
	if code >= 400 {
		if err := json.Unmarshal(body, &r.err); err != nil {
			t.Fatalf("a %d answer that is not an api.Error: %s", code, body)
		}
		return r
	}
	var o struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &o); err != nil {
		t.Fatalf("an order answer without an id: %s", body)
	}
	r.order = o.ID
	return r
}

func sold(r buyResult) bool { return r.code == http.StatusCreated || r.code == http.StatusAccepted }

// poll waits, within a deadline, until cond holds.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 15s for %s", what)
		}
		time.Sleep(20 * time.Millisecond) // polling, with a deadline
	}
}

// TestGate: a replica's sold-out refusal carries the product for the gate,
// and every replica whose flag clears tells every gate the product has
// stock again — after a cancel and after a reset. Behind nginx (a subtest:
// it needs nginx and its Lua module) the gate then answers the refusals
// itself and lets purchases through again once told.
func TestGate(t *testing.T) {
	fake := &fakeGate{}
	fakeSrv := &http.Server{Handler: fake}
	fakeLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go fakeSrv.Serve(fakeLn)
	t.Cleanup(func() { fakeSrv.Close() })

	// The nginx gate's control port is named to the replicas at their start.
	_, _, nginxErr := gate.FindNginx()
	control, err := gate.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	gates := []string{"http://" + fakeLn.Addr().String()}
	if nginxErr == nil {
		gates = append(gates, "http://"+control)
	}
	c := startCluster(t, gates)
	a, b := c.urls[0], c.urls[1]

	const product = 7
	reset(t, a, product, 2)
	var orders []string
	for i, base := range []string{a, b} {
		r := buy(t, base, product, int64(i+1))
		if !sold(r) {
			t.Fatalf("buyer %d: %d %+v, want a sale", i+1, r.code, r.err)
		}
		orders = append(orders, r.order)
	}
	for i, base := range []string{a, b} {
		r := buy(t, base, product, 100+int64(i))
		if r.code != http.StatusConflict || r.err.Code != api.CodeSoldOut {
			t.Fatalf("replica %d after the sale: %d %+v, want 409 sold_out", i+1, r.code, r.err)
		}
		// The first refusal scans the shards and sets the flag; the
		// header says the flag answered.
		if got := r.header.Get(api.HeaderSoldOut); got != strconv.Itoa(product) {
			t.Errorf("replica %d's sold_out carries %s=%q, want %d", i+1, api.HeaderSoldOut, got, product)
		}
	}
	if n := fake.told(t, product); n != 0 {
		t.Fatalf("the gate was told %d times that product %d has stock, while it had none", n, product)
	}

	// Buyer 1 cancels on replica b: the unit comes back, and both replicas
	// (b itself, a through the notice between them) clear their flags.
	code, _, body := postAs(t, b+"/api/orders/"+orders[0]+"/cancel", buyer(t, b, 1), map[string]any{})
	if code != http.StatusOK {
		t.Fatalf("cancel: %d %s", code, body)
	}
	poll(t, "both replicas to tell the gate after the cancel", func() bool { return fake.told(t, product) >= 2 })
	if r := buy(t, a, product, 200); !sold(r) {
		t.Fatalf("after the cancel: %d %+v, want the unit sold again", r.code, r.err)
	}
	// Sold out again, on both; then a reset clears both flags again.
	for i, base := range []string{a, b} {
		if r := buy(t, base, product, 300+int64(i)); r.header.Get(api.HeaderSoldOut) == "" {
			t.Fatalf("replica %d: %d %+v without %s", i+1, r.code, r.err, api.HeaderSoldOut)
		}
	}
	reset(t, a, product, 2)
	poll(t, "both replicas to tell the gate after the reset", func() bool { return fake.told(t, product) >= 4 })
	for i, base := range []string{a, b} {
		if r := buy(t, base, product, 400+int64(i)); !sold(r) {
			t.Errorf("replica %d after the reset: %d %+v, want a sale", i+1, r.code, r.err)
		}
	}

	t.Run("nginx", func(t *testing.T) {
		if nginxErr != nil {
			testkit.Skipf(t, testkit.NoNginx, "needs nginx and libnginx-mod-http-lua (apt-get install nginx libnginx-mod-http-lua): %v", nginxErr)
		}
		testNginx(t, control, c)
		t.Run("stale", func(t *testing.T) { testStale(t) })
		t.Run("compose config", testComposeConfig)
	})
}

// testStale: a sold-out answer to a request that started before a
// stock-back notice reached the gate may predate the stock's return; the
// gate must not learn from it. An upstream of the test's own holds its
// answer until the notice is in.
func testStale(t *testing.T) {
	const product = 9
	arrived := make(chan struct{})
	release := make(chan struct{})
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		if r.Header.Get("X-Test-Hold") != "" {
			close(arrived)
			<-release
		}
		w.Header().Set(api.HeaderSoldOut, strconv.Itoa(product))
		w.Header().Set("Content-Type", api.MediaType)
		w.WriteHeader(http.StatusConflict)
		fmt.Fprint(w, `{"code":"sold_out","error":"stock: sold out"}`)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go up.Serve(ln)
	t.Cleanup(func() { up.Close() })
	ng := startNginx(t, gate.NginxOptions{Upstreams: []string{ln.Addr().String()}})
	front := ng.URL

	held := make(chan buyResult, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, front+"/api/orders", strings.NewReader(`{"user_id":1,"product_id":9}`))
		req.Header.Set("Content-Type", api.MediaType)
		req.Header.Set("X-Test-Hold", "1")
		resp, err := client.Do(req)
		if err != nil {
			held <- buyResult{}
			return
		}
		resp.Body.Close()
		held <- buyResult{code: resp.StatusCode}
	}()
	<-arrived
	notice, _ := http.NewRequest(http.MethodPost, ng.ControlURL+api.GateStockBackPath+"?products=9", nil)
	notice.Header.Set(api.HeaderGateSecret, secret)
	resp, err := client.Do(notice)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("notice: %s", resp.Status)
	}
	close(release)
	if r := <-held; r.code != http.StatusConflict {
		t.Fatalf("the held request: %d, want the upstream's 409", r.code)
	}
	if st := gateState(t, ng); slices.Contains(st.SoldOut, product) {
		t.Errorf("the gate learned sold out from an answer older than the stock-back notice: %+v", st)
	}
	// A refusal that starts after the notice is learned (once nginx's
	// millisecond clock has moved past the notice's).
	poll(t, "the gate to learn from a refusal after the notice", func() bool {
		// The upstream here is a stub that signs nobody in.
		if r := buyAs(t, front, "", product); r.code != http.StatusConflict {
			t.Fatalf("a later refusal: %d", r.code)
		}
		return slices.Contains(gateState(t, ng).SoldOut, product)
	})
}

func testNginx(t *testing.T, control string, c *cluster) {
	// A long ttl: no entry expires mid-test.
	ng := startNginx(t, gate.NginxOptions{Upstreams: c.urls, Control: control, TTL: 2 * time.Minute})
	front := ng.URL
	const product = 8
	reset(t, front, product, 2)
	for user := int64(1); user <= 2; user++ {
		if r := buy(t, front, product, user); !sold(r) {
			t.Fatalf("buyer %d through the gate: %d %+v", user, r.code, r.err)
		}
	}
	// The first refusal comes from a replica; the gate learns from it.
	r := buy(t, front, product, 10)
	if r.code != http.StatusConflict || r.err.Code != api.CodeSoldOut || r.header.Get(api.HeaderGate) != "" {
		t.Fatalf("first refusal: %d %+v gate=%q, want the service's 409 sold_out", r.code, r.err, r.header.Get(api.HeaderGate))
	}
	if h := r.header.Get(api.HeaderSoldOut); h != "" {
		t.Errorf("the gate passed %s=%q on to the client", api.HeaderSoldOut, h)
	}
	before := orderRequests(t, c.urls)
	const refusals = 20
	for user := int64(100); user < 100+refusals; user++ {
		r := buy(t, front, product, user)
		if r.code != http.StatusConflict || r.err.Code != api.CodeSoldOut || r.err.Error == "" {
			t.Fatalf("buyer %d: %d %+v, want 409 sold_out", user, r.code, r.err)
		}
		if r.header.Get(api.HeaderGate) != "sold-out" {
			t.Fatalf("buyer %d: refused without %s: the service answered, not the gate", user, api.HeaderGate)
		}
	}
	if after := orderRequests(t, c.urls); !slices.Equal(after, before) {
		t.Errorf("purchase requests the replicas counted: %v before the gate's refusals, %v after; want no change", before, after)
	}
	st := gateState(t, ng)
	if !slices.Contains(st.SoldOut, product) || st.Answered < refusals {
		t.Errorf("gate state %+v: want product %d sold out and at least %d answered", st, product, refusals)
	}
	// Another product is none of the gate's business.
	reset(t, front, product+1, 1)
	if r := buy(t, front, product+1, 1); !sold(r) {
		t.Fatalf("another product through the gate: %d %+v", r.code, r.err)
	}

	// The control endpoint wants the secret.
	req, _ := http.NewRequest(http.MethodPost, ng.ControlURL+api.GateStockBackPath+"?products=8", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a notice without the secret: %d, want 401", resp.StatusCode)
	}

	// A reset through the gate: the replica whose flag answered tells the
	// gate, which then lets purchases through, to both replicas.
	reset(t, front, product, 2)
	poll(t, "the gate to forget the product", func() bool { return !slices.Contains(gateState(t, ng).SoldOut, product) })
	// Signed in at a replica, not through the gate, whose round robin
	// would count the sign-ins.
	tokens := []string{buyer(t, c.urls[0], 500), buyer(t, c.urls[0], 501)}
	before = orderRequests(t, c.urls)
	for i, token := range tokens {
		if r := buyAs(t, front, token, product); !sold(r) || r.header.Get(api.HeaderGate) != "" {
			user := 500 + i
			t.Fatalf("buyer %d after the reset: %d %+v gate=%q, want a sale by a replica", user, r.code, r.err, r.header.Get(api.HeaderGate))
		}
	}
	after := orderRequests(t, c.urls)
	for i := range after {
		if after[i]-before[i] != 1 {
			t.Errorf("replica %d took %d of the two purchases after the reset; want one each (round-robin)", i+1, after[i]-before[i])
		}
	}
}

// orderRequests reads each replica's count of POST /api/orders.
func orderRequests(t *testing.T, urls []string) []int {
	t.Helper()
	var out []int
	for _, u := range urls {
		resp, err := client.Get(u + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "seckill_http_requests_total{") && strings.Contains(line, `method="POST"`) &&
				strings.Contains(line, `route="/api/orders"`) {
				v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
				if err != nil {
					t.Fatalf("metrics line %q: %v", line, err)
				}
				n += int(v)
			}
		}
		resp.Body.Close()
		out = append(out, n)
	}
	return out
}

func gateState(t *testing.T, ng *gate.Nginx) api.GateState {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, ng.ControlURL+api.GateStatePath, nil)
	req.Header.Set(api.HeaderGateSecret, secret)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st api.GateState
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("gate state: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("gate state: %v", err)
	}
	return st
}

// startNginx starts a gate with the test's secret, stopped at cleanup.
func startNginx(t *testing.T, opt gate.NginxOptions) *gate.Nginx {
	t.Helper()
	opt.Secret = secret
	ng, err := gate.StartNginx(t.Context(), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if log := ng.ErrorLog(); strings.Contains(log, "[error]") {
			t.Logf("nginx's error log:\n%s", log)
		}
		if err := ng.Stop(); err != nil {
			t.Error(err)
		}
	})
	return ng
}

// A gate that keeps failing is tried a bounded number of times, and the
// notice is counted as failed; Close sends what was recorded before it.
func TestNotifierGivesUp(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.URL.Query().Get("products"))
		mu.Unlock()
		http.Error(w, "down", http.StatusServiceUnavailable)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	n, err := gate.New(gate.Options{URLs: []string{"http://" + ln.Addr().String()}, Tries: 2, Backoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	n.StockBack(5)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0] != "5" || got[1] != "5" {
		t.Errorf("the gate received %q, want product 5 twice (two tries)", got)
	}
	if n.Failed() != 1 || n.Sent() != 0 {
		t.Errorf("sent %d, failed %d; want 0 and 1", n.Sent(), n.Failed())
	}
	if _, err := gate.New(gate.Options{URLs: []string{"nginx:8082"}}); err == nil {
		t.Error("a gate URL without a scheme was accepted")
	}
}

// testComposeConfig: the compose lab's nginx.conf, pointed at this
// directory's files and at loopback, is one nginx accepts (nginx -t).
func testComposeConfig(t *testing.T) {
	path, modules, err := gate.FindNginx()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("../../deploy/gate/nginx.conf")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, f := range []string{"seckill_gate.lua", "locations.conf", "control.conf"} {
		b, err := os.ReadFile(filepath.Join("../../deploy/gate", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	front, err := gate.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	control, err := gate.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	conf := string(src)
	for _, r := range [][2]string{{"/etc/nginx/gate", dir}, {"seckill-1:8080", "127.0.0.1:1"}, {"seckill-2:8080", "127.0.0.1:2"},
		{"seckill-3:8080", "127.0.0.1:3"}, {"listen 80;", "listen " + front + ";"}, {"listen 8082;", "listen " + control + ";"}} {
		if !strings.Contains(conf, r[0]) {
			t.Fatalf("deploy/gate/nginx.conf no longer names %q", r[0])
		}
		conf = strings.ReplaceAll(conf, r[0], r[1])
	}
	var head strings.Builder
	for _, m := range modules {
		fmt.Fprintf(&head, "load_module %s;\n", m)
	}
	fmt.Fprintf(&head, "pid %s/nginx.pid;\nerror_log %s/error.log;\n", dir, dir)
	main := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(main, []byte(head.String()+conf), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(path, "-t", "-p", dir, "-c", main).CombinedOutput(); err != nil {
		t.Errorf("nginx -t on the compose lab's config: %v\n%s", err, out)
	}
}
