package server

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// clientsetFor is a client-go clientset for srv; contentType "" is
// client-go's default for typed clients (protobuf).
func clientsetFor(t *testing.T, srv *Server, contentType string) *kubernetes.Clientset {
	t.Helper()
	cfg := &rest.Config{Host: srv.URL(), BearerToken: srv.Token(), TLSClientConfig: rest.TLSClientConfig{CAData: srv.CAPEM()},
		ContentConfig: rest.ContentConfig{ContentType: contentType}, Timeout: 20 * time.Second, UserAgent: "auth-test/1.0"}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func tokenReview(t *testing.T, cs *kubernetes.Clientset, token string, auds ...string) authenticationv1.TokenReviewStatus {
	t.Helper()
	tr, err := cs.AuthenticationV1().TokenReviews().Create(context.Background(),
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: auds}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenReview %q: %v", token, err)
	}
	if tr.Spec.Token != token || !reflect.DeepEqual(tr.Spec.Audiences, auds) {
		t.Fatalf("spec not echoed: %+v", tr.Spec)
	}
	return tr.Status
}

var (
	alice = TokenSpec{Token: "tok-alice", User: TokenUser{Username: "alice", UID: "uid-alice", Groups: []string{"dev"},
		Extra: map[string][]string{"scopes": {"a", "b"}}}}
	bound   = TokenSpec{Token: "tok-bound", User: TokenUser{Username: "system:serviceaccount:ns:ctrl", Groups: []string{"system:serviceaccounts", "system:authenticated"}}, Audiences: []string{"informerd", "other"}}
	expired = TokenSpec{Token: "tok-expired", User: TokenUser{Username: "old"}, Audiences: []string{"informerd"}, Expired: true}
)

func TestTokenReview(t *testing.T) {
	srv := testServer(t, Options{TLS: true, Tokens: []TokenSpec{alice, bound}})
	c := newClient(t, srv)
	c.mustCode(c.do("POST", "/_fake/tokens", "", expired), 200)
	for _, ct := range []string{"", "application/json"} {
		t.Run("content type "+ct, func(t *testing.T) {
			cs := clientsetFor(t, srv, ct)
			tests := []struct {
				name  string
				token string
				auds  []string
				want  authenticationv1.TokenReviewStatus
			}{
				{"static token, API audience", "tok-alice", nil, authenticationv1.TokenReviewStatus{Authenticated: true,
					User: authenticationv1.UserInfo{Username: "alice", UID: "uid-alice", Groups: []string{"dev", "system:authenticated"},
						Extra: map[string]authenticationv1.ExtraValue{"scopes": {"a", "b"}}}, Audiences: []string{APIAudience}}},
				{"static token, API audience named", "tok-alice", []string{"x", APIAudience}, authenticationv1.TokenReviewStatus{Authenticated: true,
					User: authenticationv1.UserInfo{Username: "alice", UID: "uid-alice", Groups: []string{"dev", "system:authenticated"},
						Extra: map[string]authenticationv1.ExtraValue{"scopes": {"a", "b"}}}, Audiences: []string{APIAudience}}},
				{"static token, other audience", "tok-alice", []string{"informerd"}, authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}},
				{"unknown token", "nope", nil, authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}},
				{"unknown token with audiences", "nope", []string{"informerd"}, authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}},
				{"bound token, intersecting audiences", "tok-bound", []string{"informerd", "third"}, authenticationv1.TokenReviewStatus{Authenticated: true,
					User:      authenticationv1.UserInfo{Username: "system:serviceaccount:ns:ctrl", Groups: []string{"system:serviceaccounts", "system:authenticated"}},
					Audiences: []string{"informerd"}}},
				{"bound token, other audiences", "tok-bound", []string{"x", "y"}, authenticationv1.TokenReviewStatus{
					Error: `[invalid bearer token, token audiences ["informerd" "other"] is invalid for the target audiences ["x" "y"]]`}},
				{"bound token, API audience", "tok-bound", nil, authenticationv1.TokenReviewStatus{
					Error: `[invalid bearer token, token audiences ["informerd" "other"] is invalid for the target audiences ["https://kubernetes.default.svc.cluster.local"]]`}},
				{"expired", "tok-expired", []string{"informerd"}, authenticationv1.TokenReviewStatus{Error: "[invalid bearer token, service account token has expired]"}},
				{"expired, other audience", "tok-expired", []string{"x"}, authenticationv1.TokenReviewStatus{
					Error: `[invalid bearer token, token audiences ["informerd"] is invalid for the target audiences ["x"]]`}},
			}
			for _, tc := range tests {
				got := tokenReview(t, cs, tc.token, tc.auds...)
				if !reflect.DeepEqual(got, tc.want) {
					t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
				}
			}
		})
	}

	cs := clientsetFor(t, srv, "")
	// Replace, then delete.
	c.mustCode(c.do("POST", "/_fake/tokens", "", TokenSpec{Token: "tok-alice", User: TokenUser{Username: "alice2"}}), 200)
	if got := tokenReview(t, cs, "tok-alice"); !got.Authenticated || got.User.Username != "alice2" || !reflect.DeepEqual(got.User.Groups, []string{"system:authenticated"}) {
		t.Fatalf("replaced token: %+v", got)
	}
	r := c.mustCode(c.get("/_fake/tokens"), 200)
	if !strings.Contains(string(r.body), `"token":"tok-alice","user":{"username":"alice2"}`) || !strings.Contains(string(r.body), `"tok-expired"`) {
		t.Fatalf("GET /_fake/tokens: %s", r.body)
	}
	c.mustCode(c.do("DELETE", "/_fake/tokens/tok-alice", "", nil), 200)
	c.mustCode(c.do("DELETE", "/_fake/tokens/tok-alice", "", nil), 404)
	if got := tokenReview(t, cs, "tok-alice"); got.Authenticated || got.Error != "invalid bearer token" {
		t.Fatalf("deleted token: %+v", got)
	}
	// A token with "/" in it is deleted by the rest of the path.
	c.mustCode(c.do("POST", "/_fake/tokens", "", TokenSpec{Token: "a/b", User: TokenUser{Username: "slash"}}), 200)
	c.mustCode(c.do("DELETE", "/_fake/tokens/a/b", "", nil), 200)
	// Bad control bodies.
	for _, body := range []string{`{"token":"","user":{"username":"x"}}`, `{"token":"t","user":{}}`, `{"token":"t","user":{"username":"x"},"bogus":1}`, `{`} {
		c.mustCode(c.do("POST", "/_fake/tokens", "", body), 400)
	}
	// The API token of the fake itself is not a reviewable token.
	if got := tokenReview(t, cs, srv.Token()); got.Authenticated {
		t.Fatalf("the server's own token: %+v", got)
	}
	if st := srv.Stats(); st.TokenReviews != 2*10+3 || st.SubjectAccessReviews != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

// TestTokenReviewWire checks the raw response and the real server's errors
// for bodies that do not decode or validate.
func TestTokenReviewWire(t *testing.T) {
	srv := testServer(t, Options{TLS: true, Tokens: []TokenSpec{alice}})
	c := newClient(t, srv)
	r := c.mustCode(c.do("POST", tokenReviewPath, "", `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","metadata":{"name":"x"},"spec":{"token":"nope","audiences":["a"]}}`), 201)
	if r.str("kind") != "TokenReview" || r.str("apiVersion") != "authentication.k8s.io/v1" || r.str("metadata", "name") != "x" ||
		!strings.Contains(string(r.body), `"status":{"user":{},"error":"invalid bearer token"}`) ||
		!strings.Contains(string(r.body), `"manager":"server-test","operation":"Update","apiVersion":"authentication.k8s.io/v1"`) ||
		!strings.Contains(string(r.body), `"fieldsV1":{"f:spec":{"f:audiences":{},"f:token":{}}}`) ||
		strings.Contains(string(r.body), "creationTimestamp") {
		t.Fatalf("response: %s", r.body)
	}
	// No kind or apiVersion is fine, as on the real server.
	r = c.mustCode(c.do("POST", tokenReviewPath, "", `{"spec":{"token":"tok-alice"}}`), 201)
	if r.str("status", "authenticated") != "true" || r.str("kind") != "TokenReview" {
		t.Fatalf("response: %s", r.body)
	}
	for _, tc := range []struct {
		name, method, path, contentType, body string
		code                                  int
		message                               string
	}{
		{"truncated JSON", "POST", tokenReviewPath, "", `{"spec":{"token":"x"}`, 400, "the object provided is unrecognized (must be of type TokenReview): couldn't get version/kind; json parse error: "},
		{"not JSON", "POST", tokenReviewPath, "", `x`, 400, "the object provided is unrecognized (must be of type TokenReview)"},
		{"wrong kind", "POST", tokenReviewPath, "", `{"apiVersion":"v1","kind":"ConfigMap","spec":{"token":"x"}}`, 400, `ConfigMap in version "v1" cannot be handled as a TokenReview`},
		{"wrong type", "POST", tokenReviewPath, "", `{"spec":{"token":5}}`, 400, `TokenReview in version "v1" cannot be handled as a TokenReview: json: cannot unmarshal number`},
		{"no token", "POST", tokenReviewPath, "", `{"spec":{}}`, 400, "token is required for TokenReview in authentication"},
		{"YAML", "POST", tokenReviewPath, "text/plain", `spec: {}`, 415, "the body of the request was in an unknown format"},
		{"GET", "GET", tokenReviewPath, "", "", 405, "the server does not allow this method on the requested resource"},
		{"namespaced", "POST", "/apis/authentication.k8s.io/v1/namespaces/default/tokenreviews", "", `{"spec":{"token":"x"}}`, 404, "the server could not find the requested resource"},
	} {
		var body any
		if tc.body != "" {
			body = tc.body
		}
		r := c.do(tc.method, tc.path, tc.contentType, body)
		if r.code != tc.code || r.str("kind") != "Status" || !strings.HasPrefix(r.str("message"), tc.message) {
			t.Errorf("%s: %d %s", tc.name, r.code, r.body)
		}
	}
	// Reviews need the fake's own bearer token like every API request.
	c.token = "tok-alice"
	c.mustCode(c.do("POST", tokenReviewPath, "", `{"spec":{"token":"tok-alice"}}`), 401)
}

func sar(t *testing.T, cs *kubernetes.Clientset, spec authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
	t.Helper()
	r, err := cs.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SubjectAccessReview %+v: %v", spec, err)
	}
	if !reflect.DeepEqual(r.Spec, spec) {
		t.Fatalf("spec not echoed: %+v", r.Spec)
	}
	return r.Status
}

var testRules = []AuthzRule{
	// 0: alice lists and watches configmaps everywhere.
	{Users: []string{"alice"}, Verbs: []string{"list", "watch"}, APIGroups: []string{""}, Resources: []string{"configmaps"}},
	// 1: group dev: secrets in ns1 and ns2 only.
	{Groups: []string{"dev"}, Verbs: []string{"get", "list"}, APIGroups: []string{""}, Resources: []string{"secrets"}, Namespaces: []string{"ns1", "ns2"}},
	// 2: bob works one queue.
	{Users: []string{"bob"}, Verbs: []string{"get", "work", "update"}, APIGroups: []string{"informerd.io"}, Resources: []string{"queues"}, ResourceNames: []string{"my-queue"}},
	// 3: ops: everything in informerd.io, any namespace but not cluster scope.
	{Groups: []string{"ops"}, Verbs: []string{"*"}, APIGroups: []string{"informerd.io"}, Resources: []string{"*"}, Namespaces: []string{"*"}},
	// 4: carol: pods/status and every scale subresource, cluster-wide ("" namespace entry).
	{Users: []string{"carol"}, Verbs: []string{"update"}, APIGroups: []string{"*"}, Resources: []string{"pods/status", "*/scale"}, Namespaces: []string{""}},
	// 5: non-resource URLs for everyone authenticated.
	{Groups: []string{"system:authenticated"}, Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz", "/metrics/*"}},
	// 6: any user may create queues named "scratch".
	{Users: []string{"*"}, Verbs: []string{"create"}, APIGroups: []string{"informerd.io"}, Resources: []string{"queues"}, ResourceNames: []string{"scratch"}},
}

func TestSubjectAccessReview(t *testing.T) {
	srv := testServer(t, Options{TLS: true})
	c := newClient(t, srv)
	c.mustCode(c.do("PUT", "/_fake/authz/rules", "", AuthzRules{Rules: testRules}), 200)
	ra := func(ns, verb, group, resource, name string) *authorizationv1.ResourceAttributes {
		return &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Version: "v1", Resource: resource, Name: name}
	}
	allowed := func(rule int, subject string) authorizationv1.SubjectAccessReviewStatus {
		return authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: "RBAC: allowed by rule " + string(rune('0'+rule)) + " to " + subject}
	}
	no := authorizationv1.SubjectAccessReviewStatus{}
	for _, ct := range []string{"", "application/json"} {
		cs := clientsetFor(t, srv, ct)
		tests := []struct {
			name string
			spec authorizationv1.SubjectAccessReviewSpec
			want authorizationv1.SubjectAccessReviewStatus
		}{
			{"masters", authorizationv1.SubjectAccessReviewSpec{User: "root", Groups: []string{"x", "system:masters"}, ResourceAttributes: ra("", "delete", "", "nodes", "n")}, authorizationv1.SubjectAccessReviewStatus{Allowed: true}},
			{"masters, non-resource", authorizationv1.SubjectAccessReviewSpec{Groups: []string{"system:masters"}, NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/x", Verb: "post"}}, authorizationv1.SubjectAccessReviewStatus{Allowed: true}},
			{"no rule", authorizationv1.SubjectAccessReviewSpec{User: "mallory", ResourceAttributes: ra("default", "list", "", "configmaps", "")}, no},
			{"cluster-wide rule, namespace", authorizationv1.SubjectAccessReviewSpec{User: "alice", UID: "u", Extra: map[string]authorizationv1.ExtraValue{"k": {"v"}}, ResourceAttributes: ra("a", "list", "", "configmaps", "")}, allowed(0, `User "alice"`)},
			{"cluster-wide rule, all namespaces", authorizationv1.SubjectAccessReviewSpec{User: "alice", ResourceAttributes: ra("", "watch", "", "configmaps", "")}, allowed(0, `User "alice"`)},
			{"cluster-wide rule, other verb", authorizationv1.SubjectAccessReviewSpec{User: "alice", ResourceAttributes: ra("a", "get", "", "configmaps", "")}, no},
			{"cluster-wide rule, other group", authorizationv1.SubjectAccessReviewSpec{User: "alice", ResourceAttributes: ra("a", "list", "example.com", "configmaps", "")}, no},
			{"namespaced rule, listed namespace", authorizationv1.SubjectAccessReviewSpec{User: "dan", Groups: []string{"x", "dev"}, ResourceAttributes: ra("ns2", "get", "", "secrets", "s")}, allowed(1, `Group "dev"`)},
			{"namespaced rule, other namespace", authorizationv1.SubjectAccessReviewSpec{User: "dan", Groups: []string{"dev"}, ResourceAttributes: ra("ns3", "get", "", "secrets", "s")}, no},
			{"namespaced rule, cluster-wide request", authorizationv1.SubjectAccessReviewSpec{User: "dan", Groups: []string{"dev"}, ResourceAttributes: ra("", "list", "", "secrets", "")}, no},
			{"resource name", authorizationv1.SubjectAccessReviewSpec{User: "bob", ResourceAttributes: ra("", "work", "informerd.io", "queues", "my-queue")}, allowed(2, `User "bob"`)},
			{"other resource name", authorizationv1.SubjectAccessReviewSpec{User: "bob", ResourceAttributes: ra("", "work", "informerd.io", "queues", "your-queue")}, no},
			{"no resource name", authorizationv1.SubjectAccessReviewSpec{User: "bob", ResourceAttributes: ra("", "get", "informerd.io", "queues", "")}, no},
			{"star namespaces, namespace", authorizationv1.SubjectAccessReviewSpec{User: "eve", Groups: []string{"ops"}, ResourceAttributes: ra("z", "admin", "informerd.io", "daemon", "")}, allowed(3, `Group "ops"`)},
			{"star namespaces, cluster scope", authorizationv1.SubjectAccessReviewSpec{User: "eve", Groups: []string{"ops"}, ResourceAttributes: ra("", "admin", "informerd.io", "daemon", "")}, no},
			{"subresource", authorizationv1.SubjectAccessReviewSpec{User: "carol", ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "a", Verb: "update", Resource: "pods", Subresource: "status"}}, allowed(4, `User "carol"`)},
			{"main resource of a subresource rule", authorizationv1.SubjectAccessReviewSpec{User: "carol", ResourceAttributes: ra("a", "update", "", "pods", "p")}, no},
			{"star subresource", authorizationv1.SubjectAccessReviewSpec{User: "carol", ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "update", Group: "apps", Resource: "deployments", Subresource: "scale"}}, allowed(4, `User "carol"`)},
			{"non-resource", authorizationv1.SubjectAccessReviewSpec{User: "x", Groups: []string{"system:authenticated"}, NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/healthz", Verb: "get"}}, allowed(5, `Group "system:authenticated"`)},
			{"non-resource prefix", authorizationv1.SubjectAccessReviewSpec{User: "x", Groups: []string{"system:authenticated"}, NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics/cadvisor", Verb: "get"}}, allowed(5, `Group "system:authenticated"`)},
			{"non-resource other path", authorizationv1.SubjectAccessReviewSpec{User: "x", Groups: []string{"system:authenticated"}, NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}}, no},
			{"non-resource rule vs resource request", authorizationv1.SubjectAccessReviewSpec{User: "x", Groups: []string{"system:authenticated"}, ResourceAttributes: ra("", "get", "", "healthz", "")}, no},
			{"star user", authorizationv1.SubjectAccessReviewSpec{User: "anyone", ResourceAttributes: ra("", "create", "informerd.io", "queues", "scratch")}, allowed(6, `User "anyone"`)},
			{"star user needs a user", authorizationv1.SubjectAccessReviewSpec{Groups: []string{"g"}, ResourceAttributes: ra("", "create", "informerd.io", "queues", "scratch")}, no},
		}
		for _, tc := range tests {
			if got := sar(t, cs, tc.spec); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%s (%q):\n got %+v\nwant %+v", tc.name, ct, got, tc.want)
			}
		}

		// Validation: the real server's 422s.
		_, err := cs.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "x"}}, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || err.Error() != `.authorization.k8s.io "" is invalid: spec: Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified` {
			t.Errorf("no attributes: %v", err)
		}
	}
	for _, tc := range []struct {
		name, body string
		code       int
		message    string
	}{
		{"both attributes", `{"spec":{"user":"x","resourceAttributes":{"verb":"get","resource":"pods"},"nonResourceAttributes":{"verb":"get","path":"/x"}}}`, 422,
			`.authorization.k8s.io "" is invalid: spec: Invalid value: {"Path":"/x","Verb":"get"}: exactly one of nonResourceAttributes or resourceAttributes must be specified`},
		{"no subject", `{"spec":{"resourceAttributes":{"verb":"get","resource":"pods"}}}`, 422,
			`.authorization.k8s.io "" is invalid: spec.user: Invalid value: "": at least one of user or group must be specified`},
		{"nothing", `{"spec":{}}`, 422, `.authorization.k8s.io "" is invalid: [spec: Invalid value: null: exactly one`},
		{"wrong type", `{"kind":"SubjectAccessReview","apiVersion":"authorization.k8s.io/v1","spec":{"user":5}}`, 400,
			`SubjectAccessReview in version "v1" cannot be handled as a SubjectAccessReview: json: cannot unmarshal number`},
		{"not JSON", `{"spec":`, 400, `the object provided is unrecognized (must be of type SubjectAccessReview)`},
		{"wrong group version", `{"kind":"SubjectAccessReview","apiVersion":"authentication.k8s.io/v1","spec":{"user":"x"}}`, 400, `SubjectAccessReview in version "v1" cannot be handled as a SubjectAccessReview: no kind "SubjectAccessReview" is registered for version "authentication.k8s.io/v1"`},
	} {
		r := c.do("POST", sarPath, "", tc.body)
		if r.code != tc.code || !strings.HasPrefix(r.str("message"), tc.message) {
			t.Errorf("%s: %d %s", tc.name, r.code, r.body)
		}
	}
	r := c.mustCode(c.do("POST", sarPath, "", `{"spec":{"user":"alice","groups":["g"],"extra":{"k":["v"]},"resourceAttributes":{"verb":"list","resource":"configmaps"}}}`), 201)
	if !strings.Contains(string(r.body), `"status":{"allowed":true,"reason":"RBAC: allowed by rule 0 to User \"alice\""}`) ||
		!strings.Contains(string(r.body), `"fieldsV1":{"f:spec":{"f:extra":{".":{},"f:k":{}},"f:groups":{},"f:resourceAttributes":{".":{},"f:resource":{},"f:verb":{}},"f:user":{}}}`) {
		t.Fatalf("response: %s", r.body)
	}

	// The control API: GET returns the rules, PUT replaces them, bad rules are refused.
	r = c.mustCode(c.get("/_fake/authz/rules"), 200)
	if !strings.HasPrefix(string(r.body), `{"rules":[{"users":["alice"],"verbs":["list","watch"],"apiGroups":[""],"resources":["configmaps"]}`) {
		t.Fatalf("GET rules: %s", r.body)
	}
	for _, body := range []string{
		`{"rules":[{"users":["a"],"verbs":["get"],"resources":["pods"]}]}`,    // no apiGroups
		`{"rules":[{"verbs":["get"],"apiGroups":[""],"resources":["pods"]}]}`, // no subject
		`{"rules":[{"users":["a"],"apiGroups":[""],"resources":["pods"]}]}`,   // no verbs
		`{"rules":[{"users":["a"],"verbs":["get"]}]}`,                         // nothing to match
		`{"rules":[{"users":["a"],"verbs":["get"],"nonResourceURLs":["/x"],"namespaces":["a"]}]}`,
		`{"rules":[{"users":["a"],"verbs":["get"],"apiGroups":[""],"resources":["pods"],"resource":"x"}]}`, // unknown field
	} {
		c.mustCode(c.do("PUT", "/_fake/authz/rules", "", body), 400)
	}
	c.mustCode(c.do("PUT", "/_fake/authz/rules", "", `{"rules":[]}`), 200)
	cs := clientsetFor(t, srv, "")
	if got := sar(t, cs, authorizationv1.SubjectAccessReviewSpec{User: "alice", ResourceAttributes: ra("a", "list", "", "configmaps", "")}); got.Allowed {
		t.Fatalf("rules cleared but %+v", got)
	}
	if r := c.mustCode(c.get("/_fake/authz/rules"), 200); string(r.body) != `{"rules":[]}` {
		t.Fatalf("GET rules: %s", r.body)
	}
	if st := srv.Stats(); st.SubjectAccessReviews != 2*24+2+6+1+1 || st.TokenReviews != 0 {
		t.Fatalf("stats: tokenReviews %d subjectAccessReviews %d", st.TokenReviews, st.SubjectAccessReviews)
	}
}

func TestReviewFaults(t *testing.T) {
	srv := testServer(t, Options{TLS: true, Tokens: []TokenSpec{alice}, AuthzRules: testRules[:1]})
	c := newClient(t, srv)
	trBody := `{"spec":{"token":"tok-alice"}}`
	sarBody := `{"spec":{"user":"alice","resourceAttributes":{"verb":"list","resource":"configmaps"}}}`

	// A fault for every resource leaves the reviews alone.
	c.fault(map[string]any{"type": "internal-error", "count": -1})
	c.mustCode(c.do("POST", tokenReviewPath, "", trBody), 201)
	c.mustCode(c.do("POST", sarPath, "", sarBody), 201)
	c.mustCode(c.get("/api/v1/namespaces"), 500)
	c.mustCode(c.do("DELETE", "/_fake/faults", "", nil), 200)

	for _, res := range []string{"tokenreviews", "authentication.k8s.io/v1/tokenreviews", "tokenreviews.authentication.k8s.io"} {
		c.fault(map[string]any{"type": "internal-error", "resource": res, "message": "webhook down"})
		c.mustCode(c.do("POST", sarPath, "", sarBody), 201)
		if r := c.mustCode(c.do("POST", tokenReviewPath, "", trBody), 500); r.str("message") != "Internal error occurred: webhook down" {
			t.Fatalf("%s", r.body)
		}
		c.mustCode(c.do("POST", tokenReviewPath, "", trBody), 201) // count 1
	}
	c.fault(map[string]any{"type": "too-many-requests", "resource": "subjectaccessreviews", "verb": "create", "count": 2, "retryAfterSeconds": 2})
	for i := 0; i < 2; i++ {
		if r := c.mustCode(c.do("POST", sarPath, "", sarBody), 429); r.header.Get("Retry-After") != "2" {
			t.Fatalf("%v", r.header)
		}
	}
	c.mustCode(c.do("POST", sarPath, "", sarBody), 201)
	// Another verb or a namespace does not match a review.
	c.fault(map[string]any{"type": "internal-error", "resource": "subjectaccessreviews", "verb": "get"})
	c.fault(map[string]any{"type": "internal-error", "resource": "subjectaccessreviews", "namespace": "default"})
	c.mustCode(c.do("POST", sarPath, "", sarBody), 201)
	c.mustCode(c.do("DELETE", "/_fake/faults", "", nil), 200)
	// Scoped by user agent.
	c.fault(map[string]any{"type": "internal-error", "resource": "tokenreviews", "userAgent": "informerd", "count": -1})
	c.mustCode(c.do("POST", tokenReviewPath, "", trBody), 201)
	c.ua = "informerd/0.1"
	c.mustCode(c.do("POST", tokenReviewPath, "", trBody), 500)
	c.ua = "server-test"
	c.mustCode(c.do("DELETE", "/_fake/faults", "", nil), 200)

	// Delays: stall for a while, then the answer.
	c.fault(map[string]any{"type": "stall", "resource": "subjectaccessreviews", "durationMs": 300})
	start := time.Now()
	c.mustCode(c.do("POST", sarPath, "", sarBody), 201)
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("stall took %v", d)
	}
	// A stall without duration hangs until the client gives up.
	c.fault(map[string]any{"type": "stall", "resource": "tokenreviews"})
	cs := clientsetFor(t, srv, "")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := cs.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: "tok-alice"}}, metav1.CreateOptions{})
	cancel()
	if err == nil || !strings.Contains(err.Error(), "context deadline exceeded") {
		t.Fatalf("hung review: %v", err)
	}
	// Body faults: a truncated answer fails to decode in client-go.
	c.fault(map[string]any{"type": "truncate", "resource": "tokenreviews"})
	if _, err := cs.AuthenticationV1().TokenReviews().Create(context.Background(), &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: "tok-alice"}}, metav1.CreateOptions{}); err == nil {
		t.Fatal("truncated review decoded")
	}
	// Faults on open watches or the store make no sense for reviews.
	for _, typ := range []string{"close-watches", "bookmark", "compact"} {
		c.mustCode(c.do("POST", "/_fake/faults", "", map[string]any{"type": typ, "resource": "tokenreviews"}), 400)
	}
	// Refusing connections applies to every endpoint.
	c.fault(map[string]any{"type": "refuse", "durationMs": 2000})
	review := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "alice",
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Resource: "configmaps"}}}, metav1.CreateOptions{})
		return err
	}
	// The fault resets the open connection first (a reset, or a success just before it lands),
	// then refuses new ones.
	var err2 error
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err2 = review(); err2 != nil && strings.Contains(err2.Error(), "connection refused") {
			break
		}
	}
	if err2 == nil || !strings.Contains(err2.Error(), "connection refused") {
		t.Fatalf("review while refusing: %v", err2)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err2 = review(); err2 == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("review after refusing: %v", err2)
		}
	}
	if st := srv.Stats(); st.FaultsHit < 10 {
		t.Fatalf("faultsHit %d", st.FaultsHit)
	}
}
