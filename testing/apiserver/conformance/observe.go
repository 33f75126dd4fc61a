package conformance

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// countingHandler counts an informer's notifications and keeps its own view
// of the objects (key -> version), built from the notifications alone.
type countingHandler struct {
	mu    sync.Mutex
	c     EventCounts
	state map[string]version
}

func newCountingHandler() *countingHandler {
	return &countingHandler{state: map[string]version{}}
}

func keyOf(c *corev1.ConfigMap) string { return c.Namespace + "/" + c.Name }

func (h *countingHandler) OnAdd(obj any, isInInitialList bool) {
	c, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if isInInitialList {
		h.c.InitialAdds++
	} else {
		h.c.Adds++
	}
	h.state[keyOf(c)] = version{c.ResourceVersion, c.UID}
}

func (h *countingHandler) OnUpdate(oldObj, newObj any) {
	o, ok1 := oldObj.(*corev1.ConfigMap)
	n, ok2 := newObj.(*corev1.ConfigMap)
	if !ok1 || !ok2 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if o.ResourceVersion == n.ResourceVersion {
		h.c.Resyncs++
	} else {
		h.c.Updates++
	}
	h.state[keyOf(n)] = version{n.ResourceVersion, n.UID}
}

func (h *countingHandler) OnDelete(obj any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		h.c.Deletes++
		delete(h.state, keyOf(o))
	case cache.DeletedFinalStateUnknown:
		h.c.Tombstones++
		delete(h.state, o.Key)
	}
}

func (h *countingHandler) counts() EventCounts {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.c
}

func (h *countingHandler) view() map[string]version {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]version, len(h.state))
	for k, v := range h.state {
		out[k] = v
	}
	return out
}

// waitHandler waits until the handler's view equals the informer's cache.
func (inf *informer) waitHandler(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		d := diff(cacheState(inf.inf), inf.handler.view())
		if d == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: the event handler's view did not reach the cache in %v: %s", inf.opts.Name, timeout, d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// requestLog records an informer's requests (see InformerResult.Requests).
type requestLog struct {
	mu  sync.Mutex
	all []string
}

func (l *requestLog) add(s string) {
	l.mu.Lock()
	l.all = append(l.all, s)
	l.mu.Unlock()
}

func (l *requestLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.all...)
}

type recordingTransport struct {
	next http.RoundTripper
	log  *requestLog
}

func (t *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	desc := describeRequest(req)
	resp, err := t.next.RoundTrip(req)
	switch {
	case err != nil:
		desc += " -> " + errorKind(err)
	default:
		desc += fmt.Sprintf(" -> %d", resp.StatusCode)
	}
	t.log.add(desc)
	return resp, err
}

// describeRequest gives the verb and the query parameters that carry list
// and watch semantics, without values that differ between servers or runs.
func describeRequest(req *http.Request) string {
	q := req.URL.Query()
	verb := "LIST"
	if w := q.Get("watch"); w == "true" || w == "1" {
		verb = "WATCH"
	}
	if req.Method != http.MethodGet {
		verb = req.Method
	}
	parts := []string{verb}
	if q.Has("resourceVersion") {
		switch rv := q.Get("resourceVersion"); rv {
		case "", "0":
			parts = append(parts, fmt.Sprintf("rv=%q", rv))
		default:
			parts = append(parts, "rv=N")
		}
	}
	for _, p := range []string{"resourceVersionMatch", "limit", "sendInitialEvents", "allowWatchBookmarks", "labelSelector", "fieldSelector"} {
		if q.Has(p) {
			parts = append(parts, p+"="+q.Get(p))
		}
	}
	if q.Get("continue") != "" {
		parts = append(parts, "continue")
	}
	if q.Has("timeoutSeconds") {
		parts = append(parts, "timeoutSeconds")
	}
	return strings.Join(parts, " ")
}

func errorKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return "error"
}

// digest hashes the namespace's ConfigMaps' names, labels and data.
func digest(ctx context.Context, cs kubernetes.Interface, ns string) (string, error) {
	type entry struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels,omitempty"`
		Data   map[string]string `json:"data,omitempty"`
	}
	var all []entry
	opts := metav1.ListOptions{Limit: 500}
	for {
		var list *corev1.ConfigMapList
		err := retry(ctx, func() error {
			var err error
			list, err = cs.CoreV1().ConfigMaps(ns).List(ctx, opts)
			return err
		})
		if err != nil {
			if apierrors.IsResourceExpired(err) && opts.Continue != "" { // start over
				all, opts.Continue = nil, ""
				continue
			}
			return "", err
		}
		for i := range list.Items {
			it := &list.Items[i]
			all = append(all, entry{it.Name, it.Labels, it.Data})
		}
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	h := sha256.New()
	enc := json.NewEncoder(h) // maps are encoded with sorted keys
	for _, e := range all {
		if err := enc.Encode(e); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
