package server

import (
	"strings"
	"testing"
	"time"
)

func TestWatchStartingPoints(t *testing.T) {
	srv := testServer(t, Options{})
	c := newClient(t, srv)
	p := nsPath("default", "configmaps")
	c.createCM("default", "b", nil, nil)
	a := c.createCM("default", "a", nil, nil)
	rvA := a.str("metadata", "resourceVersion")

	t.Run("rv unset and 0 start with the current state", func(t *testing.T) {
		for _, q := range []string{"?watch=true", "?watch=1&resourceVersion=0"} {
			w := c.watch(p + q)
			if w.resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("content type %q", w.resp.Header.Get("Content-Type"))
			}
			e1, e2 := w.next(t, false), w.next(t, false)
			if e1.Type != "ADDED" || e1.name() != "a" || e2.Type != "ADDED" || e2.name() != "b" {
				t.Fatalf("%s: %s %s, %s %s", q, e1.Type, e1.name(), e2.Type, e2.name())
			}
			if e1.Object["kind"] != "ConfigMap" || e1.Object["apiVersion"] != "v1" {
				t.Fatalf("watch objects carry their type: %v", e1.Object)
			}
			w.quiet(t, 50*time.Millisecond)
			w.stop()
		}
	})
	t.Run("rv N sends only later events", func(t *testing.T) {
		w := c.watch(p + "?watch=true&resourceVersion=" + rvA)
		w.quiet(t, 50*time.Millisecond)
		c.mustCode(c.do("PATCH", p+"/a", "application/merge-patch+json", `{"data":{"x":"1"}}`), 200)
		c.mustCode(c.do("DELETE", p+"/b", "", nil), 200)
		m := w.next(t, false)
		d := w.next(t, false)
		if m.Type != "MODIFIED" || m.name() != "a" || d.Type != "DELETED" || d.name() != "b" {
			t.Fatalf("%s %s, %s %s", m.Type, m.name(), d.Type, d.name())
		}
		if d.rv() <= m.rv() && len(d.rv()) <= len(m.rv()) {
			t.Fatalf("DELETED carries the deletion's resourceVersion: %s after %s", d.rv(), m.rv())
		}
		// A second watch from the same RV sees the same events.
		w2 := c.watch(p + "?watch=true&resourceVersion=" + rvA)
		if e := w2.next(t, false); e.rv() != m.rv() {
			t.Fatalf("replay: %s %s", e.Type, e.rv())
		}
	})
	t.Run("sendInitialEvents ends the initial state with an annotated bookmark", func(t *testing.T) {
		w := c.watch(p + "?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true")
		e := w.next(t, true)
		if e.Type != "ADDED" || e.name() != "a" {
			t.Fatalf("%s %s", e.Type, e.name())
		}
		bm := w.next(t, true)
		meta := bm.Object["metadata"].(map[string]any)
		ann, _ := meta["annotations"].(map[string]any)
		if bm.Type != "BOOKMARK" || ann["k8s.io/initial-events-end"] != "true" || meta["resourceVersion"] != itoa(srv.store.CurrentRV()) {
			t.Fatalf("bookmark: %v", bm.Object)
		}
		c.createCM("default", "c", nil, nil)
		if e := w.next(t, true); e.Type != "ADDED" || e.name() != "c" {
			t.Fatalf("%s %s", e.Type, e.name())
		}
	})
	t.Run("sendInitialEvents=false from now", func(t *testing.T) {
		w := c.watch(p + "?watch=true&sendInitialEvents=false&resourceVersionMatch=NotOlderThan")
		w.quiet(t, 50*time.Millisecond)
	})
	t.Run("invalid watch options", func(t *testing.T) {
		for _, q := range []string{"sendInitialEvents=true", "resourceVersionMatch=NotOlderThan", "sendInitialEvents=true&resourceVersionMatch=Exact"} {
			r := c.get(p + "?watch=true&" + q)
			if r.code != 422 || r.str("reason") != "Invalid" {
				t.Errorf("%s: %d %s", q, r.code, r.body)
			}
		}
	})
}

func TestWatchFromACompactedResourceVersionGetsGone(t *testing.T) {
	srv := testServer(t, Options{HistorySize: 3})
	c := newClient(t, srv)
	p := nsPath("default", "configmaps")
	first := c.createCM("default", "a", nil, nil).str("metadata", "resourceVersion")
	for i := 0; i < 5; i++ {
		c.mustCode(c.do("PATCH", p+"/a", "application/merge-patch+json", `{"data":{"i":"`+itoa(uint64(i))+`"}}`), 200)
	}
	// Like the real watch cache: HTTP 200, then one ERROR event with a 410 Status.
	w := c.watch(p + "?watch=true&resourceVersion=" + first)
	if w.resp.StatusCode != 200 {
		t.Fatalf("status %d", w.resp.StatusCode)
	}
	e := w.next(t, false)
	if e.Type != "ERROR" || e.Object["kind"] != "Status" || e.Object["reason"] != "Expired" || e.Object["code"] != float64(410) ||
		!strings.HasPrefix(e.Object["message"].(string), "too old resource version: "+first+" (") {
		t.Fatalf("event %v", e)
	}
	if _, err := w.ended(t); err == nil {
		t.Fatal("stream continued")
	}
	// The oldest RV still in history works.
	st := srv.Stats().Resources["v1/configmaps"]
	w = c.watch(p + "?watch=true&resourceVersion=" + st.OldestRV)
	if e := w.next(t, false); e.Type != "MODIFIED" {
		t.Fatalf("%s", e.Type)
	}
}

func TestWatchFiltersBySelectorWithTransitions(t *testing.T) {
	srv := testServer(t, Options{})
	c := newClient(t, srv)
	p := nsPath("default", "configmaps")
	c.createNS("other")
	rv := c.createCM("default", "a", map[string]string{"app": "x"}, nil).str("metadata", "resourceVersion")
	w := c.watch("/api/v1/configmaps?watch=true&labelSelector=app%3Dx&resourceVersion=" + rv)
	fw := c.watch("/api/v1/configmaps?watch=true&fieldSelector=metadata.namespace%3Dother&resourceVersion=" + rv)
	nw := c.watch(nsPath("other", "configmaps") + "?watch=true&resourceVersion=" + rv)
	c.mustCode(c.do("PATCH", p+"/a", "application/merge-patch+json", `{"metadata":{"labels":{"app":"y"}}}`), 200)
	c.mustCode(c.do("PATCH", p+"/a", "application/merge-patch+json", `{"data":{"ignored":"1"}}`), 200)
	c.mustCode(c.do("PATCH", p+"/a", "application/merge-patch+json", `{"metadata":{"labels":{"app":"x"}}}`), 200)
	c.createCM("other", "o", map[string]string{"app": "x"}, nil)
	left := w.next(t, false)
	if left.Type != "DELETED" || left.Object["metadata"].(map[string]any)["labels"].(map[string]any)["app"] != "x" {
		t.Fatalf("leaving the selector is a DELETED with the old object: %v", left)
	}
	if back := w.next(t, false); back.Type != "ADDED" || back.name() != "a" {
		t.Fatalf("entering the selector is an ADDED: %s", back.Type)
	}
	if o := w.next(t, false); o.Type != "ADDED" || o.name() != "o" {
		t.Fatalf("%s %s", o.Type, o.name())
	}
	for _, x := range []*watcher{fw, nw} {
		if o := x.next(t, false); o.Type != "ADDED" || o.name() != "o" {
			t.Fatalf("namespace-scoped watch: %s %s", o.Type, o.name())
		}
		x.quiet(t, 30*time.Millisecond)
	}
	// Watching one object by name.
	one := c.watch(p + "/a?watch=true&resourceVersion=" + rv)
	if e := one.next(t, false); e.name() != "a" {
		t.Fatalf("%s", e.name())
	}
}

func TestWatchBookmarksAndTimeout(t *testing.T) {
	srv := testServer(t, Options{BookmarkInterval: 50 * time.Millisecond})
	c := newClient(t, srv)
	p := nsPath("default", "configmaps")
	c.createCM("default", "a", nil, nil)
	rv := itoa(srv.store.CurrentRV())
	w := c.watch(p + "?watch=true&allowWatchBookmarks=true&resourceVersion=" + rv)
	bm := w.next(t, true)
	if bm.Type != "BOOKMARK" || bm.rv() != rv || bm.Object["kind"] != "ConfigMap" {
		t.Fatalf("%v", bm)
	}
	// A bookmark never runs ahead of an undelivered event.
	c.createCM("default", "b", nil, nil)
	for {
		e := w.next(t, true)
		if e.Type == "ADDED" {
			break
		}
		if e.rv() != rv {
			t.Fatalf("bookmark %s before the event", e.rv())
		}
	}
	// Without allowWatchBookmarks there are none.
	nb := c.watch(p + "?watch=true&resourceVersion=" + rv)
	if e := nb.next(t, true); e.Type != "ADDED" {
		t.Fatal(e.Type)
	}
	nb.quiet(t, 150*time.Millisecond)
	// timeoutSeconds ends the stream cleanly.
	start := time.Now()
	tw := c.watch(p + "?watch=true&timeoutSeconds=1&resourceVersion=" + itoa(srv.store.CurrentRV()))
	if _, err := tw.ended(t); err == nil || err.Error() != "EOF" {
		t.Fatalf("end: %v", err)
	}
	if el := time.Since(start); el < 900*time.Millisecond || el > 5*time.Second {
		t.Fatalf("timeout after %v", el)
	}
}

func TestWatchOverHTTP2AndH2C(t *testing.T) {
	srv := testServer(t, Options{TLS: true})
	c := newClient(t, srv)
	w := c.watch("/api/v1/namespaces?watch=true")
	if w.resp.Proto != "HTTP/2.0" {
		t.Fatalf("proto %s", w.resp.Proto)
	}
	if e := w.next(t, false); e.Type != "ADDED" {
		t.Fatal(e.Type)
	}
	plain := testServer(t, Options{H2C: true})
	pc := newClient(t, plain)
	var p httpProtocols
	pc.hc.Transport = p.h2cTransport()
	r := pc.mustCode(pc.get("/api/v1/namespaces"), 200)
	if r.proto != "HTTP/2.0" {
		t.Fatalf("h2c proto %s", r.proto)
	}
}
