package server

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/munnerz/goautoneg"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Content negotiation of responses, as kube-apiserver's
// handlers/negotiation package does it: the Accept clauses in goautoneg's
// order (q, then specificity; ties keep the header's order), each tried
// against the server's media types in their order (JSON, YAML, protobuf),
// with the endpoint's restrictions; no Accept header means JSON.

type media uint8

const (
	mediaJSON media = iota
	mediaYAML
	mediaProtobuf
)

// serverMedia is the legacy codec factory's list, in its order; YAML has no
// stream serializer.
var serverMedia = []struct {
	typ, sub string
	stream   bool
	m        media
}{
	{"application", "json", true, mediaJSON},
	{"application", "yaml", false, mediaYAML},
	{"application", "vnd.kubernetes.protobuf", true, mediaProtobuf},
}

const (
	msgNotAcceptable       = "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf"
	msgNotAcceptableStream = "only the following media types are accepted: application/json;stream=watch, application/vnd.kubernetes.protobuf;stream=watch"
)

// outputFormat is a negotiated response encoding.
type outputFormat struct {
	media media
	// as is "PartialObjectMetadata" or "PartialObjectMetadataList" (group
	// meta.k8s.io, version v1) when the client asked for that conversion.
	as string
}

func (f outputFormat) meta() bool { return f.as != "" }

func (f outputFormat) contentType() string {
	switch f.media {
	case mediaYAML:
		return "application/yaml"
	case mediaProtobuf:
		return protobufContentType
	}
	return "application/json"
}

func (f outputFormat) streamContentType() string {
	if f.media == mediaProtobuf {
		return protobufContentType + ";stream=watch"
	}
	return "application/json"
}

// restrictions are an endpoint's (RequestScope.AllowsMediaTypeTransform and
// friends); the zero value is negotiation.DefaultEndpointRestrictions, which
// error responses use: no conversions, no server version.
type restrictions struct {
	resource bool // a resource endpoint: PartialObjectMetadata(List) conversions, sv=v1
	// noProtobuf: the resource has no protobuf encoding of its own (custom
	// resources: their StandardSerializers leave protobuf out), so plain
	// protobuf is not acceptable, protobuf PartialObjectMetadata is.
	noProtobuf bool
}

// negotiate picks the response format for an Accept header.
func negotiate(header string, rs restrictions) (outputFormat, bool) {
	if header == "" {
		return outputFormat{media: mediaJSON}, true
	}
	for _, c := range goautoneg.ParseAccept(header) {
		for _, m := range serverMedia {
			if !(c.Type == m.typ && (c.SubType == m.sub || c.SubType == "*") || c.Type == "*" && c.SubType == "*") {
				continue
			}
			if f, ok := acceptParams(c.Params, m.m, m.stream, rs); ok {
				return f, true
			}
		}
	}
	return outputFormat{}, false
}

func acceptParams(params map[string]string, m media, stream bool, rs restrictions) (outputFormat, bool) {
	f := outputFormat{media: m}
	var convert *schema.GroupVersionKind
	for k, v := range params {
		switch k {
		case "as", "g", "v":
			if convert == nil {
				convert = &schema.GroupVersionKind{}
			}
			switch k {
			case "as":
				convert.Kind = v
			case "g":
				convert.Group = v
			default:
				convert.Version = v
			}
		case "stream":
			if v != "" && (!stream || v != "watch") {
				return f, false
			}
		case "sv":
			if v != "" && !(rs.resource && v == "v1") {
				return f, false
			}
		}
	}
	if convert == nil {
		return f, !(rs.noProtobuf && m == mediaProtobuf)
	}
	// Table needs a table convertor and JSON or YAML: not served here.
	if !rs.resource || convert.Group != "meta.k8s.io" || convert.Version != "v1" {
		return f, false
	}
	switch convert.Kind {
	case "PartialObjectMetadata", "PartialObjectMetadataList":
		f.as = convert.Kind
		return f, true
	}
	return f, false
}

func errNotAcceptable(msg string) *apiError {
	return &apiError{Code: http.StatusNotAcceptable, Reason: "NotAcceptable", Message: msg}
}

// errConversionShape is the transform's refusal of a PartialObjectMetadata
// for a list or a PartialObjectMetadataList for a single object; typ is the
// Go type the real server names (%T of the object it holds).
func errConversionShape(as string, list bool, typ string) *apiError {
	if list {
		return errNotAcceptable(fmt.Sprintf("you requested %s, but the requested object is a list (%s)", as, typ))
	}
	return errNotAcceptable(fmt.Sprintf("you requested %s, but the requested object is not a list (%s)", as, typ))
}

// goType is %T of the object the real server holds for r: the internal
// type of a built-in resource (package core for the legacy group, else the
// group's first label: *core.ConfigMap, *apps.Deployment), Unstructured for
// a custom one.
func goType(r *resourceStore, list bool) string {
	if !r.protobuf {
		if list {
			return "*unstructured.UnstructuredList"
		}
		return "*unstructured.Unstructured"
	}
	k := r.def.Kind
	if list {
		k = r.def.ListKind
	}
	pkg, _, _ := strings.Cut(r.def.Group, ".")
	if pkg == "" {
		pkg = "core"
	}
	return "*" + pkg + "." + k
}

// restfulAccepts is go-restful's route selection on Accept, which runs
// before the handlers of built-in resources (custom resources are served
// by another handler): some media type of the header, its parameters cut
// off, must be one the route produces exactly, or */*.
func restfulAccepts(header string) bool {
	if header == "" {
		return true
	}
	for _, part := range strings.Split(header, ",") {
		mt, _, _ := strings.Cut(part, ";")
		switch strings.Trim(mt, " ") {
		case "*/*", "application/json", "application/yaml", protobufContentType:
			return true
		}
	}
	return false
}

// errRestfulNotAcceptable is go-restful's 406 as kube-apiserver's service
// error handler wraps it (NewGenericServerResponse: the message kept, empty
// details); lists and watches share a route that also produces the stream
// types.
func errRestfulNotAcceptable(verb string) *apiError {
	available := "application/json, application/yaml, application/vnd.kubernetes.protobuf"
	if verb == "list" || verb == "watch" {
		available += ", application/json;stream=watch, application/vnd.kubernetes.protobuf;stream=watch"
	}
	return &apiError{Code: http.StatusNotAcceptable, Reason: "NotAcceptable",
		Message: "406: Not Acceptable\n\nAvailable representations: " + available, Details: &statusDetails{}}
}

// negotiateResource negotiates a response of a resource endpoint: 406 when
// nothing in Accept can be served (for a watch, first as an object response,
// then as a stream, like the list handler and serveWatchHandler do).
func negotiateResource(req *http.Request, r *resourceStore, verb string) (outputFormat, *apiError) {
	accept := req.Header.Get("Accept")
	if r.protobuf && !restfulAccepts(accept) {
		return outputFormat{}, errRestfulNotAcceptable(verb)
	}
	rs := restrictions{resource: true, noProtobuf: !r.protobuf}
	f, ok := negotiate(accept, rs)
	if !ok {
		return f, errNotAcceptable(msgNotAcceptable)
	}
	if verb == "watch" && f.media == mediaYAML {
		return f, errNotAcceptable(msgNotAcceptableStream)
	}
	switch {
	case verb == "list" || verb == "deletecollection":
		if f.as == "PartialObjectMetadata" {
			return f, errConversionShape(f.as, true, goType(r, true))
		}
	case verb == "watch":
		// Events are single objects: either conversion yields their metadata.
	case f.as == "PartialObjectMetadataList":
		return f, errConversionShape(f.as, false, goType(r, false))
	}
	return f, nil
}

// errorFormat negotiates how an error Status is written
// (responsewriters.ErrorNegotiated: default restrictions; JSON when nothing
// matches).
func errorFormat(req *http.Request) outputFormat {
	if req == nil {
		return outputFormat{media: mediaJSON}
	}
	f, ok := negotiate(req.Header.Get("Accept"), restrictions{})
	if !ok {
		return outputFormat{media: mediaJSON}
	}
	return f
}
