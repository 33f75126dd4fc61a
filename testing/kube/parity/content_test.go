package parity

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// Content negotiation: the same raw requests, with the Accept headers
// client-go's clients send (and a few others), to both servers; the facts
// are the status code, the Content-Type and what the body decodes to.

const (
	pb         = "application/vnd.kubernetes.protobuf"
	pbJSON     = pb + ",application/json"
	metaList   = pb + ";as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
	metaObject = pb + ";as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
	crdGroup   = "parity.informerd.io"
)

// widgetsCRD is a namespaced CRD whose objects take anything.
const widgetsCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
"metadata":{"name":"widgets.` + crdGroup + `"},
"spec":{"group":"` + crdGroup + `","scope":"Namespaced","names":{"plural":"widgets","singular":"widget","kind":"Widget","listKind":"WidgetList"},
"versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}`

// protoDecoder decodes protobuf bodies of built-in and meta types.
var protoDecoder = func() *protobuf.Serializer {
	s := runtime.NewScheme()
	if err := scheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := metav1.AddMetaToScheme(s); err != nil {
		panic(err)
	}
	return protobuf.NewSerializer(s, s)
}()

// createCRD creates the widgets CRD on a real server and waits until it is
// served.
func createCRD(ctx context.Context, c *rawClient) error {
	resp, body, err := c.do(ctx, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "", "application/json", []byte(widgetsCRD))
	if err != nil {
		return err
	}
	if resp.StatusCode != 201 {
		return fmt.Errorf("create CRD: %d %s", resp.StatusCode, head(body))
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		resp, _, err := c.do(ctx, "GET", "/apis/"+crdGroup+"/v1/widgets", "application/json", "", nil)
		if err == nil && resp.StatusCode == 200 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("CRD not served after 30s")
		case <-time.After(200 * time.Millisecond):
		}
	}
}

type rawClient struct {
	hc   *http.Client
	host string
}

func (c *rawClient) do(ctx context.Context, method, path, accept, contentType string, body []byte) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.host+path, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("User-Agent", "parity-content/v1.0")
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// describe summarises a body: the envelope's or JSON's kind, a Status's
// code, reason and message, a list's item count and its items' kind.
func describe(contentType string, body []byte) string {
	if strings.HasPrefix(contentType, pb) {
		if !bytes.HasPrefix(body, []byte("k8s\x00")) {
			return fmt.Sprintf("no envelope %q", head(body))
		}
		obj, gvk, err := protoDecoder.Decode(body, nil, nil)
		if err != nil {
			return "undecodable: " + err.Error()
		}
		return describeObject(gvk.Kind, obj)
	}
	var probe struct {
		Kind  string            `json:"kind"`
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(body, &probe); err != nil {
		return fmt.Sprintf("not JSON %q", head(body))
	}
	if probe.Kind == "Status" {
		var st metav1.Status
		_ = json.Unmarshal(body, &st)
		return describeObject("Status", &st)
	}
	s := probe.Kind
	if probe.Items != nil {
		var item struct {
			Kind string `json:"kind"`
		}
		if len(probe.Items) > 0 {
			_ = json.Unmarshal(probe.Items[0], &item)
		}
		s += fmt.Sprintf(" items=%d itemKind=%q", len(probe.Items), item.Kind)
	}
	return s
}

func describeObject(kind string, obj runtime.Object) string {
	switch o := obj.(type) {
	case *metav1.Status:
		return fmt.Sprintf("Status %d %s %q", o.Code, o.Reason, normalize(o.Message))
	case *corev1.ConfigMapList:
		return fmt.Sprintf("%s items=%d", kind, len(o.Items))
	case *metav1.PartialObjectMetadataList:
		return fmt.Sprintf("%s items=%d", kind, len(o.Items))
	}
	return kind
}

func head(b []byte) []byte {
	if len(b) > 80 {
		return b[:80]
	}
	return b
}

// firstWatchEvent reads the first event of a watch body in either encoding.
func firstWatchEvent(contentType string, body []byte) string {
	if strings.HasPrefix(contentType, pb) {
		if len(body) < 4 || uint32(len(body)-4) < binary.BigEndian.Uint32(body) {
			return fmt.Sprintf("short frame %q", head(body))
		}
		var ev metav1.WatchEvent
		if err := ev.Unmarshal(body[4 : 4+binary.BigEndian.Uint32(body)]); err != nil {
			return "undecodable frame: " + err.Error()
		}
		return ev.Type + " " + describe(pb, ev.Object.Raw)
	}
	line, _, _ := bytes.Cut(body, []byte("\n"))
	var ev struct {
		Type   string          `json:"type"`
		Object json.RawMessage `json:"object"`
	}
	if err := json.Unmarshal(line, &ev); err != nil {
		return fmt.Sprintf("not a JSON event %q", head(line))
	}
	return ev.Type + " " + describe("application/json", ev.Object)
}

// contentProbes runs the requests against one server; registerCRD makes
// the widgets resource exist there.
func contentProbes(ctx context.Context, tg *target) ([]fact, error) {
	cfg := rest.CopyConfig(tg.cfg)
	cfg.Timeout = 30 * time.Second
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	c := &rawClient{hc: hc, host: strings.TrimSuffix(cfg.Host, "/")}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	p := &prober{cs: cs, ns: "parity-content", last: time.Now()}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.ns}}, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create namespace: %w", err)
	}
	if _, err := p.cms().Create(ctx, cm("a", "v"), metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create a: %w", err)
	}
	if err := tg.registerCRD(ctx, c); err != nil {
		return nil, fmt.Errorf("widgets: %w", err)
	}
	widgets := "/apis/" + crdGroup + "/v1/namespaces/" + p.ns + "/widgets"
	resp, body, err := c.do(ctx, "POST", widgets, "", "application/json",
		[]byte(`{"apiVersion":"`+crdGroup+`/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"size":1}}`))
	if err != nil || resp.StatusCode != 201 {
		return nil, fmt.Errorf("create widget: %v %s", err, head(body))
	}

	cms := "/api/v1/namespaces/" + p.ns + "/configmaps"
	for _, r := range []struct{ op, path, accept string }{
		{"list configmaps, client-go default", cms, pbJSON},
		{"list configmaps, JSON", cms, "application/json, */*"},
		{"list configmaps, */*", cms, "*/*"},
		{"list configmaps, no Accept", cms, ""},
		{"list configmaps, json;q=0.5 then protobuf", cms, "application/json;q=0.5, " + pb},
		{"get configmap, client-go default", cms + "/a", pbJSON},
		{"get configmap, YAML", cms + "/a", "application/yaml"},
		{"get missing configmap, client-go default", cms + "/missing", pbJSON},
		{"get configmap, text/html", cms + "/a", "text/html"},
		{"list configmaps, text/html", cms, "text/html"},
		{"get configmap, application/*", cms + "/a", "application/*"},
		{"get widget, application/*", widgets + "/w", "application/*"},
		{"list configmaps, metadata client", cms, metaList},
		{"get configmap, metadata client", cms + "/a", metaObject},
		{"get configmap as a PartialObjectMetadataList", cms + "/a", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"},
		{"list configmaps as a PartialObjectMetadata", cms, pb + ";as=PartialObjectMetadata;g=meta.k8s.io;v=v1"},
		{"list widgets, protobuf only", widgets, pb},
		{"list widgets, client-go default", widgets, pbJSON},
		{"get widget, protobuf only", widgets + "/w", pb},
		{"get missing widget, protobuf only", widgets + "/missing", pb},
		{"list widgets, metadata client", widgets, metaList},
		{"list widgets, metadata JSON", widgets, "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"},
	} {
		resp, body, err := c.do(ctx, "GET", r.path, r.accept, "", nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.op, err)
		}
		ct := resp.Header.Get("Content-Type")
		p.add(r.op, fmt.Sprintf("%d %s %s", resp.StatusCode, ct, describe(ct, body)))
	}
	for _, r := range []struct{ op, path, accept string }{
		{"watch configmaps, client-go default", cms, pbJSON},
		{"watch configmaps, JSON", cms, "application/json"},
		{"watch configmaps, metadata client", cms, metaObject},
		{"watch configmaps, YAML", cms, "application/yaml"},
		{"watch widgets, protobuf only", widgets, pb},
		{"watch widgets, client-go default", widgets, pbJSON},
		{"watch widgets, metadata client", widgets, metaObject},
	} {
		resp, body, err := c.do(ctx, "GET", r.path+"?watch=true&resourceVersion=0&timeoutSeconds=1", r.accept, "", nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.op, err)
		}
		ct := resp.Header.Get("Content-Type")
		got := describe(ct, body)
		if resp.StatusCode == 200 {
			got = firstWatchEvent(ct, body)
		}
		p.add(r.op, fmt.Sprintf("%d %s %s", resp.StatusCode, ct, got))
	}
	return p.facts, nil
}
