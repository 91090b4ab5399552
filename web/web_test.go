package web_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"seckill/web"
)

// The page loads Chart.js from vendor/, which static/vendor holds: the
// URL must keep answering with the script, served as the service serves FS.
func TestPageServesChartJS(t *testing.T) {
	srv := httptest.NewServer(http.FileServerFS(web.FS()))
	t.Cleanup(srv.Close)
	get := func(path string) (int, string, string) {
		t.Helper()
		resp, b := get(t, srv.URL+path)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
	}
	status, _, index := get("/")
	if status != http.StatusOK || !strings.Contains(index, `<script src="vendor/chart.umd.min.js"`) {
		t.Fatalf("/ answered %d; want the page, loading vendor/chart.umd.min.js", status)
	}
	status, ctype, script := get("/vendor/chart.umd.min.js")
	if status != http.StatusOK || script != web.ChartJS || !strings.Contains(ctype, "javascript") {
		t.Errorf("/vendor/chart.umd.min.js answered %d, %s, %d bytes: want Chart.js, %d bytes", status, ctype, len(script), len(web.ChartJS))
	}
	if status, _, license := get("/vendor/chart.LICENSE.md"); status != http.StatusOK || !strings.Contains(license, "MIT") {
		t.Errorf("/vendor/chart.LICENSE.md answered %d: want the MIT license", status)
	}
	if status, _, _ := get("/app.js"); status != http.StatusOK {
		t.Errorf("/app.js answered %d, want 200", status)
	}
}

// get fetches url and reads the whole answer.
func get(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}
