package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/mergepatch"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// maxBodyBytes bounds request bodies (the real limit is 3 MiB per object,
// larger for some requests).
const maxBodyBytes = 8 << 20

// request is a parsed resource request.
type request struct {
	res         *resourceStore
	namespace   string
	name        string
	subresource string
	verb        string
	out         outputFormat // the negotiated response format
}

func (srv *Server) serveResource(w http.ResponseWriter, req *http.Request, group, version string, rest []string) {
	rq, aerr := srv.parseResourcePath(req, group, version, rest)
	if aerr != nil {
		writeError(w, req, aerr)
		return
	}
	if rq.out, aerr = negotiateResource(req, rq.res, rq.verb); aerr != nil {
		writeError(w, req, aerr)
		return
	}
	fault := srv.faults.take(rq.res, rq.namespace, rq.verb, req.UserAgent())
	if fault != nil {
		srv.stats.faultsHit.Add(1)
		if rq.verb != "watch" && srv.applyRequestFault(w, req, rq, fault) {
			return
		}
	}
	switch rq.verb {
	case "get":
		o, aerr := srv.store.Get(rq.res, rq.namespace, rq.name)
		if aerr != nil {
			writeError(w, req, aerr)
			return
		}
		srv.respondObject(w, req, rq, http.StatusOK, o, fault)
	case "list", "watch":
		srv.serveListOrWatch(w, req, rq, fault)
	case "create":
		srv.serveCreate(w, req, rq, fault)
	case "update":
		srv.serveUpdate(w, req, rq, fault)
	case "patch":
		srv.servePatch(w, req, rq, fault)
	case "delete":
		srv.serveDelete(w, req, rq, fault)
	case "deletecollection":
		srv.serveDeleteCollection(w, req, rq, fault)
	default:
		writeError(w, req, errMethodNotAllowed(req.Method))
	}
}

func (srv *Server) parseResourcePath(req *http.Request, group, version string, rest []string) (*request, *apiError) {
	if len(rest) == 0 {
		return nil, errNoResource()
	}
	rq := &request{}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		if r := srv.store.lookup(group, version, rest[2]); r != nil && r.def.Namespaced {
			rq.res, rq.namespace = r, rest[1]
			rest = rest[2:]
		}
	}
	if rq.res == nil {
		r := srv.store.lookup(group, version, rest[0])
		if r == nil {
			return nil, errNoResource()
		}
		rq.res = r
	}
	if len(rest) > 1 {
		rq.name = rest[1]
	}
	if len(rest) > 2 {
		rq.subresource = rest[2]
		if len(rest) > 3 || rq.subresource != "status" || !rq.res.def.Status {
			return nil, errNoResource()
		}
	}
	d := &rq.res.def
	if d.Namespaced && rq.name != "" && rq.namespace == "" {
		return nil, errNoResource()
	}
	watch := req.URL.Query().Get("watch")
	isWatch := watch == "true" || watch == "1"
	switch req.Method {
	case http.MethodGet:
		switch {
		case isWatch:
			rq.verb = "watch"
		case rq.name == "":
			rq.verb = "list"
		default:
			rq.verb = "get"
		}
	case http.MethodPost:
		if rq.name != "" {
			return nil, errMethodNotAllowed(req.Method)
		}
		rq.verb = "create"
	case http.MethodPut:
		rq.verb = "update"
	case http.MethodPatch:
		rq.verb = "patch"
	case http.MethodDelete:
		if rq.name == "" {
			rq.verb = "deletecollection"
		} else {
			rq.verb = "delete"
		}
	default:
		return nil, errMethodNotAllowed(req.Method)
	}
	if (rq.verb == "update" || rq.verb == "patch") && rq.name == "" {
		return nil, errMethodNotAllowed(req.Method)
	}
	if rq.subresource != "" && rq.verb != "get" && rq.verb != "update" && rq.verb != "patch" {
		return nil, errMethodNotAllowed(req.Method)
	}
	return rq, nil
}

// applyRequestFault handles faults of non-watch requests that happen before
// any work; it returns true when the response was written.
func (srv *Server) applyRequestFault(w http.ResponseWriter, req *http.Request, rq *request, f *FaultSpec) bool {
	switch f.Type {
	case FaultGone:
		if c := req.URL.Query().Get("continue"); c != "" {
			e := errExpired(msgInconsistentCont)
			if rel, _, aerr := decodeContinue(c); aerr == nil {
				e.Continue = encodeContinue(rel, -1)
			}
			writeError(w, req, e)
		} else {
			writeError(w, req, errExpired(msgListTooOld))
		}
		return true
	case FaultTooManyRequests:
		writeError(w, req, errTooManyRequests(f.RetryAfterSeconds))
		return true
	case FaultInternalError:
		writeError(w, req, errInternal(faultMessage(f, "injected fault")))
		return true
	case FaultStall:
		srv.stall(req.Context(), f.duration())
		if f.DurationMs == 0 {
			return true
		}
	}
	return false
}

func (srv *Server) respondObject(w http.ResponseWriter, req *http.Request, rq *request, code int, o *object, f *FaultSpec) {
	body, err := rq.res.encodeObject(o, rq.out)
	if err != nil {
		writeError(w, req, errInternal(err.Error()))
		return
	}
	srv.writeObject(w, req, code, rq.out.contentType(), body, f)
}

func (srv *Server) respondList(w http.ResponseWriter, req *http.Request, rq *request, res *listResult, f *FaultSpec) {
	body, err := rq.res.encodeListAs(res, rq.out)
	if err != nil {
		writeError(w, req, errInternal(err.Error()))
		return
	}
	srv.writeObject(w, req, http.StatusOK, rq.out.contentType(), body, f)
}

// respondJSONAs writes a typed object given as JSON (a Status, a review) in
// the media type of out.
func (srv *Server) respondJSONAs(w http.ResponseWriter, req *http.Request, out outputFormat, gvk schema.GroupVersionKind, code int, body []byte, f *FaultSpec) {
	b, err := encodeJSONAs(gvk, body, out)
	if err != nil {
		writeError(w, req, errInternal(err.Error()))
		return
	}
	srv.writeObject(w, req, code, out.contentType(), b, f)
}

// writeObject writes a response body, applying body faults.
func (srv *Server) writeObject(w http.ResponseWriter, req *http.Request, code int, contentType string, body []byte, f *FaultSpec) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Cache-Control", "no-cache, private")
	if f != nil {
		switch f.Type {
		case FaultTruncate, FaultGarbage:
			h.Set("Content-Length", strconv.Itoa(len(body)))
			w.WriteHeader(code)
			_, _ = w.Write(body[:len(body)/2])
			if f.Type == FaultGarbage {
				_, _ = w.Write([]byte("\x00\xff\xfe garbage"))
			}
			_ = http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler)
		case FaultSlow:
			h.Set("Content-Length", strconv.Itoa(len(body)))
			w.WriteHeader(code)
			sw := &slowWriter{inner: &httpFlushWriter{w: w, rc: http.NewResponseController(w)}, bps: f.BytesPerSecond, ctx: req.Context()}
			_, _ = sw.Write(body)
			return
		}
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

func (srv *Server) serveListOrWatch(w http.ResponseWriter, req *http.Request, rq *request, fault *FaultSpec) {
	q := req.URL.Query()
	d := &rq.res.def
	isWatch := rq.verb == "watch"
	ls, fs, aerr := parseSelectors(d, q.Get("labelSelector"), q.Get("fieldSelector"))
	if aerr != nil {
		writeError(w, req, aerr)
		return
	}
	if rq.name != "" { // watch of a single object by path
		fs = fields.AndSelectors(fs, fields.OneTermEqualSelector("metadata.name", rq.name))
	}
	rv, rvMatch, cont := q.Get("resourceVersion"), q.Get("resourceVersionMatch"), q.Get("continue")
	var sie *bool
	if v, ok := q["sendInitialEvents"]; ok && len(v) > 0 {
		b, err := strconv.ParseBool(v[0])
		if err != nil {
			writeError(w, req, errBadRequest(fmt.Sprintf("sendInitialEvents: invalid value %q", v[0])))
			return
		}
		sie = &b
	}
	if causes := validateListOptions(isWatch, rv, rvMatch, cont, sie); len(causes) > 0 {
		writeError(w, req, errListOptionsInvalid(causes...))
		return
	}
	if isWatch {
		wq := watchQuery{namespace: rq.namespace, rv: rv, sendInitialEvents: sie, label: ls, field: fs, wire: wireOf(rq.out)}
		wq.allowBookmarks = q.Get("allowWatchBookmarks") == "true" || q.Get("allowWatchBookmarks") == "1"
		if t := q.Get("timeoutSeconds"); t != "" {
			n, err := strconv.ParseInt(t, 10, 64)
			if err != nil || n < 0 {
				writeError(w, req, errBadRequest(fmt.Sprintf("timeoutSeconds: invalid value %q", t)))
				return
			}
			wq.timeout = time.Duration(n) * time.Second
		}
		srv.serveWatch(w, req, rq.res, wq, fault)
		return
	}
	var limit int64
	if l := q.Get("limit"); l != "" {
		n, err := strconv.ParseInt(l, 10, 64)
		if err != nil {
			writeError(w, req, errBadRequest(fmt.Sprintf("limit: invalid value %q", l)))
			return
		}
		limit = n
	}
	srv.stats.lists.Add(1)
	res, aerr := srv.store.List(req.Context(), rq.res, listQuery{namespace: rq.namespace, rv: rv, rvMatch: rvMatch, limit: limit, cont: cont, label: ls, field: fs})
	if aerr != nil {
		writeError(w, req, aerr)
		return
	}
	srv.respondList(w, req, rq, res, fault)
}

func encodeList(r *resourceStore, res *listResult) []byte {
	return encodeListJSON(r.def.ListKind, r.def.GroupVersion(), res, func(buf *bytes.Buffer, _ int, o *object) {
		if r.def.CustomResource {
			buf.Write(o.full)
		} else { // built-in list items carry no kind/apiVersion
			buf.WriteByte('{')
			buf.Write(o.full[o.bodyOff:])
		}
	})
}

// encodeListJSON writes a list with its list metadata; item writes item i.
func encodeListJSON(kind, apiVersion string, res *listResult, item func(buf *bytes.Buffer, i int, o *object)) []byte {
	size := 128
	for _, o := range res.items {
		size += len(o.full) + 1
	}
	var buf bytes.Buffer
	buf.Grow(size)
	fmt.Fprintf(&buf, `{"kind":%q,"apiVersion":%q,"metadata":{"resourceVersion":"%d"`, kind, apiVersion, res.rv)
	if res.cont != "" {
		fmt.Fprintf(&buf, `,"continue":%q`, res.cont)
	}
	if res.remaining != nil {
		fmt.Fprintf(&buf, `,"remainingItemCount":%d`, *res.remaining)
	}
	buf.WriteString(`},"items":[`)
	for i, o := range res.items {
		if i > 0 {
			buf.WriteByte(',')
		}
		item(&buf, i, o)
	}
	buf.WriteString("]}")
	return buf.Bytes()
}

// validateListOptions mirrors the apiserver's ListOptions validation.
func validateListOptions(isWatch bool, rv, match, cont string, sie *bool) []statusCause {
	var c []statusCause
	forbid := func(field, msg string) {
		c = append(c, statusCause{Type: "FieldValueForbidden", Field: field, Message: "Forbidden: " + msg})
	}
	notSupported := func(field, v string, allowed string) {
		c = append(c, statusCause{Type: "FieldValueNotSupported", Field: field, Message: fmt.Sprintf("Unsupported value: %q: supported values: %s", v, allowed)})
	}
	if isWatch {
		if sie != nil && match != "NotOlderThan" {
			forbid("resourceVersionMatch", "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
		}
		if match != "" {
			if sie == nil {
				forbid("resourceVersionMatch", "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided")
			}
			if match != "NotOlderThan" {
				notSupported("resourceVersionMatch", match, `"NotOlderThan"`)
			}
			if cont != "" {
				forbid("resourceVersionMatch", "resourceVersionMatch is forbidden when continue is provided")
			}
		}
		return c
	}
	if match != "" {
		if rv == "" {
			forbid("resourceVersionMatch", "resourceVersionMatch is forbidden unless resourceVersion is provided")
		}
		if cont != "" {
			forbid("resourceVersionMatch", "resourceVersionMatch is forbidden when continue is provided")
		}
		if match != "Exact" && match != "NotOlderThan" {
			notSupported("resourceVersionMatch", match, `"Exact", "NotOlderThan", ""`)
		}
		if match == "Exact" && rv == "0" {
			forbid("resourceVersionMatch", `resourceVersionMatch "exact" is forbidden for resourceVersion "0"`)
		}
	}
	if sie != nil {
		forbid("sendInitialEvents", "sendInitialEvents is forbidden for list")
	}
	return c
}

func parseSelectors(d *ResourceDef, label, field string) (labels.Selector, fields.Selector, *apiError) {
	ls := labels.Everything()
	if label != "" {
		s, err := labels.Parse(label)
		if err != nil {
			return nil, nil, errBadRequest(err.Error())
		}
		ls = s
	}
	fs := fields.Everything()
	if field != "" {
		s, err := fields.ParseSelector(field)
		if err != nil {
			return nil, nil, errBadRequest(err.Error())
		}
		for _, req := range s.Requirements() {
			if !fieldSupported(d, req.Field) {
				return nil, nil, errBadRequest(fieldNotSupported(d, req.Field))
			}
		}
		fs = s
	}
	return ls, fs, nil
}

// fieldNotSupported is the message of the resource's field label conversion:
// kinds that register their own (pods, secrets, namespaces, services, custom
// resources) say "field label not supported", the others get
// runtime.DefaultMetaV1FieldSelectorConversion's.
func fieldNotSupported(d *ResourceDef, f string) string {
	if len(d.ExtraFieldSelectors) > 0 || d.CustomResource {
		return fmt.Sprintf("field label not supported: %s", f)
	}
	return fmt.Sprintf("%q is not a known field selector: only %q, %q", f, "metadata.name", "metadata.namespace")
}

func fieldSupported(d *ResourceDef, f string) bool {
	if f == "metadata.name" || (f == "metadata.namespace" && d.Namespaced) {
		return true
	}
	for _, x := range d.ExtraFieldSelectors {
		if x == f {
			return true
		}
	}
	return false
}

func readBody(req *http.Request) ([]byte, *apiError) {
	b, err := io.ReadAll(io.LimitReader(req.Body, maxBodyBytes+1))
	if err != nil {
		return nil, errBadRequest("unable to read the request body: " + err.Error())
	}
	if len(b) > maxBodyBytes {
		return nil, &apiError{Code: 413, Reason: "RequestEntityTooLarge", Message: "Request entity too large: limit is 8388608"}
	}
	return b, nil
}

func decodeBody(req *http.Request) (map[string]any, *apiError) {
	if isProtobuf(req) {
		b, aerr := readBody(req)
		if aerr != nil {
			return nil, aerr
		}
		m, err := decodeProtobufObject(b)
		if err != nil {
			return nil, errBadRequest("the object provided is unrecognized: " + err.Error())
		}
		return m, nil
	}
	if ct := req.Header.Get("Content-Type"); ct != "" {
		mt, _, _ := mime.ParseMediaType(ct)
		if mt != "application/json" && mt != "*/*" {
			return nil, &apiError{Code: 415, Reason: "UnsupportedMediaType", Message: fmt.Sprintf("the body of the request was in an unknown format (%s) - accepted media types include: application/json", ct)}
		}
	}
	b, aerr := readBody(req)
	if aerr != nil {
		return nil, aerr
	}
	m, err := decodeJSON(b)
	if err != nil {
		return nil, errBadRequest("the object provided is unrecognized: " + err.Error())
	}
	return m, nil
}

func (srv *Server) writeOptsOf(req *http.Request, rq *request) writeOpts {
	o := writeOpts{subresource: rq.subresource, dryRun: req.URL.Query().Get("dryRun") == "All"}
	if !srv.opts.DisableManagedFields {
		o.manager = managerOf(req.UserAgent(), req.URL.Query().Get("fieldManager"))
	}
	return o
}

func (srv *Server) serveCreate(w http.ResponseWriter, req *http.Request, rq *request, f *FaultSpec) {
	data, aerr := decodeBody(req)
	if aerr != nil {
		writeError(w, req, aerr)
		return
	}
	o, aerr := srv.store.Create(rq.res, rq.namespace, data, srv.writeOptsOf(req, rq))
	if aerr != nil {
		writeError(w, req, aerr)
		return
	}
	srv.respondObject(w, req, rq, http.StatusCreated, o, f)
}

func (srv *Server) serveUpdate(w http.ResponseWriter, req *http.Request, rq *request, f *FaultSpec) {
	data, aerr := decodeBody(req)
	if aerr != nil {
		writeError(w, req, aerr)
		return
	}
	o, aerr := srv.store.Update(rq.res, rq.namespace, rq.name, data, srv.writeOptsOf(req, rq))
	if aerr != nil {
		writeError(w, req, aerr)
		return
	}
	srv.respondObject(w, req, rq, http.StatusOK, o, f)
}

// strategicSchemas are the typed structs strategic merge patch needs.
func strategicSchema(d *ResourceDef) any {
	switch d.GroupVersion() + "/" + d.Kind {
	case "v1/ConfigMap":
		return corev1.ConfigMap{}
	case "v1/Secret":
		return corev1.Secret{}
	case "v1/Pod":
		return corev1.Pod{}
	case "v1/Service":
		return corev1.Service{}
	case "v1/Namespace":
		return corev1.Namespace{}
	case "apps/v1/Deployment":
		return appsv1.Deployment{}
	case "coordination.k8s.io/v1/Lease":
		return coordinationv1.Lease{}
	}
	return nil
}

func (srv *Server) servePatch(w http.ResponseWriter, req *http.Request, rq *request, f *FaultSpec) {
	mt, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
	d := &rq.res.def
	// Errors as the apiserver's patch handler maps them. fieldValidation
	// (default Warn) first decodes the patch strictly, once the object was
	// found: a JSON patch into []handlers.jsonPatchOp, a merge patch into a
	// map (null decodes into either).
	var apply func(orig, patch []byte) ([]byte, *apiError)
	switch mt {
	case "application/merge-patch+json":
		apply = func(orig, patch []byte) ([]byte, *apiError) {
			if k := jsonKind(patch); k != "object" && k != "null" {
				return nil, errBadRequest("error decoding patch: json: cannot unmarshal " + k + " into Go value of type map[string]interface {}")
			}
			out, err := jsonpatch.MergePatch(orig, patch)
			switch {
			case err == jsonpatch.ErrBadJSONPatch:
				return nil, errBadRequest(err.Error())
			case err != nil:
				return nil, &apiError{Code: 422, Reason: "Invalid", Message: err.Error()}
			}
			return out, nil
		}
	case "application/json-patch+json":
		apply = func(orig, patch []byte) ([]byte, *apiError) {
			if k := jsonKind(patch); k != "array" && k != "null" {
				return nil, errBadRequest("error decoding patch: json: cannot unmarshal " + k + " into Go value of type []handlers.jsonPatchOp")
			}
			p, err := jsonpatch.DecodePatch(patch)
			if err != nil {
				return nil, errBadRequest(err.Error())
			}
			out, err := p.Apply(orig)
			if err != nil {
				// apierrors.NewGenericServerResponse(422, ...): the reason of the
				// failure (a failed "test", a missing path) is not in the answer.
				return nil, errPatchRejected()
			}
			return out, nil
		}
	case "application/strategic-merge-patch+json":
		schema := strategicSchema(d)
		if schema == nil || d.CustomResource {
			writeError(w, req, &apiError{Code: 415, Reason: "UnsupportedMediaType", Message: "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"})
			return
		}
		apply = func(orig, patch []byte) ([]byte, *apiError) {
			out, err := strategicpatch.StrategicMergePatch(orig, patch, schema)
			switch err {
			case nil:
				return out, nil
			case mergepatch.ErrBadJSONDoc, mergepatch.ErrBadPatchFormatForPrimitiveList, mergepatch.ErrBadPatchFormatForRetainKeys,
				mergepatch.ErrBadPatchFormatForSetElementOrderList, mergepatch.ErrUnsupportedStrategicMergePatchFormat:
				return nil, errBadRequest(err.Error())
			case mergepatch.ErrNoListOfLists, mergepatch.ErrPatchContentNotMatchRetainKeys:
				return nil, errPatchRejected()
			}
			return nil, &apiError{Code: 422, Reason: "Invalid", Message: err.Error()}
		}
	default:
		writeError(w, req, errUnsupportedMediaType(mt))
		return
	}
	patch, aerr := readBody(req)
	if aerr != nil {
		writeError(w, req, aerr)
		return
	}
	if !json.Valid(patch) { // checked before the object is looked up
		writeError(w, req, errBadRequest("invalid JSON patch"))
		return
	}
	st := srv.store
	st.mu.Lock()
	o, aerr := st.updateLocked(rq.res, objectKey(rq.namespace, rq.name), rq.name, "", func(cur *object) (map[string]any, *apiError) {
		out, aerr := apply(cur.full, patch)
		if aerr != nil {
			return nil, aerr
		}
		m, err := decodeJSON(out)
		if err != nil {
			return nil, errBadRequest(err.Error())
		}
		if n := str(metaOf(m), "name"); n != rq.name {
			return nil, errBadRequest(fmt.Sprintf("metadata.name: Invalid value: %q: field is immutable", n))
		}
		return m, nil
	}, srv.writeOptsOf(req, rq))
	st.mu.Unlock()
	if aerr != nil {
		writeError(w, req, aerr)
		return
	}
	srv.respondObject(w, req, rq, http.StatusOK, o, f)
}

// jsonKind names the kind of a valid JSON value as encoding/json's
// UnmarshalTypeError does: object, array, string, number, bool or null.
func jsonKind(b []byte) string {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 {
		return "null"
	}
	switch b[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number"
}

type deleteOptions struct {
	Preconditions *deletePreconditions `json:"preconditions,omitempty"`
	DryRun        []string             `json:"dryRun,omitempty"`
}

func parseDeleteOptions(req *http.Request) (deleteOptions, *apiError) {
	var opts deleteOptions
	b, aerr := readBody(req)
	if aerr != nil {
		return opts, aerr
	}
	if len(bytes.TrimSpace(b)) > 0 && isProtobuf(req) {
		o, err := decodeProtobufDeleteOptions(b)
		if err != nil {
			return opts, errBadRequest("the object provided is unrecognized: " + err.Error())
		}
		return o, nil
	}
	if len(bytes.TrimSpace(b)) > 0 {
		if err := json.Unmarshal(b, &opts); err != nil {
			return opts, errBadRequest("the object provided is unrecognized: " + err.Error())
		}
	}
	return opts, nil
}

func statusSuccess(d *ResourceDef, o *object) []byte {
	type det struct {
		Name  string `json:"name"`
		Group string `json:"group,omitempty"`
		Kind  string `json:"kind"`
		UID   string `json:"uid"`
	}
	b, _ := json.Marshal(struct {
		Kind       string         `json:"kind"`
		APIVersion string         `json:"apiVersion"`
		Metadata   map[string]any `json:"metadata"`
		Status     string         `json:"status"`
		Details    det            `json:"details"`
	}{"Status", "v1", map[string]any{}, "Success", det{o.name, d.Group, d.Resource, o.uid}})
	return b
}

func (srv *Server) serveDelete(w http.ResponseWriter, req *http.Request, rq *request, f *FaultSpec) {
	opts, aerr := parseDeleteOptions(req)
	if aerr != nil {
		writeError(w, req, aerr)
		return
	}
	var pre deletePreconditions
	if opts.Preconditions != nil {
		pre = *opts.Preconditions
	}
	wo := srv.writeOptsOf(req, rq)
	if len(opts.DryRun) > 0 && opts.DryRun[0] == "All" {
		wo.dryRun = true
	}
	o, deleted, aerr := srv.store.Delete(rq.res, rq.namespace, rq.name, pre, wo)
	if aerr != nil {
		writeError(w, req, aerr)
		return
	}
	d := &rq.res.def
	if deleted && !(d.Group == "" && d.Resource == "namespaces") {
		srv.respondJSONAs(w, req, rq.out, statusGVK, http.StatusOK, statusSuccess(d, o), f)
		return
	}
	srv.respondObject(w, req, rq, http.StatusOK, o, f)
}

func (srv *Server) serveDeleteCollection(w http.ResponseWriter, req *http.Request, rq *request, f *FaultSpec) {
	q := req.URL.Query()
	ls, fs, aerr := parseSelectors(&rq.res.def, q.Get("labelSelector"), q.Get("fieldSelector"))
	if aerr != nil {
		writeError(w, req, aerr)
		return
	}
	st := srv.store
	match := selectorMatcher(rq.res, ls, fs)
	st.mu.Lock()
	var gone []*object
	for _, o := range rq.res.stateAtLocked(st.rv, scopeOf(rq.namespace)) {
		if match != nil && !match(o) {
			continue
		}
		if d, _, e := st.deleteLocked(rq.res, o.key, o.name, deletePreconditions{}, writeOpts{}); e == nil {
			gone = append(gone, d)
		}
	}
	rv := st.rv
	st.mu.Unlock()
	srv.respondList(w, req, rq, &listResult{items: gone, rv: rv}, f)
}

// bufferedJSON writes v as an indented-free JSON response.
func writeJSON(w http.ResponseWriter, code int, contentType string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, nil, errInternal(err.Error()))
		return
	}
	if contentType == "" {
		contentType = "application/json"
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Cache-Control", "no-cache, private")
	w.WriteHeader(code)
	bw := bufio.NewWriter(w)
	_, _ = bw.Write(b)
	_ = bw.Flush()
}

func splitPath(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}
