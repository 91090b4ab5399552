package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"seckill/internal/app"
	"seckill/internal/testkit/testenv"
)

// TestAPIExamples runs docs/API.md's examples as a reader would, in order,
// against the embedded default (demo product 1, demo accounts): each curl
// is sent as written, with localhost:8080 the test's service and $TOKEN its
// operator token; `VAR=$(curl … | jq -r .field)` captures the field for the
// lines after it; a "# → NNN" line under a command is the status it must
// get, and a command without one must not get a 4xx or 5xx. So an example
// that fails as written fails here.
func TestAPIExamples(t *testing.T) {
	doc, err := os.ReadFile("../../docs/API.md")
	if err != nil {
		t.Fatal(err)
	}
	block := exampleBlock(t, string(doc))
	cfg := testenv.Config(t)
	// The examples' product ids are fixed: a service of the test's own.
	cfg.RedisAddr, cfg.MySQLDSN, cfg.EtcdEndpoints = "", "", nil
	cfg.DemoStock = 100
	e := start(t, cfg)
	if app.DemoProduct != 1 {
		t.Fatalf("the examples buy product 1, the demo product is %d", app.DemoProduct)
	}
	vars := map[string]string{"TOKEN": e.token}
	var last *sent
	ran := 0
	for n, line := range strings.Split(block, "\n") {
		at := fmt.Sprintf("docs/API.md example line %d %q", n+1, line)
		if want, ok := strings.CutPrefix(line, "# → "); ok {
			status, _, _ := strings.Cut(want, " ")
			if last == nil || strconv.Itoa(last.status) != status {
				t.Fatalf("%s: the command above it got %v", at, last)
			}
			last.checked = true
			continue
		}
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		if last != nil && !last.checked && last.status >= 400 {
			t.Fatalf("%s", last)
		}
		words, err := shellWords(line, vars)
		if err != nil {
			t.Fatalf("%s: %v", at, err)
		}
		capture, field, words, err := captured(words)
		if err != nil {
			t.Fatalf("%s: %v", at, err)
		}
		last, err = curl(e, words)
		if err != nil {
			t.Fatalf("%s: %v", at, err)
		}
		last.line = line
		ran++
		if capture != "" {
			v, err := last.field(field)
			if err != nil {
				t.Fatalf("%s: %v", at, err)
			}
			vars[capture] = v
		}
	}
	if last != nil && !last.checked && last.status >= 400 {
		t.Fatalf("%s", last)
	}
	if ran < 10 {
		t.Fatalf("ran %d examples; the block was not found whole", ran)
	}
	t.Logf("ran %d examples; captured %v", ran, vars)
}

// exampleBlock is the first sh block under "## Examples".
func exampleBlock(t *testing.T, doc string) string {
	_, rest, ok := strings.Cut(doc, "## Examples\n")
	if ok {
		_, rest, ok = strings.Cut(rest, "```sh\n")
	}
	block, _, closed := strings.Cut(rest, "```")
	if !ok || !closed {
		t.Fatal("docs/API.md has no sh block under ## Examples")
	}
	return block
}

// sent is one example's exchange.
type sent struct {
	line    string
	status  int
	body    []byte
	checked bool // a "# → NNN" line named its status
}

func (s *sent) String() string {
	return fmt.Sprintf("%q answered %d %s", s.line, s.status, s.body)
}

// field is jq -r .name of the answer: a string or a number, never empty.
func (s *sent) field(name string) (string, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(s.body, &obj); err != nil {
		return "", fmt.Errorf("jq -r .%s of %s: %w", name, s, err)
	}
	raw, ok := obj[name]
	if !ok || string(raw) == "null" {
		return "", fmt.Errorf("jq -r .%s: no such field in %s", name, s)
	}
	var str string
	if json.Unmarshal(raw, &str) == nil {
		return str, nil
	}
	return string(raw), nil
}

// captured splits `VAR=$(curl … | jq -r .field)` into VAR, field and the
// curl's words; other commands come back as they are.
func captured(words []string) (capture, field string, rest []string, err error) {
	if len(words) == 0 {
		return "", "", nil, fmt.Errorf("no command")
	}
	name, first, ok := strings.Cut(words[0], "=$(")
	if !ok {
		return "", "", words, nil
	}
	n := len(words)
	if n < 5 || words[n-4] != "|" || words[n-3] != "jq" || words[n-2] != "-r" || !strings.HasSuffix(words[n-1], ")") {
		return "", "", nil, fmt.Errorf("a capture is VAR=$(curl … | jq -r .field), not %q", words)
	}
	field = strings.TrimSuffix(strings.TrimPrefix(words[n-1], "."), ")")
	return name, field, append([]string{first}, words[1:n-4]...), nil
}

// curl sends what curl would for the flags the examples use: -s, -X, -H,
// -d (POST unless -X says otherwise) and one URL on localhost:8080.
func curl(e *env, words []string) (*sent, error) {
	if words[0] != "curl" {
		return nil, fmt.Errorf("not a curl command: %q", words[0])
	}
	var (
		method, url, body string
		hasBody           bool
		headers           [][2]string
	)
	for i := 1; i < len(words); i++ {
		w := words[i]
		next := func() (string, error) {
			if i+1 == len(words) {
				return "", fmt.Errorf("%s wants a value", w)
			}
			i++
			return words[i], nil
		}
		var err error
		switch {
		case w == "-s":
		case strings.HasPrefix(w, "-X") && len(w) > 2:
			method = w[2:]
		case w == "-X":
			method, err = next()
		case w == "-H":
			var h string
			if h, err = next(); err == nil {
				k, v, ok := strings.Cut(h, ": ")
				if !ok {
					return nil, fmt.Errorf("header %q is not Name: value", h)
				}
				headers = append(headers, [2]string{k, v})
			}
		case w == "-d":
			body, err = next()
			hasBody = true
		case strings.HasPrefix(w, "localhost:8080/"):
			url = e.url + strings.TrimPrefix(w, "localhost:8080")
		default:
			return nil, fmt.Errorf("curl flag or word %q is not one the examples use", w)
		}
		if err != nil {
			return nil, err
		}
	}
	if url == "" {
		return nil, fmt.Errorf("no localhost:8080 URL")
	}
	if method == "" {
		method = map[bool]string{true: "POST", false: "GET"}[hasBody]
	}
	var r io.Reader
	if hasBody {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		return nil, err
	}
	for _, h := range headers {
		req.Header.Add(h[0], h[1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return &sent{status: resp.StatusCode, body: b}, err
}

// shellWords splits a line as sh would for what the examples write: words
// apart by blanks, 'single' and "double" quotes, $NAME expanded outside
// single quotes (an unset one is an error, not ""), | a word of its own,
// and a # that starts a word starting a comment.
func shellWords(line string, vars map[string]string) ([]string, error) {
	var (
		words []string
		cur   strings.Builder
		in    bool // a word is under way
	)
	end := func() {
		if in {
			words = append(words, cur.String())
		}
		cur.Reset()
		in = false
	}
	expand := func(i int) (int, error) {
		j := i + 1
		for j < len(line) && (line[j] == '_' || line[j] >= 'A' && line[j] <= 'Z' || line[j] >= 'a' && line[j] <= 'z' || line[j] >= '0' && line[j] <= '9') {
			j++
		}
		if j == i+1 { // $( or a lone $: kept as written
			cur.WriteByte('$')
			return i + 1, nil
		}
		v, ok := vars[line[i+1:j]]
		if !ok {
			return 0, fmt.Errorf("$%s is not set by any line above", line[i+1:j])
		}
		cur.WriteString(v)
		return j, nil
	}
	for i := 0; i < len(line); {
		switch c := line[i]; {
		case c == ' ' || c == '\t':
			end()
			i++
		case c == '#' && !in:
			end()
			return words, nil
		case c == '|' && !in:
			words = append(words, "|")
			i++
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unclosed '")
			}
			cur.WriteString(line[i+1 : i+1+j])
			in, i = true, i+j+2
		case c == '"':
			in = true
			for i++; i < len(line) && line[i] != '"'; {
				if line[i] == '$' {
					var err error
					if i, err = expand(i); err != nil {
						return nil, err
					}
					continue
				}
				cur.WriteByte(line[i])
				i++
			}
			if i == len(line) {
				return nil, fmt.Errorf("unclosed \"")
			}
			i++
		case c == '$':
			in = true
			var err error
			if i, err = expand(i); err != nil {
				return nil, err
			}
		default:
			in = true
			cur.WriteByte(c)
			i++
		}
	}
	end()
	return words, nil
}
