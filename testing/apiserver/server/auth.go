package server

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	sigsjson "sigs.k8s.io/json"
)

// TokenReview (authentication.k8s.io/v1) and SubjectAccessReview
// (authorization.k8s.io/v1), answered from tokens and RBAC-like rules set on
// the control endpoint (/_fake/tokens, /_fake/authz/rules) or in Options.
//
// Tokens behave like the real server's: a token registered with audiences is
// like a bound service-account token (valid only for a review whose target
// audiences intersect them); one registered without audiences is like a
// static token, valid for the API server's own audiences (APIAudience) only.
// A review without spec.audiences targets the API server's audiences, as the
// real TokenReview does. Error strings are the real authenticators'.
//
// Authorization: system:masters is always allowed (reason "", as the real
// privileged-group authorizer answers); otherwise the first matching rule
// allows ("RBAC: allowed by rule N to User|Group "x""); no match is RBAC's
// no opinion: allowed false, reason "".

// APIAudience is the fake API server's own audience (the real server's
// default --api-audiences is its service-account issuer).
const APIAudience = "https://kubernetes.default.svc.cluster.local"

const (
	tokenReviewPath = "/apis/authentication.k8s.io/v1/tokenreviews"
	sarPath         = "/apis/authorization.k8s.io/v1/subjectaccessreviews"

	// Fault-matching names of the review endpoints.
	reviewTokenReviews = "tokenreviews.authentication.k8s.io"
	reviewSARs         = "subjectaccessreviews.authorization.k8s.io"

	errInvalidBearerToken = "invalid bearer token"
)

// reviewResource resolves a fault's resource name to a review endpoint:
// "tokenreviews", "authentication.k8s.io/v1/tokenreviews",
// "tokenreviews.authentication.k8s.io" (and the same for
// subjectaccessreviews); "" when it names neither.
func reviewResource(name string) string {
	switch name {
	case "tokenreviews", "authentication.k8s.io/v1/tokenreviews", reviewTokenReviews:
		return reviewTokenReviews
	case "subjectaccessreviews", "authorization.k8s.io/v1/subjectaccessreviews", reviewSARs:
		return reviewSARs
	}
	return ""
}

// TokenUser is the user a registered token authenticates as.
type TokenUser struct {
	Username string              `json:"username"`
	UID      string              `json:"uid,omitempty"`
	Groups   []string            `json:"groups,omitempty"`
	Extra    map[string][]string `json:"extra,omitempty"`
}

// TokenSpec is the body of POST /_fake/tokens and of --auth-token.
type TokenSpec struct {
	Token string    `json:"token"`
	User  TokenUser `json:"user"`
	// Audiences the token is bound to; empty: the API server's own audience
	// (like a static token).
	Audiences []string `json:"audiences,omitempty"`
	// Expired tokens are rejected ("service account token has expired").
	Expired bool `json:"expired,omitempty"`
}

func (t *TokenSpec) validate() error {
	if t.Token == "" {
		return fmt.Errorf("token is required")
	}
	if t.User.Username == "" {
		return fmt.Errorf("user.username is required")
	}
	return nil
}

// AuthzRule is one allow rule of the SubjectAccessReview authorizer. It
// matches a review when the subject matches (spec.user in Users, or one of
// spec.groups in Groups; "*" matches anyone) and the attributes match:
//
//   - resource requests: Verbs, APIGroups ("" is the core group), Resources
//     ("res", "res/sub", "*/sub", "*"), ResourceNames (empty: any name; a
//     request without a name only matches a rule without ResourceNames) and
//     Namespaces: empty, or containing "", is a cluster-wide rule that
//     matches every namespace and cluster-scoped requests (namespace "");
//     otherwise the request's namespace must be listed ("*": any namespace,
//     but not cluster-scoped requests).
//   - non-resource requests: Verbs and NonResourceURLs ("/path", "/prefix/*",
//     "*").
//
// "*" in Verbs, APIGroups, Resources and ResourceNames matches anything.
type AuthzRule struct {
	Users           []string `json:"users,omitempty"`
	Groups          []string `json:"groups,omitempty"`
	Verbs           []string `json:"verbs"`
	APIGroups       []string `json:"apiGroups,omitempty"`
	Resources       []string `json:"resources,omitempty"`
	Namespaces      []string `json:"namespaces,omitempty"`
	ResourceNames   []string `json:"resourceNames,omitempty"`
	NonResourceURLs []string `json:"nonResourceURLs,omitempty"`
}

func (r *AuthzRule) validate() error {
	if len(r.Users) == 0 && len(r.Groups) == 0 {
		return fmt.Errorf("a rule needs users or groups")
	}
	if len(r.Verbs) == 0 {
		return fmt.Errorf("a rule needs verbs")
	}
	switch {
	case len(r.Resources) > 0 && len(r.NonResourceURLs) > 0:
		return fmt.Errorf("a rule has either resources or nonResourceURLs, not both")
	case len(r.Resources) > 0:
		if len(r.APIGroups) == 0 {
			return fmt.Errorf(`a resource rule needs apiGroups ([""] is the core group, ["*"] any)`)
		}
	case len(r.NonResourceURLs) > 0:
		if len(r.APIGroups) > 0 || len(r.Namespaces) > 0 || len(r.ResourceNames) > 0 {
			return fmt.Errorf("a nonResourceURLs rule takes no apiGroups, namespaces or resourceNames")
		}
	default:
		return fmt.Errorf("a rule needs resources or nonResourceURLs")
	}
	return nil
}

// AuthzRules is the body of PUT and GET /_fake/authz/rules.
type AuthzRules struct {
	Rules []AuthzRule `json:"rules"`
}

type authState struct {
	mu     sync.Mutex
	tokens map[string]TokenSpec // GUARDED_BY(mu)
	rules  []AuthzRule          // GUARDED_BY(mu)
}

// SetToken registers a token, or replaces the one with the same value.
func (s *Server) SetToken(t TokenSpec) error {
	if err := t.validate(); err != nil {
		return err
	}
	t.Audiences = slices.Clone(t.Audiences)
	s.auth.mu.Lock()
	defer s.auth.mu.Unlock()
	if s.auth.tokens == nil {
		s.auth.tokens = map[string]TokenSpec{}
	}
	s.auth.tokens[t.Token] = t
	return nil
}

// DeleteToken removes a registered token; false when there was none.
func (s *Server) DeleteToken(token string) bool {
	s.auth.mu.Lock()
	defer s.auth.mu.Unlock()
	_, ok := s.auth.tokens[token]
	delete(s.auth.tokens, token)
	return ok
}

// Tokens lists the registered tokens, sorted by value.
func (s *Server) Tokens() []TokenSpec {
	s.auth.mu.Lock()
	defer s.auth.mu.Unlock()
	out := make([]TokenSpec, 0, len(s.auth.tokens))
	for _, t := range s.auth.tokens {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Token < out[j].Token })
	return out
}

// SetAuthzRules replaces the whole rule set of the SubjectAccessReview
// authorizer.
func (s *Server) SetAuthzRules(rules []AuthzRule) error {
	for i := range rules {
		if err := rules[i].validate(); err != nil {
			return fmt.Errorf("rule %d: %w", i, err)
		}
	}
	s.auth.mu.Lock()
	defer s.auth.mu.Unlock()
	s.auth.rules = slices.Clone(rules)
	return nil
}

// AuthzRulesSnapshot returns the current rule set.
func (s *Server) AuthzRulesSnapshot() []AuthzRule {
	s.auth.mu.Lock()
	defer s.auth.mu.Unlock()
	return append([]AuthzRule{}, s.auth.rules...)
}

// serveReview answers the two review endpoints; false for other paths.
func (s *Server) serveReview(w http.ResponseWriter, req *http.Request) bool {
	var review string
	switch strings.TrimSuffix(req.URL.Path, "/") {
	case tokenReviewPath:
		review = reviewTokenReviews
	case sarPath:
		review = reviewSARs
	default:
		return false
	}
	if req.Method != http.MethodPost {
		writeError(w, req, errMethodNotAllowed(req.Method))
		return true
	}
	out, ok := negotiate(req.Header.Get("Accept"), restrictions{resource: true})
	if !ok {
		writeError(w, req, errNotAcceptable(msgNotAcceptable))
		return true
	}
	out.as = "" // reviews are answered whole
	if review == reviewTokenReviews {
		s.stats.tokenReviews.Add(1)
	} else {
		s.stats.subjectAccessReviews.Add(1)
	}
	fault := s.faults.takeReview(review, req.UserAgent())
	if fault != nil {
		s.stats.faultsHit.Add(1)
		if s.applyRequestFault(w, req, nil, fault) {
			return true
		}
	}
	var obj runtime.Object
	var aerr *apiError
	if review == reviewTokenReviews {
		var tr *authenticationv1.TokenReview
		tr, aerr = s.tokenReview(req)
		obj = tr
	} else {
		var sar *authorizationv1.SubjectAccessReview
		sar, aerr = s.subjectAccessReview(req)
		obj = sar
	}
	if aerr != nil {
		writeError(w, req, aerr)
		return true
	}
	body, aerr := s.reviewBody(req, obj)
	if aerr != nil {
		writeError(w, req, aerr)
		return true
	}
	s.respondJSONAs(w, req, out, obj.GetObjectKind().GroupVersionKind(), http.StatusCreated, body, fault)
	return true
}

// decodeReview decodes a JSON or protobuf request body into obj (a
// *TokenReview or *SubjectAccessReview), with the real server's errors.
func decodeReview(req *http.Request, obj runtime.Object, kind, apiVersion string) *apiError {
	if isProtobuf(req) {
		b, aerr := readBody(req)
		if aerr != nil {
			return aerr
		}
		got, _, err := protoSerializer.Decode(b, nil, obj)
		if err != nil {
			return errBadRequest(fmt.Sprintf("the object provided is unrecognized (must be of type %s): %v", kind, err))
		}
		if got != obj {
			return errBadRequest(fmt.Sprintf("the object provided is unrecognized (must be of type %s)", kind))
		}
		return nil
	}
	if ct := req.Header.Get("Content-Type"); ct != "" {
		mt, _, _ := mime.ParseMediaType(ct)
		if mt != "application/json" && mt != "*/*" {
			return &apiError{Code: 415, Reason: "UnsupportedMediaType", Message: fmt.Sprintf("the body of the request was in an unknown format (%s) - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf", ct)}
		}
	}
	b, aerr := readBody(req)
	if aerr != nil {
		return aerr
	}
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(b, &tm); err != nil {
		return errBadRequest(fmt.Sprintf("the object provided is unrecognized (must be of type %s): couldn't get version/kind; json parse error: %v", kind, err))
	}
	if (tm.Kind != "" && tm.Kind != kind) || (tm.APIVersion != "" && tm.APIVersion != apiVersion) {
		k, v := tm.Kind, tm.APIVersion
		if k == "" {
			k = kind
		}
		if v == "" {
			v = apiVersion
		}
		short := v[strings.LastIndex(v, "/")+1:]
		return errBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: no kind %q is registered for version %q in scheme \"pkg/runtime/scheme.go:111\"", k, short, kind, k, v))
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(b, obj); err != nil {
		short := apiVersion[strings.LastIndex(apiVersion, "/")+1:]
		return errBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: %v", kind, short, kind, err))
	}
	return nil
}

// reviewBody is the response object: the review as sent, with its status
// and the request's managedFields entry (the real server records one for
// reviews too), in the field order of the API types.
func (s *Server) reviewBody(req *http.Request, obj runtime.Object) ([]byte, *apiError) {
	var meta *metav1.ObjectMeta
	var spec any
	switch o := obj.(type) {
	case *authenticationv1.TokenReview:
		meta, spec = &o.ObjectMeta, o.Spec
	case *authorizationv1.SubjectAccessReview:
		meta, spec = &o.ObjectMeta, o.Spec
	default:
		return nil, errInternal(fmt.Sprintf("not a review: %T", obj))
	}
	meta.ManagedFields = nil
	if !s.opts.DisableManagedFields {
		b, err := json.Marshal(spec)
		if err != nil {
			return nil, errInternal(err.Error())
		}
		m, err := decodeJSON(b)
		if err != nil {
			return nil, errInternal(err.Error())
		}
		if len(m) > 0 {
			fields, err := json.Marshal(map[string]any{"f:spec": reviewFieldsV1(m)})
			if err != nil {
				return nil, errInternal(err.Error())
			}
			now := metav1.NewTime(time.Now().UTC().Truncate(time.Second))
			meta.ManagedFields = []metav1.ManagedFieldsEntry{{
				Manager:    managerOf(req.UserAgent(), req.URL.Query().Get("fieldManager")),
				Operation:  metav1.ManagedFieldsOperationUpdate,
				APIVersion: obj.GetObjectKind().GroupVersionKind().GroupVersion().String(),
				Time:       &now,
				FieldsType: "FieldsV1",
				FieldsV1:   &metav1.FieldsV1{Raw: fields},
			}}
		}
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, errInternal(err.Error())
	}
	return out, nil
}

// reviewFieldsV1 is the FieldsV1 set of a review's spec: nested objects
// (resourceAttributes, extra) carry the "." member, as the real server
// records them.
func reviewFieldsV1(spec map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range spec {
		if vm, ok := v.(map[string]any); ok {
			out["f:"+k] = mapFieldsV1(vm)
		} else {
			out["f:"+k] = map[string]any{}
		}
	}
	return out
}

// ---- TokenReview ----

func (s *Server) tokenReview(req *http.Request) (*authenticationv1.TokenReview, *apiError) {
	tr := &authenticationv1.TokenReview{}
	if aerr := decodeReview(req, tr, "TokenReview", "authentication.k8s.io/v1"); aerr != nil {
		return nil, aerr
	}
	tr.Kind, tr.APIVersion = "TokenReview", "authentication.k8s.io/v1"
	if tr.Spec.Token == "" {
		return nil, errBadRequest("token is required for TokenReview in authentication")
	}
	tr.Status = s.authenticate(tr.Spec.Token, tr.Spec.Audiences)
	return tr, nil
}

// authenticate is the real authenticator chain for a registered token:
// audience check first (bound tokens: the service-account JWT
// authenticator's error; static tokens: no error of their own), then expiry.
func (s *Server) authenticate(token string, target []string) authenticationv1.TokenReviewStatus {
	s.auth.mu.Lock()
	t, ok := s.auth.tokens[token]
	s.auth.mu.Unlock()
	if !ok {
		return authenticationv1.TokenReviewStatus{Error: errInvalidBearerToken}
	}
	if len(target) == 0 {
		target = []string{APIAudience}
	}
	tokenAuds := t.Audiences
	if len(tokenAuds) == 0 {
		tokenAuds = []string{APIAudience}
	}
	var auds []string
	for _, a := range target {
		if slices.Contains(tokenAuds, a) && !slices.Contains(auds, a) {
			auds = append(auds, a)
		}
	}
	if len(auds) == 0 {
		if len(t.Audiences) == 0 {
			return authenticationv1.TokenReviewStatus{Error: errInvalidBearerToken}
		}
		return authenticationv1.TokenReviewStatus{Error: fmt.Sprintf("[%s, token audiences %q is invalid for the target audiences %q]", errInvalidBearerToken, tokenAuds, target)}
	}
	if t.Expired {
		return authenticationv1.TokenReviewStatus{Error: "[" + errInvalidBearerToken + ", service account token has expired]"}
	}
	u := authenticationv1.UserInfo{Username: t.User.Username, UID: t.User.UID, Groups: slices.Clone(t.User.Groups)}
	// The real chain's AuthenticatedGroupAdder.
	if u.Username != "system:anonymous" && !slices.Contains(u.Groups, "system:authenticated") && !slices.Contains(u.Groups, "system:unauthenticated") {
		u.Groups = append(u.Groups, "system:authenticated")
	}
	if len(t.User.Extra) > 0 {
		u.Extra = map[string]authenticationv1.ExtraValue{}
		for k, v := range t.User.Extra {
			u.Extra[k] = slices.Clone(v)
		}
	}
	return authenticationv1.TokenReviewStatus{Authenticated: true, User: u, Audiences: auds}
}

// ---- SubjectAccessReview ----

func (s *Server) subjectAccessReview(req *http.Request) (*authorizationv1.SubjectAccessReview, *apiError) {
	sar := &authorizationv1.SubjectAccessReview{}
	if aerr := decodeReview(req, sar, "SubjectAccessReview", "authorization.k8s.io/v1"); aerr != nil {
		return nil, aerr
	}
	sar.Kind, sar.APIVersion = "SubjectAccessReview", "authorization.k8s.io/v1"
	spec := &sar.Spec
	// The real validation (ValidateSubjectAccessReviewSpec), in its order.
	var causes []statusCause
	if (spec.ResourceAttributes == nil) == (spec.NonResourceAttributes == nil) {
		v := "null"
		if spec.NonResourceAttributes != nil {
			b, _ := json.Marshal(struct{ Path, Verb string }{spec.NonResourceAttributes.Path, spec.NonResourceAttributes.Verb})
			v = string(b)
		}
		causes = append(causes, statusCause{Type: "FieldValueInvalid", Field: "spec",
			Message: "Invalid value: " + v + ": exactly one of nonResourceAttributes or resourceAttributes must be specified"})
	}
	if spec.User == "" && len(spec.Groups) == 0 {
		causes = append(causes, statusCause{Type: "FieldValueInvalid", Field: "spec.user",
			Message: `Invalid value: "": at least one of user or group must be specified`})
	}
	if len(causes) > 0 {
		return nil, errInvalid("", "authorization.k8s.io", "", causes...)
	}
	sar.Status = s.authorize(spec)
	return sar, nil
}

func (s *Server) authorize(spec *authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
	if slices.Contains(spec.Groups, "system:masters") {
		return authorizationv1.SubjectAccessReviewStatus{Allowed: true}
	}
	s.auth.mu.Lock()
	rules := s.auth.rules
	s.auth.mu.Unlock()
	for i := range rules {
		r := &rules[i]
		subject := r.subjectMatch(spec.User, spec.Groups)
		if subject == "" || !r.attributesMatch(spec) {
			continue
		}
		return authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: fmt.Sprintf("RBAC: allowed by rule %d to %s", i, subject)}
	}
	return authorizationv1.SubjectAccessReviewStatus{}
}

// subjectMatch names the matching subject (`User "u"`, `Group "g"`), or "".
func (r *AuthzRule) subjectMatch(user string, groups []string) string {
	for _, u := range r.Users {
		if user != "" && (u == "*" || u == user) {
			return fmt.Sprintf("User %q", user)
		}
	}
	for _, g := range r.Groups {
		for _, have := range groups {
			if g == "*" || g == have {
				return fmt.Sprintf("Group %q", have)
			}
		}
	}
	return ""
}

func matchesOrStar(list []string, v string) bool {
	for _, e := range list {
		if e == "*" || e == v {
			return true
		}
	}
	return false
}

func (r *AuthzRule) attributesMatch(spec *authorizationv1.SubjectAccessReviewSpec) bool {
	if nr := spec.NonResourceAttributes; nr != nil {
		if len(r.NonResourceURLs) == 0 || !matchesOrStar(r.Verbs, nr.Verb) {
			return false
		}
		for _, u := range r.NonResourceURLs {
			if u == "*" || u == nr.Path || (strings.HasSuffix(u, "*") && strings.HasPrefix(nr.Path, strings.TrimSuffix(u, "*"))) {
				return true
			}
		}
		return false
	}
	ra := spec.ResourceAttributes
	if ra == nil || len(r.Resources) == 0 {
		return false
	}
	if !matchesOrStar(r.Verbs, ra.Verb) || !matchesOrStar(r.APIGroups, ra.Group) {
		return false
	}
	resource := ra.Resource
	if ra.Subresource != "" {
		resource += "/" + ra.Subresource
	}
	resOK := false
	for _, e := range r.Resources {
		if e == "*" || e == resource || (ra.Subresource != "" && e == "*/"+ra.Subresource) {
			resOK = true
			break
		}
	}
	if !resOK {
		return false
	}
	if len(r.ResourceNames) > 0 && (ra.Name == "" || !matchesOrStar(r.ResourceNames, ra.Name)) {
		return false
	}
	if len(r.Namespaces) == 0 || slices.Contains(r.Namespaces, "") {
		return true // cluster-wide rule
	}
	return ra.Namespace != "" && matchesOrStar(r.Namespaces, ra.Namespace)
}
