package server

import (
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fault arms a fault through the HTTP control endpoint.
func (c *client) fault(spec map[string]any) *response {
	c.t.Helper()
	return c.mustCode(c.do("POST", "/_fake/faults", "", spec), 200)
}

func TestRequestFaults(t *testing.T) {
	srv := testServer(t, Options{TLS: true})
	c := newClient(t, srv)
	p := nsPath("default", "configmaps")
	c.createCM("default", "a", nil, map[string]string{"k": strings.Repeat("x", 4000)})
	tests := []struct {
		name    string
		spec    map[string]any
		method  string
		path    string
		code    int
		reason  string
		message string
	}{
		{"429 on list", map[string]any{"type": "too-many-requests", "verb": "list", "retryAfterSeconds": 3}, "GET", p, 429, "TooManyRequests", "Too many requests, please try again later."},
		{"500 on get", map[string]any{"type": "internal-error", "verb": "get", "message": "etcd fell over"}, "GET", p + "/a", 500, "InternalError", "Internal error occurred: etcd fell over"},
		{"410 on list", map[string]any{"type": "gone", "verb": "list", "resource": "configmaps"}, "GET", p, 410, "Expired", msgListTooOld},
		{"410 on watch as status", map[string]any{"type": "gone", "verb": "watch", "mode": "status"}, "GET", p + "?watch=1&resourceVersion=5", 410, "Expired", "too old resource version: 5"},
		{"429 on watch", map[string]any{"type": "too-many-requests", "verb": "watch"}, "GET", p + "?watch=1", 429, "TooManyRequests", ""},
		{"500 on create", map[string]any{"type": "internal-error", "verb": "create", "namespace": "default"}, "POST", p, 500, "InternalError", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c.fault(tc.spec)
			var body any
			if tc.method == "POST" {
				body = cm("new", nil, nil)
			}
			r := c.do(tc.method, tc.path, "", body)
			if r.code != tc.code || r.str("reason") != tc.reason || !strings.Contains(r.str("message"), tc.message) {
				t.Fatalf("%d %s", r.code, r.body)
			}
			if tc.code == 429 && r.header.Get("Retry-After") == "" {
				t.Fatal("no Retry-After")
			}
			if tc.name == "429 on list" && (r.header.Get("Retry-After") != "3" || r.str("details", "retryAfterSeconds") != "3") {
				t.Fatalf("retry after: %v %s", r.header, r.body)
			}
			// Count defaults to 1: the next request succeeds.
			if strings.Contains(tc.path, "watch=1") {
				return
			}
			if r := c.do(tc.method, tc.path, "", body); r.code >= 400 && tc.method != "POST" {
				t.Fatalf("fault hit twice: %d", r.code)
			}
		})
	}
	// Scoping by user agent, resource and namespace.
	c.fault(map[string]any{"type": "internal-error", "userAgent": "victim", "count": -1})
	c.mustCode(c.get(p), 200)
	c.ua = "victim/1.0"
	c.mustCode(c.get(p), 500)
	c.mustCode(c.get(p), 500)
	c.ua = "server-test"
	c.mustCode(c.do("DELETE", "/_fake/faults", "", nil), 200)
	c.fault(map[string]any{"type": "internal-error", "resource": "secrets"})
	c.fault(map[string]any{"type": "internal-error", "namespace": "kube-system"})
	c.mustCode(c.get(p), 200)
	c.mustCode(c.get("/api/v1/namespaces/default/secrets"), 500)
	c.mustCode(c.get("/api/v1/namespaces/kube-system/configmaps"), 500)
	c.mustCode(c.get("/api/v1/namespaces/kube-system/configmaps"), 200)
	t.Run("slow body", func(t *testing.T) {
		c.fault(map[string]any{"type": "slow", "verb": "get", "bytesPerSecond": 8000})
		start := time.Now()
		r := c.mustCode(c.get(p+"/a"), 200)
		if el := time.Since(start); el < 400*time.Millisecond {
			t.Fatalf("%d bytes at 8000 B/s took %v", len(r.body), el)
		}
	})
	t.Run("stall before the response", func(t *testing.T) {
		c.fault(map[string]any{"type": "stall", "verb": "list", "durationMs": 300})
		start := time.Now()
		c.mustCode(c.get(p), 200)
		if el := time.Since(start); el < 300*time.Millisecond {
			t.Fatalf("stall %v", el)
		}
	})
	if got := c.mustCode(c.get("/_fake/faults"), 200); string(got.body) != "[]" {
		t.Fatalf("faults left armed: %s", got.body)
	}
}

func TestBodyFaultsBreakTheResponse(t *testing.T) {
	srv := testServer(t, Options{})
	c := newClient(t, srv)
	p := nsPath("default", "configmaps")
	c.createCM("default", "a", nil, map[string]string{"k": strings.Repeat("x", 4000)})
	for _, typ := range []string{"truncate", "garbage"} {
		c.fault(map[string]any{"type": typ, "verb": "list"})
		resp, err := c.hc.Get(c.base + p)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Fatalf("%s: body read without error (%d bytes)", typ, len(b))
		}
		if typ == "garbage" && !strings.Contains(string(b), "garbage") {
			t.Fatalf("no garbage in %q", b[len(b)-20:])
		}
	}
}

func TestStreamFaults(t *testing.T) {
	srv := testServer(t, Options{})
	c := newClient(t, srv)
	p := nsPath("default", "configmaps")
	for _, n := range []string{"a", "b", "c", "d"} {
		c.createCM("default", n, nil, nil)
	}
	t.Run("close-watches now", func(t *testing.T) {
		w := c.watch(p + "?watch=1")
		w.next(t, false)
		waitFor(t, func() bool { return srv.Stats().WatchesOpen == 1 })
		if r := c.fault(map[string]any{"type": "close-watches", "resource": "configmaps"}); r.str("affected") != "1" {
			t.Fatalf("%s", r.body)
		}
		rest, err := w.ended(t)
		if err != io.EOF || len(rest) > 3 {
			t.Fatalf("%v %d", err, len(rest))
		}
	})
	t.Run("close-watches after N events", func(t *testing.T) {
		rv := itoa(srv.store.CurrentRV())
		w := c.watch(p + "?watch=1&resourceVersion=" + rv)
		waitFor(t, func() bool { return srv.Stats().WatchesOpen == 1 })
		c.fault(map[string]any{"type": "close-watches", "afterEvents": 2})
		for i := 0; i < 3; i++ {
			c.mustCode(c.do("PATCH", p+"/a", "application/merge-patch+json", `{"data":{"i":"`+itoa(uint64(i))+`"}}`), 200)
		}
		rest, err := w.ended(t)
		if err != io.EOF || len(rest) != 2 {
			t.Fatalf("%v %d", err, len(rest))
		}
	})
	tests := []struct {
		name   string
		spec   map[string]any
		events int    // events before the fault shows
		last   string // type of the last event, if any
		clean  bool   // the stream ends with a clean EOF
	}{
		{"gone at start (real server shape)", map[string]any{"type": "gone", "verb": "watch"}, 0, "ERROR", true},
		{"gone after 2 events", map[string]any{"type": "gone", "verb": "watch", "afterEvents": 2}, 2, "ERROR", true},
		{"internal error after 1 event", map[string]any{"type": "internal-error", "verb": "watch", "afterEvents": 1}, 1, "ERROR", true},
		{"close after 3 events", map[string]any{"type": "close", "verb": "watch", "afterEvents": 3}, 3, "", true},
		{"garbage after 2 events", map[string]any{"type": "garbage", "verb": "watch", "afterEvents": 2}, 2, "", false},
		{"truncate after 1 event", map[string]any{"type": "truncate", "verb": "watch", "afterEvents": 1}, 1, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c.fault(tc.spec)
			w := c.watch(p + "?watch=1&resourceVersion=0")
			rest, err := w.ended(t)
			n := len(rest)
			if tc.last != "" {
				if n == 0 || rest[n-1].Type != tc.last {
					t.Fatalf("events %v", rest)
				}
				if tc.last == "ERROR" && tc.spec["type"] == "gone" && (rest[n-1].Object["code"] != float64(410) || rest[n-1].Object["reason"] != "Expired") {
					t.Fatalf("error event %v", rest[n-1].Object)
				}
				n--
			}
			if n != tc.events {
				t.Fatalf("%d events before the fault, want %d", n, tc.events)
			}
			if tc.clean != (err == io.EOF) {
				t.Fatalf("end: %v", err)
			}
		})
	}
	t.Run("stall after 1 event", func(t *testing.T) {
		c.fault(map[string]any{"type": "stall", "verb": "watch", "afterEvents": 1, "durationMs": 400})
		start := time.Now()
		w := c.watch(p + "?watch=1&resourceVersion=0")
		w.next(t, false)
		rest, err := w.ended(t)
		if len(rest) != 0 || err != io.EOF || time.Since(start) < 400*time.Millisecond {
			t.Fatalf("%d %v %v", len(rest), err, time.Since(start))
		}
	})
	t.Run("slow watch", func(t *testing.T) {
		c.fault(map[string]any{"type": "slow", "verb": "watch", "bytesPerSecond": 2000})
		start := time.Now()
		w := c.watch(p + "?watch=1&resourceVersion=0")
		for i := 0; i < 4; i++ {
			w.next(t, false)
		}
		if el := time.Since(start); el < 300*time.Millisecond { // ~1 KiB at 2000 B/s
			t.Fatalf("slow watch took %v", el)
		}
	})
	t.Run("bookmark on request", func(t *testing.T) {
		// Wait for this watch to be registered: the earlier subtests' watches
		// may still be open, so WatchesOpen >= 1 proves nothing.
		before := srv.Stats().WatchesTotal
		w := c.watch(p + "?watch=1&allowWatchBookmarks=true&resourceVersion=" + itoa(srv.store.CurrentRV()))
		waitFor(t, func() bool { return srv.Stats().WatchesTotal > before })
		c.fault(map[string]any{"type": "bookmark"})
		if e := w.next(t, true); e.Type != "BOOKMARK" {
			t.Fatal(e.Type)
		}
	})
	t.Run("compact", func(t *testing.T) {
		old := itoa(srv.store.CurrentRV())
		c.mustCode(c.do("PATCH", p+"/a", "application/merge-patch+json", `{"data":{"z":"1"}}`), 200)
		live := c.watch(p + "?watch=1&resourceVersion=" + old)
		live.next(t, false)
		c.fault(map[string]any{"type": "compact", "resource": "configmaps"})
		c.mustCode(c.do("PATCH", p+"/a", "application/merge-patch+json", `{"data":{"z":"2"}}`), 200)
		if e := live.next(t, false); e.Type != "MODIFIED" {
			t.Fatalf("open watches survive compaction: %s", e.Type)
		}
		w := c.watch(p + "?watch=1&resourceVersion=" + old)
		if e := w.next(t, false); e.Type != "ERROR" || e.Object["code"] != float64(410) {
			t.Fatalf("%v", e)
		}
	})
	t.Run("compact etcd", func(t *testing.T) {
		// Like kube-apiserver's etcd compaction under its watch cache: exact
		// lists and continue tokens from before it get 410, watches from
		// before it still replay the history.
		old := itoa(srv.store.CurrentRV())
		page := c.mustCode(c.get(p+"?limit=1"), 200)
		c.mustCode(c.do("PATCH", p+"/a", "application/merge-patch+json", `{"data":{"z":"3"}}`), 200)
		c.fault(map[string]any{"type": "compact", "resource": "configmaps", "mode": "etcd"})
		if r := c.get(p + "?resourceVersionMatch=Exact&resourceVersion=" + old); r.code != 410 || r.str("message") != msgListTooOld {
			t.Fatalf("exact list: %d %s", r.code, r.body)
		}
		if r := c.get(p + "?limit=1&continue=" + page.str("metadata", "continue")); r.code != 410 || r.str("metadata", "continue") == "" {
			t.Fatalf("continue: %d %s", r.code, r.body)
		}
		w := c.watch(p + "?watch=1&resourceVersion=" + old)
		if e := w.next(t, false); e.Type != "MODIFIED" {
			t.Fatalf("watch from before the compaction: %v", e)
		}
		c.mustCode(c.get(p+"?resourceVersionMatch=Exact&resourceVersion="+itoa(srv.store.CurrentRV())), 200)
		if r := c.do("POST", "/_fake/faults", "", map[string]any{"type": "compact", "mode": "bogus"}); r.code != 400 {
			t.Fatalf("bad mode: %d %s", r.code, r.body)
		}
	})
}

func TestConnectionFaults(t *testing.T) {
	srv := testServer(t, Options{})
	c := newClient(t, srv)
	p := nsPath("default", "configmaps")
	c.createCM("default", "a", nil, nil)
	w := c.watch(p + "?watch=1")
	w.next(t, true)
	waitFor(t, func() bool { return srv.Stats().WatchesOpen == 1 })
	t.Run("reset-connections", func(t *testing.T) {
		r, err := srv.InjectFault(FaultSpec{Type: FaultResetConnections})
		if err != nil || r.Affected < 1 {
			t.Fatalf("%v %v", r, err)
		}
		if _, err := w.ended(t); err == nil || err == io.EOF {
			t.Fatalf("a reset is not a clean end: %v", err)
		}
	})
	t.Run("refuse", func(t *testing.T) {
		if _, err := srv.InjectFault(FaultSpec{Type: FaultRefuse, DurationMs: 400}); err != nil {
			t.Fatal(err)
		}
		_, err := net.Dial("tcp", srv.Addr())
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial during refusal: %v", err)
		}
		waitFor(t, func() bool {
			conn, err := net.Dial("tcp", srv.Addr())
			if err == nil {
				conn.Close()
			}
			return err == nil
		})
		c.hc.CloseIdleConnections()
		c.mustCode(c.get(p), 200)
	})
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSeedChurnAndCustomResources(t *testing.T) {
	srv := testServer(t, Options{})
	c := newClient(t, srv)
	r := c.mustCode(c.do("POST", "/_fake/seed", "", map[string]any{"resource": "configmaps", "namespace": "load", "count": 500, "bytes": 1024}), 200)
	if r.str("created") != "500" {
		t.Fatalf("%s", r.body)
	}
	get := c.mustCode(c.get(nsPath("load", "configmaps")+"/seed-0000007"), 200)
	if n := len(get.body); n < 900 || n > 1200 {
		t.Fatalf("seeded object is %d bytes", n)
	}
	l := c.mustCode(c.get(nsPath("load", "configmaps")+"?labelSelector=fake.informerd.io%2Fbucket%3D3"), 200)
	if n := len(l.obj["items"].([]any)); n != 50 {
		t.Fatalf("bucket 3 has %d", n)
	}
	rv := itoa(srv.store.CurrentRV())
	w := c.watch(nsPath("load", "configmaps") + "?watch=1&resourceVersion=" + rv)
	ch := c.mustCode(c.do("POST", "/_fake/churn", "", map[string]any{"resource": "configmaps", "namespace": "load", "ops": 300, "creates": 1, "updates": 3, "deletes": 1, "wait": true}), 200)
	if ch.str("ops") != "300" || ch.str("running") != "false" {
		t.Fatalf("%s", ch.body)
	}
	counts := map[string]int{}
	for i := 0; i < 300; i++ {
		counts[w.next(t, false).Type]++
	}
	if counts["ADDED"] == 0 || counts["MODIFIED"] == 0 || counts["DELETED"] == 0 || itoa(uint64(counts["ADDED"])) != ch.str("creates") {
		t.Fatalf("churn events %v vs %s", counts, ch.body)
	}
	rate := c.mustCode(c.do("POST", "/_fake/churn", "", map[string]any{"resource": "configmaps", "namespace": "load", "rate": 200, "durationMs": 500, "wait": true}), 200)
	if ops := rate.obj["ops"].(float64); ops < 60 || ops > 140 {
		t.Fatalf("rate 200/s for 0.5s made %v changes", ops)
	}

	// A custom resource registered at runtime, namespaced and cluster-scoped.
	c.mustCode(c.do("POST", "/_fake/resources", "", map[string]any{"group": "example.com", "version": "v1", "resource": "widgets", "kind": "Widget", "namespaced": true, "customResource": true, "status": true, "generation": "nonmetadata"}), 201)
	c.mustCode(c.do("POST", "/_fake/resources", "", map[string]any{"group": "example.com", "version": "v1", "resource": "gadgets", "kind": "Gadget", "customResource": true}), 201)
	c.mustCode(c.do("POST", "/_fake/resources", "", map[string]any{"group": "example.com", "version": "v1", "resource": "gadgets", "kind": "Gadget"}), 400)
	wp := "/apis/example.com/v1/namespaces/default/widgets"
	wd := c.mustCode(c.do("POST", wp, "", map[string]any{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": "w"}, "spec": map[string]any{"size": 1}}), 201)
	if wd.str("metadata", "generation") != "1" {
		t.Fatalf("%s", wd.body)
	}
	bad := c.do("PUT", wp+"/w", "", map[string]any{"metadata": map[string]any{"name": "w"}, "spec": map[string]any{"size": 2}})
	if bad.code != 422 || !strings.Contains(bad.str("message"), "must be specified for an update") {
		t.Fatalf("custom resources need a resourceVersion to update: %s", bad.body)
	}
	up := c.mustCode(c.do("PUT", wp+"/w", "", map[string]any{"metadata": map[string]any{"name": "w", "resourceVersion": wd.str("metadata", "resourceVersion")}, "spec": map[string]any{"size": 2}}), 200)
	if up.str("metadata", "generation") != "2" {
		t.Fatalf("%s", up.body)
	}
	c.mustCode(c.do("PATCH", wp+"/w", "application/strategic-merge-patch+json", `{}`), 415)
	list := c.mustCode(c.get("/apis/example.com/v1/widgets"), 200)
	if list.str("kind") != "WidgetList" || list.obj["items"].([]any)[0].(map[string]any)["kind"] != "Widget" {
		t.Fatalf("custom resource list items carry their type: %s", list.body)
	}
	c.mustCode(c.do("POST", "/apis/example.com/v1/gadgets", "", map[string]any{"metadata": map[string]any{"name": "g"}}), 201)
	c.mustCode(c.get("/apis/example.com/v1/gadgets/g"), 200)
	if r := c.mustCode(c.do("POST", "/_fake/seed", "", map[string]any{"resource": "gadgets.example.com", "count": 10}), 200); r.str("created") != "10" {
		t.Fatalf("%s", r.body)
	}
}

func TestChurnedObjectsStayValid(t *testing.T) {
	srv := testServer(t, Options{})
	c := newClient(t, srv)
	for _, res := range []struct{ name, path string }{
		{"configmaps", nsPath("churn", "configmaps")},
		{"secrets", nsPath("churn", "secrets")},
		{"leases.coordination.k8s.io", "/apis/coordination.k8s.io/v1/namespaces/churn/leases"},
	} {
		c.mustCode(c.do("POST", "/_fake/seed", "", map[string]any{"resource": res.name, "namespace": "churn", "count": 20, "bytes": 600}), 200)
		rv := itoa(srv.store.CurrentRV())
		w := c.watch(res.path + "?watch=1&resourceVersion=" + rv)
		c.mustCode(c.do("POST", "/_fake/churn", "", map[string]any{"resource": res.name, "namespace": "churn", "ops": 200, "wait": true}), 200)
		var last watchEvent
		for i := 0; i < 200; i++ {
			last = w.next(t, false)
			if last.Type != "MODIFIED" {
				t.Fatalf("%s: %s", res.name, last.Type)
			}
		}
		got := c.mustCode(c.get(res.path+"/"+last.name()), 200)
		if got.str("metadata", "resourceVersion") != last.rv() || got.str("metadata", "uid") == "" {
			t.Fatalf("%s: get after churn %s vs event rv %s", res.name, got.body, last.rv())
		}
		// The object decodes again for writes.
		p := c.mustCode(c.do("PATCH", res.path+"/"+last.name(), "application/merge-patch+json", `{"metadata":{"labels":{"patched":"yes"}}}`), 200)
		if p.str("metadata", "labels", "patched") != "yes" || p.str("metadata", "labels", "fake.informerd.io/seed") != "true" {
			t.Fatalf("%s: patch after churn: %s", res.name, p.body)
		}
		l := c.mustCode(c.get(res.path), 200)
		if n := len(l.obj["items"].([]any)); n != 20 {
			t.Fatalf("%s: %d items", res.name, n)
		}
	}
}

func TestChurnStampedWithTheTimeSaysWhenEachChangeWasMade(t *testing.T) {
	srv := testServer(t, Options{})
	c := newClient(t, srv)
	path := nsPath("stamp", "configmaps")
	c.mustCode(c.do("POST", "/_fake/seed", "", map[string]any{"resource": "configmaps", "namespace": "stamp", "count": 5, "bytes": 600}), 200)
	w := c.watch(path + "?watch=1&resourceVersion=" + itoa(srv.store.CurrentRV()))
	before := uint32(time.Now().UnixMicro())
	c.mustCode(c.do("POST", "/_fake/churn", "", map[string]any{"resource": "configmaps", "namespace": "stamp", "ops": 50, "stamp": "time", "wait": true}), 200)
	after := uint32(time.Now().UnixMicro())
	for i := 0; i < 50; i++ {
		e := w.next(t, false)
		data, _ := e.Object["data"].(map[string]any)
		payload, _ := data["payload"].(string)
		if len(payload) < 8 {
			t.Fatalf("event %d: payload %q", i, payload)
		}
		stamp, err := strconv.ParseUint(payload[:8], 16, 32)
		if err != nil {
			t.Fatalf("event %d: stamp %q: %v", i, payload[:8], err)
		}
		// Modulo 2^32, as a reader compares them.
		if uint32(stamp)-before > after-before {
			t.Fatalf("event %d: stamp %d not within [%d, %d]", i, stamp, before, after)
		}
	}
	c.mustCode(c.do("POST", "/_fake/churn", "", map[string]any{"resource": "configmaps", "namespace": "stamp", "ops": 1, "stamp": "clock"}), 400)
}
