package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// contentTypes records the Content-Type of every response a client gets,
// by method and path.
type contentTypes struct {
	mu   sync.Mutex
	seen []string
}

func (c *contentTypes) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err == nil {
			verb := req.Method
			if req.URL.Query().Get("watch") == "true" {
				verb = "WATCH"
			}
			c.mu.Lock()
			c.seen = append(c.seen, verb+" "+resp.Header.Get("Content-Type"))
			c.mu.Unlock()
		}
		return resp, err
	})
}

func (c *contentTypes) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.seen
	c.seen = nil
	return s
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func restConfig(srv *Server, ct *contentTypes) *rest.Config {
	cfg := &rest.Config{Host: srv.URL(), BearerToken: srv.Token(), TLSClientConfig: rest.TLSClientConfig{CAData: srv.CAPEM()}}
	if ct != nil {
		cfg.WrapTransport = ct.wrap
	}
	return cfg
}

// Every verb through client-go's typed clients, on their defaults (protobuf
// for built-in types) and forced to JSON: the answers decode, and come in
// the media type asked for.
func TestTypedClientsGetTheirContentType(t *testing.T) {
	srv := testServer(t, Options{TLS: true, BookmarkInterval: 200 * time.Millisecond})
	for _, tc := range []struct {
		name, contentType, want, wantWatch string
	}{
		{"defaults", "", protobufContentType, protobufContentType + ";stream=watch"},
		{"json", "application/json", "application/json", "application/json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct := &contentTypes{}
			cfg := restConfig(srv, ct)
			cfg.ContentType = tc.contentType
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			ns := "ct-" + tc.name
			if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			cms := cs.CoreV1().ConfigMaps(ns)
			w, err := cms.Watch(ctx, metav1.ListOptions{AllowWatchBookmarks: true})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			c, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"k": "v"}}, Data: map[string]string{"x": "1"}}, metav1.CreateOptions{})
			if err != nil || c.UID == "" || c.Data["x"] != "1" || c.Labels["k"] != "v" {
				t.Fatalf("create: %+v %v", c, err)
			}
			got, err := cms.Get(ctx, "a", metav1.GetOptions{})
			if err != nil || got.ResourceVersion != c.ResourceVersion || got.Name != "a" {
				t.Fatalf("get: %+v %v", got, err)
			}
			got.Data["y"] = "2"
			u, err := cms.Update(ctx, got, metav1.UpdateOptions{})
			if err != nil || u.Data["y"] != "2" {
				t.Fatalf("update: %+v %v", u, err)
			}
			p, err := cms.Patch(ctx, "a", types.MergePatchType, []byte(`{"data":{"z":"3"}}`), metav1.PatchOptions{})
			if err != nil || p.Data["z"] != "3" {
				t.Fatalf("patch: %+v %v", p, err)
			}
			l, err := cms.List(ctx, metav1.ListOptions{})
			if err != nil || len(l.Items) != 1 || l.ResourceVersion == "" || l.Items[0].Data["z"] != "3" {
				t.Fatalf("list: %+v %v", l, err)
			}
			_, err = cms.Get(ctx, "missing", metav1.GetOptions{})
			if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), `configmaps "missing" not found`) {
				t.Fatalf("get missing: %v", err)
			}
			if err := cms.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			var types []watch.EventType
			deadline := time.After(5 * time.Second)
			for len(types) < 4 {
				select {
				case ev := <-w.ResultChan():
					if ev.Type == watch.Bookmark {
						if o, ok := ev.Object.(*corev1.ConfigMap); !ok || o.ResourceVersion == "" {
							t.Fatalf("bookmark: %#v", ev.Object)
						}
						continue
					}
					o, ok := ev.Object.(*corev1.ConfigMap)
					if !ok || o.Name != "a" {
						t.Fatalf("event %s: %#v", ev.Type, ev.Object)
					}
					types = append(types, ev.Type)
				case <-deadline:
					t.Fatalf("events so far: %v", types)
				}
			}
			if want := []watch.EventType{watch.Added, watch.Modified, watch.Modified, watch.Deleted}; !equalTypes(types, want) {
				t.Fatalf("events %v, want %v", types, want)
			}
			// A bookmark reaches the typed watch.
			select {
			case ev := <-w.ResultChan():
				if ev.Type != watch.Bookmark {
					t.Fatalf("after delete: %s", ev.Type)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no bookmark")
			}
			want := []string{"POST " + tc.want, "WATCH " + tc.wantWatch, "POST " + tc.want, "GET " + tc.want, "PUT " + tc.want,
				"PATCH " + tc.want, "GET " + tc.want, "GET " + tc.want, "DELETE " + tc.want}
			if got := ct.take(); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("content types:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

func equalTypes(a, b []watch.EventType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestAcceptNegotiation(t *testing.T) {
	srv := testServer(t, Options{})
	if err := srv.RegisterResource(ResourceDef{Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget", Namespaced: true, CustomResource: true}); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, srv)
	c.createCM("default", "a", nil, map[string]string{"k": "v"})
	c.mustCode(c.do("POST", "/apis/example.com/v1/namespaces/default/widgets", "", map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": "w"}}), 201)
	const pb, js = protobufContentType, "application/json"
	for _, tc := range []struct {
		path, accept string
		code         int
		contentType  string
	}{
		{"/api/v1/namespaces/default/configmaps/a", "", 200, js},
		{"/api/v1/namespaces/default/configmaps/a", "*/*", 200, js},
		{"/api/v1/namespaces/default/configmaps/a", pb, 200, pb},
		{"/api/v1/namespaces/default/configmaps/a", pb + ", */*", 200, pb},
		{"/api/v1/namespaces/default/configmaps/a", "application/json, " + pb, 200, js},
		{"/api/v1/namespaces/default/configmaps/a", "application/json;q=0.5, " + pb, 200, pb},
		{"/api/v1/namespaces/default/configmaps/a", "application/*", 406, js}, // go-restful's exact match
		{"/apis/example.com/v1/namespaces/default/widgets/w", "application/*", 200, js},
		{"/api/v1/namespaces/default/configmaps/a", "application/yaml", 200, "application/yaml"},
		{"/api/v1/namespaces/default/configmaps/a", "text/html", 406, js},
		{"/api/v1/namespaces/default/configmaps/missing", pb, 404, pb},
		{"/api/v1/namespaces/default/configmaps", pb, 200, pb},
		{"/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1", pb, 200, pb + ";stream=watch"},
		// The error is negotiated on its own: YAML is fine for a Status.
		{"/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1", "application/yaml", 406, "application/yaml"},
		{"/apis/example.com/v1/namespaces/default/widgets/w", pb, 406, pb},
		{"/apis/example.com/v1/namespaces/default/widgets/w", pb + ",application/json", 200, js},
		{"/apis/example.com/v1/namespaces/default/widgets", pb, 406, pb},
		{"/apis/example.com/v1/namespaces/default/widgets?watch=true", pb, 406, pb},
		{"/apis/example.com/v1/namespaces/default/widgets", pb + ";as=PartialObjectMetadataList;g=meta.k8s.io;v=v1", 200, pb},
		{"/apis/example.com/v1/namespaces/default/widgets", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1", 200, js},
		// Errors allow no conversion: nothing left in Accept, so JSON.
		{"/apis/example.com/v1/namespaces/default/widgets", pb + ";as=PartialObjectMetadata;g=meta.k8s.io;v=v1", 406, js},
		{"/api/v1/namespaces/default/configmaps", pb + ";as=Table;g=meta.k8s.io;v=v1", 406, js},
	} {
		hdr := http.Header{}
		if tc.accept != "" {
			hdr.Set("Accept", tc.accept)
		}
		r := c.doHeader("GET", tc.path, hdr)
		if r.code != tc.code || r.header.Get("Content-Type") != tc.contentType {
			t.Errorf("GET %s Accept %q: %d %s, want %d %s: %q", tc.path, tc.accept, r.code, r.header.Get("Content-Type"), tc.code, tc.contentType, truncate(r.body))
			continue
		}
		if tc.contentType == pb && !bytes.HasPrefix(r.body, []byte("k8s\x00")) {
			t.Errorf("GET %s Accept %q: no protobuf envelope: %q", tc.path, tc.accept, truncate(r.body))
		}
		if tc.code == 406 {
			st := decodeStatus(t, r)
			if st.Reason != metav1.StatusReasonNotAcceptable || st.Code != 406 {
				t.Errorf("GET %s Accept %q: %+v", tc.path, tc.accept, st)
			}
		}
	}
	// The messages of the real server's 406s.
	for _, tc := range []struct{ path, accept, msg string }{
		{"/apis/example.com/v1/namespaces/default/widgets", pb, msgNotAcceptable},
		{"/api/v1/namespaces/default/configmaps?watch=true", "application/yaml;q=0.9, text/html", msgNotAcceptableStream},
		{"/apis/example.com/v1/namespaces/default/widgets", pb + ";as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
			"you requested PartialObjectMetadata, but the requested object is a list (*unstructured.UnstructuredList)"},
		{"/api/v1/namespaces/default/configmaps/a", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
			"you requested PartialObjectMetadataList, but the requested object is not a list (*core.ConfigMap)"},
		{"/api/v1/namespaces/default/configmaps", "text/html", "406: Not Acceptable\n\nAvailable representations: application/json, application/yaml, " +
			"application/vnd.kubernetes.protobuf, application/json;stream=watch, application/vnd.kubernetes.protobuf;stream=watch"},
	} {
		hdr := http.Header{"Accept": {tc.accept}}
		if st := decodeStatus(t, c.doHeader("GET", tc.path, hdr)); st.Message != tc.msg {
			t.Errorf("GET %s Accept %q: %q, want %q", tc.path, tc.accept, st.Message, tc.msg)
		}
	}
}

func truncate(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}

func (c *client) doHeader(method, path string, hdr http.Header) *response {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header = hdr
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return &response{code: resp.StatusCode, header: resp.Header, body: b}
}

// decodeStatus decodes a Status body in JSON or protobuf.
func decodeStatus(t *testing.T, r *response) metav1.Status {
	t.Helper()
	var st metav1.Status
	if r.header.Get("Content-Type") == protobufContentType {
		obj, _, err := protoSerializer.Decode(r.body, nil, &st)
		if err != nil || obj != &st {
			t.Fatalf("protobuf Status: %v %q", err, truncate(r.body))
		}
		return st
	}
	if r.header.Get("Content-Type") == "application/yaml" {
		if err := yaml.Unmarshal(r.body, &st); err != nil {
			t.Fatalf("YAML Status: %v %q", err, truncate(r.body))
		}
		return st
	}
	if err := sigsUnmarshal(r.body, &st); err != nil {
		t.Fatalf("JSON Status: %v %q", err, truncate(r.body))
	}
	return st
}

// readFrames splits a protobuf watch stream into WatchEvents and decodes
// their objects with the protobuf serializer.
func readFrames(t *testing.T, body []byte) (types []string, objs []runtime.Object) {
	t.Helper()
	for len(body) > 0 {
		if len(body) < 4 {
			t.Fatalf("partial length prefix %q", body)
		}
		n := binary.BigEndian.Uint32(body)
		if uint32(len(body)-4) < n {
			t.Fatalf("frame of %d bytes, %d left", n, len(body)-4)
		}
		var ev metav1.WatchEvent
		if err := ev.Unmarshal(body[4 : 4+n]); err != nil {
			t.Fatalf("WatchEvent: %v", err)
		}
		body = body[4+n:]
		if !bytes.HasPrefix(ev.Object.Raw, []byte("k8s\x00")) {
			t.Fatalf("%s: object without the envelope: %q", ev.Type, truncate(ev.Object.Raw))
		}
		obj, _, err := protoSerializer.Decode(ev.Object.Raw, nil, nil)
		if err != nil {
			t.Fatalf("%s: object: %v", ev.Type, err)
		}
		types = append(types, ev.Type)
		objs = append(objs, obj)
	}
	return types, objs
}

// The frames of a protobuf watch, read off the wire: 4-byte big-endian
// lengths, WatchEvents whose objects are enveloped ConfigMaps, BOOKMARKs
// (the initial-events-end one included) and ERROR Statuses.
func TestProtobufWatchFrames(t *testing.T) {
	srv := testServer(t, Options{})
	c := newClient(t, srv)
	c.createCM("default", "a", nil, map[string]string{"k": "v"})
	c.createCM("default", "b", nil, nil)
	hdr := func() http.Header { return http.Header{"Accept": {protobufContentType}} }
	r := c.doHeader("GET", "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan", hdr())
	types, objs := readFrames(t, r.body)
	if strings.Join(types, ",") != "ADDED,ADDED,BOOKMARK" {
		t.Fatalf("events %v", types)
	}
	if cm := objs[0].(*corev1.ConfigMap); cm.Name != "a" || cm.Data["k"] != "v" || cm.Kind != "ConfigMap" {
		t.Errorf("first: %+v", cm)
	}
	if bm := objs[2].(*corev1.ConfigMap); bm.Annotations["k8s.io/initial-events-end"] != "true" || bm.ResourceVersion == "" {
		t.Errorf("bookmark: %+v", bm)
	}
	// A watch from a compacted RV: 200 and one ERROR event with the 410.
	if _, err := srv.InjectFault(FaultSpec{Type: FaultCompact}); err != nil {
		t.Fatal(err)
	}
	r = c.doHeader("GET", "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=2", hdr())
	types, objs = readFrames(t, r.body)
	if r.code != 200 || len(types) != 1 || types[0] != "ERROR" {
		t.Fatalf("%d %v", r.code, types)
	}
	if st := objs[0].(*metav1.Status); st.Code != 410 || st.Reason != metav1.StatusReasonExpired {
		t.Errorf("error: %+v", st)
	}
	// The same event frame is shared by every protobuf watcher.
	rv := srv.store.CurrentRV()
	c.createCM("default", "c", nil, nil)
	var frames [][]byte
	for i := 0; i < 2; i++ {
		r = c.doHeader("GET", "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1&resourceVersion="+itoa(rv), hdr())
		frames = append(frames, r.body)
	}
	if !bytes.Equal(frames[0], frames[1]) || len(frames[0]) == 0 {
		t.Errorf("two watchers got different bytes")
	}
	r5 := srv.store.find("configmaps")
	srv.store.mu.RLock()
	ev := r5.hist.at(r5.hist.n - 1)
	srv.store.mu.RUnlock()
	if fs := ev.frames.Load(); fs == nil || !bytes.Equal(fs[int(wireProtobuf)*numVariants+variantAsIs], frames[0]) {
		t.Errorf("the event's protobuf frame is not cached")
	}
}

// client-go's metadata client and informer path: PartialObjectMetadata(List)
// in protobuf for built-in and custom resources.
func TestMetadataClient(t *testing.T) {
	srv := testServer(t, Options{})
	if err := srv.RegisterResource(ResourceDef{Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget", Namespaced: true, CustomResource: true}); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, srv)
	c.createCM("default", "a", map[string]string{"l": "1"}, map[string]string{"k": "v"})
	c.mustCode(c.do("POST", "/apis/example.com/v1/namespaces/default/widgets", "", map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": "w", "labels": map[string]any{"l": "2"}}, "spec": map[string]any{"x": 1}}), 201)
	ct := &contentTypes{}
	mc, err := metadata.NewForConfig(restConfig(srv, ct))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, gvr := range []schema.GroupVersionResource{{Version: "v1", Resource: "configmaps"}, {Group: "example.com", Version: "v1", Resource: "widgets"}} {
		ri := mc.Resource(gvr).Namespace("default")
		l, err := ri.List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) != 1 || l.ResourceVersion == "" || l.Items[0].Labels["l"] == "" || l.Items[0].UID == "" {
			t.Fatalf("%s: list %+v %v", gvr, l, err)
		}
		w, err := ri.Watch(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-w.ResultChan():
			m, ok := ev.Object.(*metav1.PartialObjectMetadata)
			if ev.Type != watch.Added || !ok || m.Name != l.Items[0].Name {
				t.Fatalf("%s: watch event %s %#v", gvr, ev.Type, ev.Object)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no event")
		}
		w.Stop()
		g, err := ri.Get(ctx, l.Items[0].Name, metav1.GetOptions{})
		if err != nil || g.UID != l.Items[0].UID {
			t.Fatalf("%s: get %+v %v", gvr, g, err)
		}
	}
	want := "GET " + protobufContentType
	for _, got := range ct.take() {
		if !strings.HasSuffix(got, protobufContentType) && !strings.HasSuffix(got, protobufContentType+";stream=watch") {
			t.Errorf("response %s, want %s", got, want)
		}
	}
	// The JSON equivalent.
	hdr := http.Header{"Accept": {"application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"}}
	r := c.doHeader("GET", "/apis/example.com/v1/namespaces/default/widgets", hdr)
	var pl metav1.PartialObjectMetadataList
	if err := sigsUnmarshal(r.body, &pl); err != nil || pl.Kind != "PartialObjectMetadataList" || len(pl.Items) != 1 ||
		pl.Items[0].Kind != "PartialObjectMetadata" || pl.Items[0].Labels["l"] != "2" {
		t.Fatalf("JSON list: %v %s", err, r.body)
	}
	if bytes.Contains(r.body, []byte(`"spec"`)) {
		t.Errorf("JSON list has more than metadata: %s", r.body)
	}
}

// Stream faults break a protobuf watch the way they break a JSON one.
func TestProtobufStreamFaults(t *testing.T) {
	srv := testServer(t, Options{})
	c := newClient(t, srv)
	for i := 0; i < 5; i++ {
		c.createCM("default", "cm"+itoa(uint64(i)), nil, nil)
	}
	cs, err := kubernetes.NewForConfig(restConfig(srv, nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		fault   FaultSpec
		wantErr string // substring of the error a client-go watch reports; "" = clean end
		events  int
	}{
		{FaultSpec{Type: FaultClose, AfterEvents: 2}, "", 2},
		{FaultSpec{Type: FaultInternalError, AfterEvents: 2, Message: "etcd leader changed"}, "etcd leader changed", 2},
		{FaultSpec{Type: FaultGone, AfterEvents: 3}, "too old resource version", 3},
		{FaultSpec{Type: FaultTruncate, AfterEvents: 2}, "", 2},
		{FaultSpec{Type: FaultGarbage, AfterEvents: 2}, "", 2},
		{FaultSpec{Type: FaultStall, AfterEvents: 2, DurationMs: 300}, "", 2},
	} {
		t.Run(tc.fault.Type, func(t *testing.T) {
			tc.fault.Verb = "watch"
			if _, err := srv.InjectFault(tc.fault); err != nil {
				t.Fatal(err)
			}
			w, err := cs.CoreV1().ConfigMaps("default").Watch(context.Background(), metav1.ListOptions{ResourceVersion: "0"})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			n := 0
			var errStatus error
			for ev := range w.ResultChan() {
				switch ev.Type {
				case watch.Added:
					n++
				case watch.Error:
					errStatus = apierrors.FromObject(ev.Object)
				}
			}
			if n != tc.events {
				t.Errorf("%d events, want %d", n, tc.events)
			}
			switch {
			case tc.wantErr == "" && errStatus != nil && !errors.Is(errStatus, io.EOF):
				// Truncated and garbled frames end the watch with a decoding
				// error event from client-go itself, which is fine too.
				if tc.fault.Type != FaultTruncate && tc.fault.Type != FaultGarbage {
					t.Errorf("error %v", errStatus)
				}
			case tc.wantErr != "" && (errStatus == nil || !strings.Contains(errStatus.Error(), tc.wantErr)):
				t.Errorf("error %v, want %q", errStatus, tc.wantErr)
			}
		})
	}
}

func sigsUnmarshal(b []byte, v any) error { return sigsjson.UnmarshalCaseSensitivePreserveInts(b, v) }
