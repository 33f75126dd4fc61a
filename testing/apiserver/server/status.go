package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// apiError is a metav1.Status failure, the body of every error response and of
// ERROR watch events. Field names and order follow metav1.Status.
type apiError struct {
	Code       int
	Reason     string
	Message    string
	Details    *statusDetails
	RetryAfter int // seconds; also sent as the Retry-After header when > 0
	Continue   string
}

type statusDetails struct {
	Name              string        `json:"name,omitempty"`
	Group             string        `json:"group,omitempty"`
	Kind              string        `json:"kind,omitempty"`
	UID               string        `json:"uid,omitempty"`
	Causes            []statusCause `json:"causes,omitempty"`
	RetryAfterSeconds int           `json:"retryAfterSeconds,omitempty"`
}

type statusCause struct {
	Type    string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	Field   string `json:"field,omitempty"`
}

func (e *apiError) Error() string { return e.Message }

type statusBody struct {
	Kind       string         `json:"kind"`
	APIVersion string         `json:"apiVersion"`
	Metadata   statusListMeta `json:"metadata"`
	Status     string         `json:"status"`
	Message    string         `json:"message,omitempty"`
	Reason     string         `json:"reason,omitempty"`
	Details    *statusDetails `json:"details,omitempty"`
	Code       int            `json:"code"`
}

type statusListMeta struct {
	Continue string `json:"continue,omitempty"`
}

func (e *apiError) body() []byte {
	d := e.Details
	if e.RetryAfter > 0 {
		if d == nil {
			d = &statusDetails{}
		}
		cp := *d
		cp.RetryAfterSeconds = e.RetryAfter
		d = &cp
	}
	b, _ := json.Marshal(statusBody{
		Kind: "Status", APIVersion: "v1", Metadata: statusListMeta{Continue: e.Continue},
		Status: "Failure", Message: e.Message, Reason: e.Reason, Details: d, Code: e.Code,
	})
	return b
}

// writeError writes e's Status in the format the request accepts
// (responsewriters.ErrorNegotiated: protobuf when Accept prefers it, JSON
// when nothing else matches).
func writeError(w http.ResponseWriter, req *http.Request, e *apiError) {
	f := errorFormat(req)
	body := e.body()
	if f.media != mediaJSON {
		if b, err := encodeJSONAs(statusGVK, body, f); err == nil {
			body = b
		} else {
			f = outputFormat{media: mediaJSON}
		}
	}
	h := w.Header()
	h.Set("Content-Type", f.contentType())
	h.Set("Cache-Control", "no-cache, private")
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	w.WriteHeader(e.Code)
	_, _ = w.Write(body)
}

func details(r *ResourceDef, name string) *statusDetails {
	return &statusDetails{Name: name, Group: r.Group, Kind: r.Resource}
}

// qualified is the resource name the real server prints in messages:
// "configmaps" for the core group, "deployments.apps" otherwise.
func qualified(r *ResourceDef) string {
	if r.Group == "" {
		return r.Resource
	}
	return r.Resource + "." + r.Group
}

func errNotFound(r *ResourceDef, name string) *apiError {
	return &apiError{Code: 404, Reason: "NotFound", Message: fmt.Sprintf("%s %q not found", qualified(r), name), Details: details(r, name)}
}

func errNamespaceNotFound(ns string) *apiError {
	return &apiError{Code: 404, Reason: "NotFound", Message: fmt.Sprintf("namespaces %q not found", ns), Details: &statusDetails{Name: ns, Kind: "namespaces"}}
}

func errNoResource() *apiError {
	return &apiError{Code: 404, Reason: "NotFound", Message: "the server could not find the requested resource", Details: &statusDetails{}}
}

func errAlreadyExists(r *ResourceDef, name string) *apiError {
	return &apiError{Code: 409, Reason: "AlreadyExists", Message: fmt.Sprintf("%s %q already exists", qualified(r), name), Details: details(r, name)}
}

func errConflict(r *ResourceDef, name, why string) *apiError {
	return &apiError{Code: 409, Reason: "Conflict", Message: fmt.Sprintf("Operation cannot be fulfilled on %s %q: %s", qualified(r), name, why), Details: details(r, name)}
}

// errPreconditionConflict is the Conflict of rest.BeforeDelete's
// precondition checks, which name the Kind where other errors name the
// resource: "Operation cannot be fulfilled on ConfigMap "a": ...", details
// kind "ConfigMap".
func errPreconditionConflict(r *ResourceDef, name, why string) *apiError {
	gk := r.Kind
	if r.Group != "" {
		gk = r.Kind + "." + r.Group
	}
	return &apiError{Code: 409, Reason: "Conflict", Message: fmt.Sprintf("Operation cannot be fulfilled on %s %q: %s", gk, name, why),
		Details: &statusDetails{Name: name, Group: r.Group, Kind: r.Kind}}
}

const conflictModified = "the object has been modified; please apply your changes to the latest version and try again"

// errPatchRejected is apierrors.NewGenericServerResponse(422, "", {}, "", ...)
// as the patch handler returns it when a JSON patch does not apply: a fixed
// message and empty details.
func errPatchRejected() *apiError {
	return &apiError{Code: 422, Reason: "Invalid", Message: "the server rejected our request due to an error in our request", Details: &statusDetails{}}
}

func errBadRequest(msg string) *apiError {
	return &apiError{Code: 400, Reason: "BadRequest", Message: msg}
}

// errInvalid is a 422 with field causes, as apierrors.NewInvalid builds it.
func errInvalid(kind, group, name string, causes ...statusCause) *apiError {
	gk := kind
	if group != "" {
		gk = kind + "." + group
	}
	msg := fmt.Sprintf("%s %q is invalid: ", gk, name)
	for i, c := range causes {
		if i > 0 {
			msg += ", "
		}
		msg += c.Field + ": " + c.Message
	}
	if len(causes) > 1 {
		msg = fmt.Sprintf("%s %q is invalid: [", gk, name)
		for i, c := range causes {
			if i > 0 {
				msg += ", "
			}
			msg += c.Field + ": " + c.Message
		}
		msg += "]"
	}
	return &apiError{Code: 422, Reason: "Invalid", Message: msg, Details: &statusDetails{Name: name, Group: group, Kind: kind, Causes: causes}}
}

func errListOptionsInvalid(causes ...statusCause) *apiError {
	return errInvalid("ListOptions", "meta.k8s.io", "", causes...)
}

func errExpired(msg string) *apiError {
	return &apiError{Code: 410, Reason: "Expired", Message: msg}
}

// Messages of the etcd3 storage layer for compacted revisions.
const (
	msgListTooOld         = "The resourceVersion for the provided list is too old."
	msgInconsistentCont   = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list."
	tooLargeRetrySeconds  = 1
	causeTypeRVTooLarge   = "ResourceVersionTooLarge"
	msgTooLargeCauseShort = "Too large resource version"
)

func errTooOldWatch(rv, floor uint64) *apiError {
	return errExpired(fmt.Sprintf("too old resource version: %d (%d)", rv, floor))
}

// errTooLargeRV is storage.NewTooLargeResourceVersionError as the watch
// cache returns it (it serves exact lists too, from its snapshots): a
// Timeout ("Timeout: " + message, as apierrors.NewTimeoutError builds it)
// asking to retry after a second.
func errTooLargeRV(want, cur uint64) *apiError {
	return &apiError{Code: 504, Reason: "Timeout",
		Message:    fmt.Sprintf("Timeout: Too large resource version: %d, current: %d", want, cur),
		Details:    &statusDetails{Causes: []statusCause{{Type: causeTypeRVTooLarge, Message: msgTooLargeCauseShort}}},
		RetryAfter: tooLargeRetrySeconds}
}

func errTooManyRequests(retryAfter int) *apiError {
	if retryAfter <= 0 {
		retryAfter = 1
	}
	return &apiError{Code: 429, Reason: "TooManyRequests", Message: "Too many requests, please try again later.", RetryAfter: retryAfter}
}

func errInternal(msg string) *apiError {
	return &apiError{Code: 500, Reason: "InternalError", Message: "Internal error occurred: " + msg,
		Details: &statusDetails{Causes: []statusCause{{Message: msg}}}}
}

func errUnauthorized() *apiError {
	return &apiError{Code: 401, Reason: "Unauthorized", Message: "Unauthorized"}
}

func errMethodNotAllowed(string) *apiError {
	return &apiError{Code: 405, Reason: "MethodNotAllowed", Message: "the server does not allow this method on the requested resource", Details: &statusDetails{}}
}

func errUnsupportedMediaType(string) *apiError {
	return &apiError{Code: 415, Reason: "UnsupportedMediaType", Message: "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json"}
}

func errForbiddenTerminating(r *ResourceDef, name, ns string) *apiError {
	return &apiError{Code: 403, Reason: "Forbidden",
		Message: fmt.Sprintf("%s %q is forbidden: unable to create new content in namespace %s because it is being terminated", qualified(r), name, ns),
		Details: &statusDetails{Name: name, Group: r.Group, Kind: r.Resource,
			Causes: []statusCause{{Type: "NamespaceTerminating", Message: fmt.Sprintf("namespace %s is being terminated", ns), Field: "metadata.namespace"}}}}
}
