package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestDiscoveryServesBuiltinAndRuntimeResources(t *testing.T) {
	srv := testServer(t, Options{TLS: true})
	c := newClient(t, srv)
	if err := srv.RegisterResource(ResourceDef{Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget", Namespaced: true, CustomResource: true}); err != nil {
		t.Fatal(err)
	}
	if err := srv.RegisterResource(ResourceDef{Group: "example.com", Version: "v1", Resource: "clusterwidgets", Kind: "ClusterWidget", CustomResource: true}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path     string
		contains []string
	}{
		{"/api", []string{`"kind":"APIVersions"`, `"versions":["v1"]`}},
		{"/api/v1", []string{`"kind":"APIResourceList"`, `"groupVersion":"v1"`, `{"name":"configmaps","singularName":"configmap","namespaced":true,"kind":"ConfigMap","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"shortNames":["cm"]}`, `"name":"namespaces","singularName":"namespace","namespaced":false`, `"name":"pods/status"`}},
		{"/apis", []string{`"kind":"APIGroupList"`, `"name":"apps"`, `"name":"coordination.k8s.io"`, `"name":"example.com"`}},
		{"/apis/apps", []string{`"kind":"APIGroup"`, `"preferredVersion":{"groupVersion":"apps/v1","version":"v1"}`}},
		{"/apis/apps/v1", []string{`"groupVersion":"apps/v1"`, `"name":"deployments","singularName":"deployment","namespaced":true,"kind":"Deployment"`}},
		{"/apis/coordination.k8s.io/v1", []string{`"name":"leases"`}},
		{"/apis/example.com/v1", []string{`"name":"widgets","singularName":"widget","namespaced":true,"kind":"Widget"`, `"name":"clusterwidgets","singularName":"clusterwidget","namespaced":false`}},
		{"/version", []string{`"major":"1"`, `"minor":"37"`, `"gitVersion":"v1.37.2-fake"`}},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			r := c.mustCode(c.get(tc.path), 200)
			for _, s := range tc.contains {
				if !strings.Contains(string(r.body), s) {
					t.Errorf("%s lacks %s:\n%s", tc.path, s, r.body)
				}
			}
		})
	}
	t.Run("aggregated", func(t *testing.T) {
		req, _ := http.NewRequest("GET", srv.URL()+"/apis", nil)
		req.Header.Set("Authorization", "Bearer "+srv.Token())
		req.Header.Set("Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json")
		resp, err := c.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); ct != aggregatedContentType {
			t.Fatalf("content type %q", ct)
		}
	})
	c.mustCode(c.get("/apis/nope/v1"), 404)
	c.mustCode(c.get("/api/v1/nopes"), 404)
}

func TestAuthenticationRequiresTheBearerToken(t *testing.T) {
	srv := testServer(t, Options{TLS: true, Token: "s3cret"})
	c := newClient(t, srv)
	for _, tc := range []struct {
		token string
		path  string
		code  int
	}{
		{"", "/api/v1/namespaces", 401},
		{"wrong", "/api/v1/namespaces", 401},
		{"s3cret", "/api/v1/namespaces", 200},
		{"", "/version", 401},
		{"", "/healthz", 200},
		{"", "/_fake/stats", 200},
	} {
		c.token = tc.token
		r := c.get(tc.path)
		if r.code != tc.code {
			t.Errorf("token %q %s: %d, want %d", tc.token, tc.path, r.code, tc.code)
		}
		if tc.code == 401 && (r.str("reason") != "Unauthorized" || r.str("kind") != "Status") {
			t.Errorf("401 body %s", r.body)
		}
	}
}

func TestCRUDErrorsCarryTheRealStatusReasons(t *testing.T) {
	srv := testServer(t, Options{})
	c := newClient(t, srv)
	p := nsPath("default", "configmaps")
	created := c.createCM("default", "a", map[string]string{"app": "x"}, map[string]string{"k": "v"})
	rv := created.str("metadata", "resourceVersion")
	uid := created.str("metadata", "uid")
	if rv == "" || uid == "" || created.str("metadata", "creationTimestamp") == "" {
		t.Fatalf("server fields missing: %s", created.body)
	}
	if created.str("metadata", "generation") != "" {
		t.Errorf("ConfigMaps have no generation: %s", created.body)
	}
	tests := []struct {
		name        string
		method      string
		path        string
		contentType string
		body        any
		code        int
		reason      string
		message     string
	}{
		{"create duplicate", "POST", p, "", cm("a", nil, nil), 409, "AlreadyExists", `configmaps "a" already exists`},
		{"get missing", "GET", p + "/nope", "", nil, 404, "NotFound", `configmaps "nope" not found`},
		{"update stale rv", "PUT", p + "/a", "", map[string]any{"metadata": map[string]any{"name": "a", "resourceVersion": "1"}}, 409, "Conflict",
			`Operation cannot be fulfilled on configmaps "a": the object has been modified; please apply your changes to the latest version and try again`},
		{"update missing", "PUT", p + "/nope", "", cm("nope", nil, nil), 404, "NotFound", `configmaps "nope" not found`},
		{"update name mismatch", "PUT", p + "/a", "", cm("b", nil, nil), 400, "BadRequest", "does not match the name on the URL"},
		{"delete missing", "DELETE", p + "/nope", "", nil, 404, "NotFound", `configmaps "nope" not found`},
		{"missing namespace", "POST", nsPath("nope", "configmaps"), "", cm("x", nil, nil), 404, "NotFound", `namespaces "nope" not found`},
		{"invalid name", "POST", p, "", cm("Bad_Name", nil, nil), 422, "Invalid", `ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name"`},
		{"no name", "POST", p, "", map[string]any{"metadata": map[string]any{}}, 422, "Invalid", "name or generateName is required"},
		{"wrong kind", "POST", p, "", map[string]any{"kind": "Secret", "apiVersion": "v1", "metadata": map[string]any{"name": "s"}}, 400, "BadRequest", "kind"},
		{"patch missing", "PATCH", p + "/nope", "application/merge-patch+json", `{"data":{"a":"b"}}`, 404, "NotFound", `configmaps "nope" not found`},
		{"patch stale rv", "PATCH", p + "/a", "application/merge-patch+json", `{"metadata":{"resourceVersion":"1"}}`, 409, "Conflict", "the object has been modified"},
		{"apply patch", "PATCH", p + "/a", "application/apply-patch+yaml", `{}`, 415, "UnsupportedMediaType", ""},
		{"delete precondition", "DELETE", p + "/a", "", `{"preconditions":{"uid":"other"}}`, 409, "Conflict",
			`Operation cannot be fulfilled on ConfigMap "a": the UID in the precondition (other) does not match the UID in record (` + uid + `). The object might have been deleted and then recreated`},
		{"delete rv precondition", "DELETE", p + "/a", "", `{"preconditions":{"resourceVersion":"1"}}`, 409, "Conflict",
			`Operation cannot be fulfilled on ConfigMap "a": the ResourceVersion in the precondition (1) does not match the ResourceVersion in record (` + rv + `). The object might have been modified`},
		{"patch invalid JSON", "PATCH", p + "/nope", "application/merge-patch+json", `{"data":`, 400, "BadRequest", "invalid JSON patch"},
		{"json patch not a list", "PATCH", p + "/a", "application/json-patch+json", `{"op":"add"}`, 400, "BadRequest",
			"error decoding patch: json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp"},
		{"json patch of a missing object, not a list", "PATCH", p + "/nope", "application/json-patch+json", `{"op":"add"}`, 404, "NotFound", `configmaps "nope" not found`},
		{"merge patch not an object", "PATCH", p + "/a", "application/merge-patch+json", `[1]`, 400, "BadRequest",
			"error decoding patch: json: cannot unmarshal array into Go value of type map[string]interface {}"},
		{"watch bad resourceVersion", "GET", p + "?watch=1&resourceVersion=x", "", nil, 500, "",
			`resourceVersion: Invalid value: "x": strconv.ParseUint: parsing "x": invalid syntax`},
		{"json patch test fails", "PATCH", p + "/a", "application/json-patch+json", `[{"op":"test","path":"/data/k","value":"no"}]`, 422, "Invalid",
			"the server rejected our request due to an error in our request"},
		{"bad continue token", "GET", p + "?limit=1&continue=garbage", "", nil, 400, "BadRequest", "invalid continue token: continue key is not valid: "},
		{"bad resourceVersion", "GET", p + "?resourceVersion=x", "", nil, 400, "BadRequest",
			`invalid resource version: resourceVersion: Invalid value: "x": strconv.ParseUint: parsing "x": invalid syntax`},
		{"namespaced name without namespace", "GET", "/api/v1/configmaps/a", "", nil, 404, "NotFound", "the server could not find the requested resource"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := c.do(tc.method, tc.path, tc.contentType, tc.body)
			if r.code != tc.code || r.str("reason") != tc.reason || r.str("kind") != "Status" || r.str("status") != "Failure" {
				t.Fatalf("got %d %s", r.code, r.body)
			}
			if !strings.Contains(r.str("message"), tc.message) {
				t.Fatalf("message %q lacks %q", r.str("message"), tc.message)
			}
			if r.obj["code"] != float64(tc.code) {
				t.Fatalf("code field %v", r.obj["code"])
			}
			switch tc.name {
			case "delete precondition", "delete rv precondition": // rest.BeforeDelete names the Kind
				if r.str("details", "kind") != "ConfigMap" || r.str("details", "name") != "a" {
					t.Fatalf("details %s", r.body)
				}
			case "json patch test fails":
				if d, ok := r.obj["details"].(map[string]any); !ok || len(d) != 0 {
					t.Fatalf("details %s", r.body)
				}
			}
		})
	}
	// Nothing above changed the object.
	if got := c.get(p+"/a").str("metadata", "resourceVersion"); got != rv {
		t.Fatalf("failed requests changed the object: rv %s -> %s", rv, got)
	}
}

func TestWritesFollowRegistrySemantics(t *testing.T) {
	writesFollowRegistrySemantics(t, testServer(t, Options{}))
}

// Options.DropDecoded: the same writes (patches decode the stored JSON again), and the stored
// objects keep no decoded form.
func TestWritesFollowRegistrySemanticsWithoutDecodedObjects(t *testing.T) {
	srv := testServer(t, Options{DropDecoded: true})
	writesFollowRegistrySemantics(t, srv)
	c := newClient(t, srv)
	c.createCM("default", "kept", map[string]string{"app": "x"}, map[string]string{"k": "v"})
	c.mustCode(c.do("PATCH", nsPath("default", "configmaps")+"/kept", "application/merge-patch+json", `{"data":{"k":"w"}}`), 200)
	got := c.mustCode(c.get(nsPath("default", "configmaps")+"?fieldSelector=metadata.name%3Dkept"), 200)
	items, _ := got.obj["items"].([]any)
	if len(items) != 1 || fmt.Sprint(items[0].(map[string]any)["data"]) != "map[k:w]" {
		t.Fatalf("field-selected list after a patch: %s", got.body)
	}
	r := srv.store.lookup("", "v1", "configmaps")
	srv.store.mu.RLock()
	defer srv.store.mu.RUnlock()
	for key, o := range r.objects {
		if o.data.Load() != nil {
			t.Errorf("%s keeps its decoded form", key)
		}
	}
}

func writesFollowRegistrySemantics(t *testing.T, srv *Server) {
	c := newClient(t, srv)
	p := nsPath("default", "configmaps")
	a := c.createCM("default", "a", nil, map[string]string{"k": "v"})
	rv1 := a.str("metadata", "resourceVersion")

	// A no-op update writes nothing: same resourceVersion.
	same := c.mustCode(c.do("PUT", p+"/a", "", a.obj), 200)
	if same.str("metadata", "resourceVersion") != rv1 {
		t.Fatalf("no-op update bumped the resourceVersion: %s -> %s", rv1, same.str("metadata", "resourceVersion"))
	}
	// Unconditional update (no resourceVersion) is allowed for ConfigMaps.
	u := c.mustCode(c.do("PUT", p+"/a", "", cm("a", nil, map[string]string{"k": "w"})), 200)
	rv2 := u.str("metadata", "resourceVersion")
	if rv2 == rv1 || u.str("metadata", "uid") != a.str("metadata", "uid") || u.str("metadata", "creationTimestamp") != a.str("metadata", "creationTimestamp") {
		t.Fatalf("update: %s", u.body)
	}
	// Patches.
	mp := c.mustCode(c.do("PATCH", p+"/a", "application/merge-patch+json", `{"data":{"m":"1","k":null}}`), 200)
	if mp.str("data", "m") != "1" || mp.str("data", "k") != "" {
		t.Fatalf("merge patch: %s", mp.body)
	}
	jp := c.mustCode(c.do("PATCH", p+"/a", "application/json-patch+json", `[{"op":"add","path":"/data/j","value":"2"}]`), 200)
	if jp.str("data", "j") != "2" || jp.str("data", "m") != "1" {
		t.Fatalf("json patch: %s", jp.body)
	}
	sp := c.mustCode(c.do("PATCH", p+"/a", "application/strategic-merge-patch+json", `{"metadata":{"labels":{"s":"3"}}}`), 200)
	if sp.str("metadata", "labels", "s") != "3" {
		t.Fatalf("strategic patch: %s", sp.body)
	}
	// generateName.
	g := c.mustCode(c.do("POST", p, "", map[string]any{"metadata": map[string]any{"generateName": "gen-"}}), 201)
	if n := g.str("metadata", "name"); !strings.HasPrefix(n, "gen-") || len(n) != len("gen-")+5 {
		t.Fatalf("generateName: %q", n)
	}
	// Delete answers a Status for ConfigMaps.
	d := c.mustCode(c.do("DELETE", p+"/a", "", nil), 200)
	if d.str("kind") != "Status" || d.str("status") != "Success" || d.str("details", "name") != "a" || d.str("details", "kind") != "configmaps" || d.str("details", "uid") != a.str("metadata", "uid") {
		t.Fatalf("delete: %s", d.body)
	}
	c.mustCode(c.get(p+"/a"), 404)
	// A recreated name is a new object.
	b := c.createCM("default", "a", nil, nil)
	if b.str("metadata", "uid") == a.str("metadata", "uid") {
		t.Fatal("recreated object kept its UID")
	}
	// dryRun writes nothing.
	before := srv.store.CurrentRV()
	c.mustCode(c.do("POST", p+"?dryRun=All", "", cm("dry", nil, nil)), 201)
	c.mustCode(c.get(p+"/dry"), 404)
	if srv.store.CurrentRV() != before {
		t.Fatal("dry run wrote")
	}
}

func TestGenerationAndStatusSubresource(t *testing.T) {
	srv := testServer(t, Options{})
	c := newClient(t, srv)
	p := "/apis/apps/v1/namespaces/default/deployments"
	dep := map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "d"},
		"spec": map[string]any{"replicas": 1}, "status": map[string]any{"replicas": 7}}
	r := c.mustCode(c.do("POST", p, "", dep), 201)
	if r.str("metadata", "generation") != "1" || r.str("status", "replicas") != "" {
		t.Fatalf("create: %s", r.body)
	}
	r = c.mustCode(c.do("PATCH", p+"/d", "application/merge-patch+json", `{"metadata":{"labels":{"a":"b"}},"status":{"replicas":9}}`), 200)
	if r.str("metadata", "generation") != "1" || r.str("status", "replicas") != "" {
		t.Fatalf("metadata-only patch must not bump generation nor touch status: %s", r.body)
	}
	r = c.mustCode(c.do("PATCH", p+"/d", "application/merge-patch+json", `{"spec":{"replicas":3}}`), 200)
	if r.str("metadata", "generation") != "2" {
		t.Fatalf("spec change must bump generation: %s", r.body)
	}
	r = c.mustCode(c.do("PATCH", p+"/d/status", "application/merge-patch+json", `{"status":{"replicas":3},"spec":{"replicas":100}}`), 200)
	if r.str("status", "replicas") != "3" || r.str("spec", "replicas") != "3" || r.str("metadata", "generation") != "2" {
		t.Fatalf("status patch: %s", r.body)
	}
	c.mustCode(c.do("PATCH", nsPath("default", "configmaps")+"/x/status", "application/merge-patch+json", `{}`), 404)
}

func TestFinalizersDelayDeletion(t *testing.T) {
	srv := testServer(t, Options{})
	c := newClient(t, srv)
	p := nsPath("default", "configmaps")
	o := cm("f", nil, nil)
	o["metadata"].(map[string]any)["finalizers"] = []string{"example.com/hold"}
	created := c.mustCode(c.do("POST", p, "", o), 201)
	w := c.watch(p + "?watch=1&resourceVersion=" + created.str("metadata", "resourceVersion"))
	d := c.mustCode(c.do("DELETE", p+"/f", "", nil), 200)
	if d.str("kind") != "ConfigMap" || d.str("metadata", "deletionTimestamp") == "" {
		t.Fatalf("delete with finalizers must return the object marked for deletion: %s", d.body)
	}
	c.mustCode(c.get(p+"/f"), 200)
	if ev := w.next(t, false); ev.Type != "MODIFIED" {
		t.Fatalf("got %s", ev.Type)
	}
	c.mustCode(c.do("PATCH", p+"/f", "application/merge-patch+json", `{"metadata":{"finalizers":null}}`), 200)
	if ev := w.next(t, false); ev.Type != "MODIFIED" {
		t.Fatalf("got %s", ev.Type)
	}
	if ev := w.next(t, false); ev.Type != "DELETED" || ev.name() != "f" {
		t.Fatalf("got %s %s", ev.Type, ev.name())
	}
	c.mustCode(c.get(p+"/f"), 404)
}

func TestNamespaceDeletionRemovesItsContent(t *testing.T) {
	srv := testServer(t, Options{})
	c := newClient(t, srv)
	c.createNS("doomed")
	c.createCM("doomed", "a", nil, nil)
	c.createCM("doomed", "b", nil, nil)
	n := c.mustCode(c.do("DELETE", "/api/v1/namespaces/doomed", "", nil), 200)
	if n.str("kind") != "Namespace" || n.str("status", "phase") != "Terminating" {
		t.Fatalf("namespace delete returns the namespace: %s", n.body)
	}
	c.mustCode(c.get("/api/v1/namespaces/doomed"), 404)
	if l := c.mustCode(c.get(nsPath("doomed", "configmaps")), 200); len(l.obj["items"].([]any)) != 0 {
		t.Fatalf("content left: %s", l.body)
	}
	ns := c.mustCode(c.get("/api/v1/namespaces/default"), 200)
	if ns.str("metadata", "labels", "kubernetes.io/metadata.name") != "default" || ns.str("status", "phase") != "Active" {
		t.Fatalf("namespace defaults: %s", ns.body)
	}

	// A namespace with finalized content stays until the content is gone.
	c.createNS("held")
	c.createCM("held", "a", nil, nil)
	c.mustCode(c.do("POST", nsPath("held", "configmaps"), "", map[string]any{"metadata": map[string]any{"name": "f", "finalizers": []string{"example.com/hold"}}}), 201)
	c.mustCode(c.do("DELETE", "/api/v1/namespaces/held", "", nil), 200)
	c.mustCode(c.get(nsPath("held", "configmaps")+"/a"), 404)
	c.mustCode(c.get("/api/v1/namespaces/held"), 200)
	c.mustCode(c.do("PATCH", nsPath("held", "configmaps")+"/f", "application/merge-patch+json", `{"metadata":{"finalizers":null}}`), 200)
	c.mustCode(c.get("/api/v1/namespaces/held"), 404)

	// Deleting the content costs O(n log n), not a sort per object (20k
	// objects took minutes that way).
	if _, err := srv.Seed(SeedSpec{Resource: "configmaps", Namespace: "big", Count: 20000, Bytes: 200}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	c.mustCode(c.do("DELETE", "/api/v1/namespaces/big", "", nil), 200)
	if took := time.Since(began); took > 15*time.Second {
		t.Errorf("deleting a namespace of 20000 objects took %v", took)
	}
	c.mustCode(c.get("/api/v1/namespaces/big"), 404)
}

func TestSelectorsUseTheFullSyntax(t *testing.T) {
	srv := testServer(t, Options{})
	c := newClient(t, srv)
	c.createNS("other")
	c.createCM("default", "a", map[string]string{"env": "prod", "tier": "web"}, nil)
	c.createCM("default", "b", map[string]string{"env": "dev", "tier": "web"}, nil)
	c.createCM("default", "c", map[string]string{"env": "test"}, nil)
	c.createCM("default", "d", nil, nil)
	c.createCM("other", "a", map[string]string{"env": "prod"}, nil)
	names := func(r *response) string {
		var out []string
		for _, it := range r.obj["items"].([]any) {
			m := it.(map[string]any)["metadata"].(map[string]any)
			out = append(out, m["namespace"].(string)+"/"+m["name"].(string))
		}
		return strings.Join(out, ",")
	}
	tests := []struct {
		query string
		want  string
	}{
		{"labelSelector=env%3Dprod", "default/a,other/a"},
		{"labelSelector=env%3D%3Dprod", "default/a,other/a"},
		{"labelSelector=env!%3Dprod", "default/b,default/c,default/d"},
		{"labelSelector=env+in+(dev,test)", "default/b,default/c"},
		{"labelSelector=env+notin+(dev,test)", "default/a,default/d,other/a"},
		{"labelSelector=tier", "default/a,default/b"},
		{"labelSelector=!tier", "default/c,default/d,other/a"},
		{"labelSelector=env%3Dprod,tier%3Dweb", "default/a"},
		{"fieldSelector=metadata.name%3Da", "default/a,other/a"},
		{"fieldSelector=metadata.namespace%3Dother", "other/a"},
		{"fieldSelector=metadata.name!%3Da,metadata.namespace%3Ddefault", "default/b,default/c,default/d"},
	}
	for _, tc := range tests {
		r := c.mustCode(c.get("/api/v1/configmaps?"+tc.query), 200)
		if got := names(r); got != tc.want {
			t.Errorf("%s: got %s want %s", tc.query, got, tc.want)
		}
	}
	for _, q := range []string{"labelSelector=env+in+(", "fieldSelector=data.k%3Dv"} {
		r := c.get("/api/v1/configmaps?" + q)
		if r.code != 400 || r.str("reason") != "BadRequest" {
			t.Errorf("%s: %d %s", q, r.code, r.body)
		}
	}
	// Kinds without their own field label conversion get the generic message.
	if r := c.get("/api/v1/configmaps?fieldSelector=data.k%3Dv"); r.str("message") != `"data.k" is not a known field selector: only "metadata.name", "metadata.namespace"` {
		t.Errorf("message: %s", r.body)
	}
	if r := c.get("/api/v1/secrets?fieldSelector=data.k%3Dv"); r.str("message") != "field label not supported: data.k" {
		t.Errorf("message: %s", r.body)
	}
	c.mustCode(c.get("/api/v1/services?fieldSelector=spec.type%3DClusterIP,spec.clusterIP%3D10.0.0.1"), 200)
}

func TestListResourceVersionSemantics(t *testing.T) {
	srv := testServer(t, Options{TooLargeRVWait: 100 * time.Millisecond})
	c := newClient(t, srv)
	p := nsPath("default", "configmaps")
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		c.createCM("default", n, nil, map[string]string{"v": "1"})
	}
	rv5 := srv.store.CurrentRV()
	c.mustCode(c.do("PATCH", p+"/a", "application/merge-patch+json", `{"data":{"v":"2"}}`), 200)
	c.mustCode(c.do("DELETE", p+"/b", "", nil), 200)
	c.createCM("default", "f", nil, nil)
	cur := srv.store.CurrentRV()
	itemNames := func(r *response) string {
		var out []string
		for _, it := range r.obj["items"].([]any) {
			m := it.(map[string]any)
			if _, typed := m["kind"]; typed {
				t.Errorf("built-in list items carry no kind: %v", m)
			}
			out = append(out, m["metadata"].(map[string]any)["name"].(string))
		}
		return strings.Join(out, ",")
	}
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	tests := []struct {
		name   string
		query  string
		code   int
		items  string
		rv     string
		reason string
	}{
		{"consistent", "", 200, "a,c,d,e,f", u(cur), ""},
		{"rv 0 any", "resourceVersion=0", 200, "a,c,d,e,f", u(cur), ""},
		{"rv 0 ignores limit", "resourceVersion=0&limit=2", 200, "a,c,d,e,f", u(cur), ""},
		{"not older than", "resourceVersion=" + u(rv5), 200, "a,c,d,e,f", u(cur), ""},
		{"exact", "resourceVersion=" + u(rv5) + "&resourceVersionMatch=Exact", 200, "a,b,c,d,e", u(rv5), ""},
		{"legacy exact with limit", "resourceVersion=" + u(rv5) + "&limit=10", 200, "a,b,c,d,e", u(rv5), ""},
		{"too large", "resourceVersion=" + u(cur+100), 504, "", "", "Timeout"},
		{"exact too large", "resourceVersion=" + u(cur+100) + "&resourceVersionMatch=Exact", 504, "", "", "Timeout"},
		{"match without rv", "resourceVersionMatch=Exact", 422, "", "", "Invalid"},
		{"exact rv 0", "resourceVersion=0&resourceVersionMatch=Exact", 422, "", "", "Invalid"},
		{"sendInitialEvents on list", "sendInitialEvents=true", 422, "", "", "Invalid"},
		{"bad rv", "resourceVersion=abc", 400, "", "", "BadRequest"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := c.get(p + "?" + tc.query)
			if r.code != tc.code {
				t.Fatalf("%d %s", r.code, r.body)
			}
			if tc.code != 200 {
				if r.str("reason") != tc.reason {
					t.Fatalf("reason %s", r.body)
				}
				return
			}
			if r.str("kind") != "ConfigMapList" || r.str("apiVersion") != "v1" {
				t.Fatalf("list type: %s", r.body)
			}
			if got := itemNames(r); got != tc.items {
				t.Fatalf("items %s, want %s", got, tc.items)
			}
			if got := r.str("metadata", "resourceVersion"); got != tc.rv {
				t.Fatalf("list rv %s, want %s", got, tc.rv)
			}
		})
	}
	for _, q := range []string{"", "&resourceVersionMatch=Exact", "&limit=1"} {
		// The watch cache serves exact lists too: the same wait and answer.
		r := c.get(p + "?resourceVersion=" + u(cur+100) + q)
		if r.code != 504 || r.str("message") != fmt.Sprintf("Timeout: Too large resource version: %d, current: %d", cur+100, cur) ||
			r.header.Get("Retry-After") != "1" || r.obj["details"].(map[string]any)["retryAfterSeconds"] != float64(1) {
			t.Fatalf("too large %q: %s %v", q, r.body, r.header)
		}
	}
	srv.store.compact(nil)
	r := c.mustCode(c.get(p+"?resourceVersion="+u(rv5)+"&resourceVersionMatch=Exact"), 410)
	if r.str("reason") != "Expired" || r.str("message") != msgListTooOld {
		t.Fatalf("exact after compaction: %s", r.body)
	}
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }

func TestPaginationIsAConsistentSnapshotUntilCompaction(t *testing.T) {
	srv := testServer(t, Options{})
	c := newClient(t, srv)
	p := nsPath("default", "configmaps")
	for i := 0; i < 25; i++ {
		c.createCM("default", "cm-"+itoa(uint64(100+i)), nil, map[string]string{"v": "1"})
	}
	first := c.mustCode(c.get(p+"?limit=10"), 200)
	listRV := first.str("metadata", "resourceVersion")
	if first.str("metadata", "remainingItemCount") != "15" || first.str("metadata", "continue") == "" || len(first.obj["items"].([]any)) != 10 {
		t.Fatalf("first page: %s", first.str("metadata"))
	}
	// Changes after the first page are not seen by the following pages.
	c.mustCode(c.do("DELETE", p+"/cm-115", "", nil), 200)
	c.mustCode(c.do("PATCH", p+"/cm-116", "application/merge-patch+json", `{"data":{"v":"2"}}`), 200)
	c.createCM("default", "cm-999", nil, nil)
	second := c.mustCode(c.get(p+"?limit=10&continue="+first.str("metadata", "continue")), 200)
	items := second.obj["items"].([]any)
	if second.str("metadata", "resourceVersion") != listRV || len(items) != 10 {
		t.Fatalf("second page: %s", second.str("metadata"))
	}
	names := []string{}
	for _, it := range items {
		m := it.(map[string]any)
		names = append(names, m["metadata"].(map[string]any)["name"].(string))
		if m["metadata"].(map[string]any)["name"] == "cm-116" && m["data"].(map[string]any)["v"] != "1" {
			t.Fatalf("page 2 shows a change made after page 1")
		}
	}
	if names[0] != "cm-110" || names[5] != "cm-115" {
		t.Fatalf("page 2 names %v", names)
	}
	third := c.mustCode(c.get(p+"?limit=10&continue="+second.str("metadata", "continue")), 200)
	if len(third.obj["items"].([]any)) != 5 || third.str("metadata", "continue") != "" {
		t.Fatalf("third page: %s", third.str("metadata"))
	}
	// After compaction the token expires with the real server's message and
	// an inconsistent-continue token that still works.
	srv.store.compact(nil)
	expired := c.mustCode(c.get(p+"?limit=10&continue="+second.str("metadata", "continue")), 410)
	if expired.str("reason") != "Expired" || expired.str("message") != msgInconsistentCont || expired.str("metadata", "continue") == "" {
		t.Fatalf("expired continue: %s", expired.body)
	}
	rest := c.mustCode(c.get(p+"?limit=10&continue="+expired.str("metadata", "continue")), 200)
	if n := len(rest.obj["items"].([]any)); n != 6 { // cm-120..124 + cm-999
		t.Fatalf("inconsistent continue: %d items", n)
	}
	c.mustCode(c.get(p+"?limit=10&resourceVersion=5&continue="+first.str("metadata", "continue")), 400)
	c.mustCode(c.get(p+"?continue=garbage"), 400)
}

func TestDeleteCollectionHonoursSelectors(t *testing.T) {
	srv := testServer(t, Options{})
	c := newClient(t, srv)
	p := nsPath("default", "configmaps")
	c.createCM("default", "a", map[string]string{"gone": "yes"}, nil)
	c.createCM("default", "b", map[string]string{"gone": "yes"}, nil)
	c.createCM("default", "c", nil, nil)
	r := c.mustCode(c.do("DELETE", p+"?labelSelector=gone%3Dyes", "", nil), 200)
	if r.str("kind") != "ConfigMapList" || len(r.obj["items"].([]any)) != 2 {
		t.Fatalf("%s", r.body)
	}
	l := c.mustCode(c.get(p), 200)
	if items := l.obj["items"].([]any); len(items) != 1 || items[0].(map[string]any)["metadata"].(map[string]any)["name"] != "c" {
		t.Fatalf("%s", l.body)
	}
}

func TestManagedFieldsRecordTheWriters(t *testing.T) {
	srv := testServer(t, Options{})
	c := newClient(t, srv)
	p := nsPath("default", "configmaps")
	c.ua = "tester/1.0 (linux)"
	a := c.createCM("default", "a", map[string]string{"l": "1"}, map[string]string{"k": "v"})
	mf := a.obj["metadata"].(map[string]any)["managedFields"].([]any)
	e := mf[0].(map[string]any)
	fv := e["fieldsV1"].(map[string]any)
	if len(mf) != 1 || e["manager"] != "tester" || e["operation"] != "Update" || e["apiVersion"] != "v1" || e["fieldsType"] != "FieldsV1" ||
		fv["f:data"].(map[string]any)["f:k"] == nil || fv["f:metadata"].(map[string]any)["f:labels"].(map[string]any)["f:l"] == nil {
		t.Fatalf("managedFields %v", mf)
	}
	// As the real server writes them: the maps themselves are members ("."), metadata is not.
	if b, _ := json.Marshal(fv); string(b) != `{"f:data":{".":{},"f:k":{}},"f:metadata":{"f:labels":{".":{},"f:l":{}}}}` {
		t.Fatalf("fieldsV1 %s", b)
	}
	// A no-op update (managedFields omitted) writes nothing.
	body := cm("a", map[string]string{"l": "1"}, map[string]string{"k": "v"})
	if r := c.mustCode(c.do("PUT", p+"/a", "", body), 200); r.str("metadata", "resourceVersion") != a.str("metadata", "resourceVersion") {
		t.Fatalf("no-op update wrote: %s", r.body)
	}
	r := c.mustCode(c.do("PATCH", p+"/a?fieldManager=patcher", "application/merge-patch+json", `{"data":{"x":"y"}}`), 200)
	mf = r.obj["metadata"].(map[string]any)["managedFields"].([]any)
	if len(mf) != 2 || mf[1].(map[string]any)["manager"] != "patcher" {
		t.Fatalf("managedFields after patch %v", mf)
	}
	off := testServer(t, Options{DisableManagedFields: true})
	oc := newClient(t, off)
	if b := oc.createCM("default", "a", nil, nil); strings.Contains(string(b.body), "managedFields") {
		t.Fatalf("%s", b.body)
	}
}
