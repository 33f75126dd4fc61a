package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// testServer starts a server on a real socket (port 0) for one test.
func testServer(t *testing.T, opts Options) *Server {
	t.Helper()
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

type client struct {
	t     *testing.T
	base  string
	token string
	hc    *http.Client
	ua    string
}

func newClient(t *testing.T, srv *Server) *client {
	tr := &http.Transport{ForceAttemptHTTP2: true}
	if ca := srv.CAPEM(); ca != nil {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca)
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &client{t: t, base: srv.URL(), token: srv.Token(), hc: &http.Client{Transport: tr}, ua: "server-test"}
}

type response struct {
	proto  string
	code   int
	header http.Header
	body   []byte
	obj    map[string]any
}

func (r *response) str(path ...string) string {
	var cur any = r.obj
	for _, p := range path {
		m, _ := cur.(map[string]any)
		cur = m[p]
	}
	switch v := cur.(type) {
	case string:
		return v
	case nil:
		return ""
	default:
		return fmt.Sprint(v)
	}
}

func (c *client) do(method, path, contentType string, body any) *response {
	c.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		enc, _ := json.Marshal(b)
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if contentType == "" && body != nil {
		contentType = "application/json"
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("User-Agent", c.ua)
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	r := &response{proto: resp.Proto, code: resp.StatusCode, header: resp.Header, body: b}
	_ = json.Unmarshal(b, &r.obj)
	return r
}

func (c *client) get(path string) *response { return c.do("GET", path, "", nil) }

func (c *client) mustCode(r *response, code int) *response {
	c.t.Helper()
	if r.code != code {
		c.t.Fatalf("status %d, want %d: %s", r.code, code, r.body)
	}
	return r
}

func cm(name string, labels map[string]string, data map[string]string) map[string]any {
	meta := map[string]any{"name": name}
	if labels != nil {
		meta["labels"] = labels
	}
	o := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}
	if data != nil {
		o["data"] = data
	}
	return o
}

// watchEvent is one decoded watch event.
type watchEvent struct {
	Type   string         `json:"type"`
	Object map[string]any `json:"object"`
}

func (e watchEvent) name() string {
	m, _ := e.Object["metadata"].(map[string]any)
	s, _ := m["name"].(string)
	return s
}

func (e watchEvent) rv() string {
	m, _ := e.Object["metadata"].(map[string]any)
	s, _ := m["resourceVersion"].(string)
	return s
}

// watcher is an open watch whose events arrive on ch; err gets the decode
// error that ended it (io.EOF for a clean end).
type watcher struct {
	resp   *http.Response
	ch     chan watchEvent
	err    chan error
	cancel context.CancelFunc
}

func (c *client) watch(path string) *watcher {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", c.base+path, nil)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("User-Agent", c.ua)
	resp, err := c.hc.Do(req)
	if err != nil {
		cancel()
		c.t.Fatalf("watch %s: %v", path, err)
	}
	w := &watcher{resp: resp, ch: make(chan watchEvent, 100000), err: make(chan error, 1), cancel: cancel}
	c.t.Cleanup(w.stop)
	if resp.StatusCode != 200 {
		return w
	}
	go func() {
		d := json.NewDecoder(resp.Body)
		for {
			var ev watchEvent
			if err := d.Decode(&ev); err != nil {
				close(w.ch)
				w.err <- err
				return
			}
			w.ch <- ev
		}
	}()
	return w
}

func (w *watcher) stop() {
	w.cancel()
	_ = w.resp.Body.Close()
}

// next waits for the next event (skipping bookmarks unless wanted).
func (w *watcher) next(t *testing.T, bookmarks bool) watchEvent {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-w.ch:
			if !ok {
				t.Fatalf("watch ended: %v", <-w.err)
			}
			if ev.Type == "BOOKMARK" && !bookmarks {
				continue
			}
			return ev
		case <-timeout:
			t.Fatal("timed out waiting for a watch event")
		}
	}
}

// ended waits for the watch to end and returns the error that ended it.
func (w *watcher) ended(t *testing.T) (rest []watchEvent, err error) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-w.ch:
			if !ok {
				return rest, <-w.err
			}
			rest = append(rest, ev)
		case <-timeout:
			t.Fatal("timed out waiting for the watch to end")
		}
	}
}

// quiet asserts no event (bookmarks excluded) arrives for d.
func (w *watcher) quiet(t *testing.T, d time.Duration) {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case ev, ok := <-w.ch:
			if !ok {
				return
			}
			if ev.Type != "BOOKMARK" {
				t.Fatalf("unexpected event %s %s", ev.Type, ev.name())
			}
		case <-timeout:
			return
		}
	}
}

func nsPath(ns, res string) string { return "/api/v1/namespaces/" + ns + "/" + res }

func (c *client) createNS(name string) {
	c.t.Helper()
	c.mustCode(c.do("POST", "/api/v1/namespaces", "", map[string]any{"metadata": map[string]any{"name": name}}), 201)
}

func (c *client) createCM(ns, name string, labels map[string]string, data map[string]string) *response {
	c.t.Helper()
	return c.mustCode(c.do("POST", nsPath(ns, "configmaps"), "", cm(name, labels, data)), 201)
}

type httpProtocols struct{}

// h2cTransport speaks cleartext HTTP/2 with prior knowledge.
func (httpProtocols) h2cTransport() *http.Transport {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Transport{Protocols: &p}
}
