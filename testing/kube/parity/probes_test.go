package parity

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// fact is the observable outcome of one probe, with everything that may
// legitimately differ between servers (resourceVersion values, UIDs,
// timestamps) left out or normalised.
type fact struct {
	Op   string
	Got  string
	Took time.Duration // since the previous fact
}

type prober struct {
	cs    *kubernetes.Clientset
	ns    string
	facts []fact
	last  time.Time
}

func (p *prober) cms() interface {
	Create(context.Context, *corev1.ConfigMap, metav1.CreateOptions) (*corev1.ConfigMap, error)
	Update(context.Context, *corev1.ConfigMap, metav1.UpdateOptions) (*corev1.ConfigMap, error)
	Get(context.Context, string, metav1.GetOptions) (*corev1.ConfigMap, error)
	List(context.Context, metav1.ListOptions) (*corev1.ConfigMapList, error)
	Watch(context.Context, metav1.ListOptions) (watch.Interface, error)
	Delete(context.Context, string, metav1.DeleteOptions) error
	Patch(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (*corev1.ConfigMap, error)
} {
	return p.cs.CoreV1().ConfigMaps(p.ns)
}

func (p *prober) add(op, got string) {
	now := time.Now()
	p.facts = append(p.facts, fact{op, got, now.Sub(p.last)})
	p.last = now
}

var (
	uidRE    = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	numberRE = regexp.MustCompile(`\b[0-9]+\b`)
)

// normalize replaces UIDs and numbers (resourceVersions) in a message.
func normalize(s string) string {
	return numberRE.ReplaceAllString(uidRE.ReplaceAllString(s, "<uid>"), "N")
}

// errFact describes an error as a client sees it: HTTP code, reason,
// details and message of the Status.
func errFact(err error) string {
	if err == nil {
		return "ok"
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return "error: " + normalize(err.Error())
	}
	return statusFact(st.Status())
}

func statusFact(s metav1.Status) string {
	out := fmt.Sprintf("%s %d %s %q", s.Status, s.Code, s.Reason, normalize(s.Message))
	if d := s.Details; d != nil {
		out += fmt.Sprintf(" details{name=%q group=%q kind=%q uid=%t retryAfter=%d", d.Name, d.Group, d.Kind, d.UID != "", d.RetryAfterSeconds)
		for _, c := range d.Causes {
			out += fmt.Sprintf(" cause{%s %q %q}", c.Type, c.Field, normalize(c.Message))
		}
		out += "}"
	}
	if s.Continue != "" {
		out += " continue"
	}
	return out
}

// objFact describes a ConfigMap's server-set fields and content.
func objFact(cm *corev1.ConfigMap) string {
	_, rvErr := strconv.ParseUint(cm.ResourceVersion, 10, 64)
	var mf []string
	for _, m := range cm.ManagedFields {
		fields := ""
		if m.FieldsV1 != nil {
			fields = string(m.FieldsV1.Raw)
		}
		mf = append(mf, fmt.Sprintf("%s/%s/%s/%s/%q/time=%t %s", m.Manager, m.Operation, m.APIVersion, m.FieldsType, m.Subresource, m.Time != nil, fields))
	}
	return fmt.Sprintf("name=%s ns-set=%t rv-numeric=%t uid=%t created=%t generation=%d deletion=%t labels=%v annotations=%v data=%v finalizers=%v managedFields=%v",
		cm.Name, cm.Namespace != "", rvErr == nil, cm.UID != "", !cm.CreationTimestamp.IsZero(), cm.Generation, cm.DeletionTimestamp != nil,
		cm.Labels, cm.Annotations, cm.Data, cm.Finalizers, mf)
}

func names(items []corev1.ConfigMap) []string {
	var out []string
	for _, it := range items {
		out = append(out, it.Name)
	}
	return out
}

func listFact(l *corev1.ConfigMapList, err error) string {
	if err != nil {
		return errFact(err)
	}
	rem := "nil"
	if l.RemainingItemCount != nil {
		rem = strconv.FormatInt(*l.RemainingItemCount, 10)
	}
	_, rvErr := strconv.ParseUint(l.ResourceVersion, 10, 64)
	return fmt.Sprintf("items=%v continue=%t remaining=%s rv-numeric=%t", names(l.Items), l.Continue != "", rem, rvErr == nil)
}

func (p *prober) exactListExpired(ctx context.Context, rv string) error {
	_, err := p.cms().List(ctx, metav1.ListOptions{ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return nil
	}
	return fmt.Errorf("exact list at %s: %v", rv, err)
}

// listOnce lists with the given query parameters and no retries.
func (p *prober) listOnce(ctx context.Context, params ...string) (*corev1.ConfigMapList, error) {
	req := p.cs.CoreV1().RESTClient().Get().Namespace(p.ns).Resource("configmaps").MaxRetries(0)
	for i := 0; i+1 < len(params); i += 2 {
		req = req.Param(params[i], params[i+1])
	}
	l := &corev1.ConfigMapList{}
	if err := req.Do(ctx).Into(l); err != nil {
		return nil, err
	}
	return l, nil
}

func cm(name string, data string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "parity"}},
		Data:       map[string]string{"k": data},
	}
}

// watchFacts reads events until stop says so or the wait ends, and
// describes them.
func watchFacts(w watch.Interface, wait time.Duration, stop func(ev watch.Event, n int) bool) string {
	defer w.Stop()
	var out []string
	timeout := time.After(wait)
	for n := 1; ; n++ {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return strings.Join(append(out, "closed"), ", ")
			}
			out = append(out, eventFact(ev))
			if stop(ev, n) {
				return strings.Join(out, ", ")
			}
		case <-timeout:
			return strings.Join(append(out, "(no more events)"), ", ")
		}
	}
}

func eventFact(ev watch.Event) string {
	switch o := ev.Object.(type) {
	case *corev1.ConfigMap:
		s := fmt.Sprintf("%s %s", ev.Type, o.Name)
		if ev.Type == watch.Bookmark {
			s = fmt.Sprintf("%s annotations=%v name=%q", ev.Type, o.Annotations, o.Name)
		} else if o.Data != nil {
			s += " k=" + o.Data["k"]
		}
		return s
	case *metav1.Status:
		return fmt.Sprintf("%s %s", ev.Type, statusFact(*o))
	}
	return fmt.Sprintf("%s %T", ev.Type, ev.Object)
}

func rvNum(rv string) uint64 {
	n, _ := strconv.ParseUint(rv, 10, 64)
	return n
}

// probe runs the sequence of operations against one server.
func probe(ctx context.Context, tg *target) ([]fact, error) {
	cfg := rest.CopyConfig(tg.cfg)
	cfg.UserAgent = "parity-probe/v1.0"
	cfg.Timeout = 30 * time.Second
	cfg.QPS, cfg.Burst = -1, 0
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	p := &prober{cs: cs, ns: "parity-probes", last: time.Now()}
	c := p.cms()

	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.ns}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create namespace: %w", err)
	}
	p.add("create namespace", fmt.Sprintf("labels=%v finalizers=%v phase=%s", ns.Labels, ns.Spec.Finalizers, ns.Status.Phase))

	// Create, read, update, patch, delete and their errors.
	a, err := c.Create(ctx, cm("a", "v1"), metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create a: %w", err)
	}
	p.add("create a", objFact(a))
	_, err = c.Create(ctx, cm("a", "again"), metav1.CreateOptions{})
	p.add("create a again", errFact(err))
	_, err = c.Get(ctx, "missing", metav1.GetOptions{})
	p.add("get missing", errFact(err))
	got, err := c.Get(ctx, "a", metav1.GetOptions{ResourceVersion: "0"})
	if err == nil {
		p.add("get a rv=0", objFact(got))
	} else {
		p.add("get a rv=0", errFact(err))
	}

	a2 := a.DeepCopy()
	a2.Data["k"] = "v2"
	a2, err = c.Update(ctx, a2, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("update a: %w", err)
	}
	p.add("update a", fmt.Sprintf("%s rv-grew=%t", objFact(a2), rvNum(a2.ResourceVersion) > rvNum(a.ResourceVersion)))
	stale := a.DeepCopy()
	stale.Data["k"] = "stale"
	_, err = c.Update(ctx, stale, metav1.UpdateOptions{})
	p.add("update a with a stale resourceVersion", errFact(err))
	same, err := c.Update(ctx, a2.DeepCopy(), metav1.UpdateOptions{})
	if err == nil {
		p.add("update a unchanged", fmt.Sprintf("rv-kept=%t", same.ResourceVersion == a2.ResourceVersion))
	} else {
		p.add("update a unchanged", errFact(err))
	}
	unc := a2.DeepCopy()
	unc.ResourceVersion = ""
	unc.Data["k"] = "v3"
	a3, err := c.Update(ctx, unc, metav1.UpdateOptions{})
	if err == nil {
		p.add("update a without resourceVersion", fmt.Sprintf("data=%v rv-grew=%t", a3.Data, rvNum(a3.ResourceVersion) > rvNum(a2.ResourceVersion)))
	} else {
		p.add("update a without resourceVersion", errFact(err))
	}
	_, err = c.Patch(ctx, "missing", types.MergePatchType, []byte(`{"data":{"k":"x"}}`), metav1.PatchOptions{})
	p.add("merge patch missing", errFact(err))
	pa, err := c.Patch(ctx, "a", types.MergePatchType, []byte(`{"data":{"m":"merge"}}`), metav1.PatchOptions{})
	if err == nil {
		p.add("merge patch a", fmt.Sprintf("data=%v managers=%d", pa.Data, len(pa.ManagedFields)))
	} else {
		p.add("merge patch a", errFact(err))
	}
	pa, err = c.Patch(ctx, "a", types.StrategicMergePatchType, []byte(`{"data":{"s":"strategic"}}`), metav1.PatchOptions{})
	if err == nil {
		p.add("strategic patch a", fmt.Sprintf("data=%v", pa.Data))
	} else {
		p.add("strategic patch a", errFact(err))
	}
	pa, err = c.Patch(ctx, "a", types.JSONPatchType, []byte(`[{"op":"replace","path":"/data/k","value":"json"}]`), metav1.PatchOptions{})
	if err == nil {
		p.add("json patch a", fmt.Sprintf("data=%v", pa.Data))
	} else {
		p.add("json patch a", errFact(err))
	}
	_, err = c.Patch(ctx, "a", types.JSONPatchType, []byte(`[{"op":"test","path":"/data/k","value":"nope"}]`), metav1.PatchOptions{})
	p.add("json patch a with a failing test", errFact(err))
	_, err = c.Patch(ctx, "a", types.MergePatchType, []byte(`{"data":`), metav1.PatchOptions{})
	p.add("merge patch a with bad JSON", errFact(err))
	_, err = c.Patch(ctx, "missing", types.JSONPatchType, []byte(`[{"op":`), metav1.PatchOptions{})
	p.add("json patch missing with bad JSON", errFact(err))
	_, err = c.Patch(ctx, "a", types.JSONPatchType, []byte(`{"op":"add"}`), metav1.PatchOptions{})
	p.add("json patch a that is not a list", errFact(err))
	_, err = c.Patch(ctx, "missing", types.JSONPatchType, []byte(`{"op":"add"}`), metav1.PatchOptions{})
	p.add("json patch missing that is not a list", errFact(err))
	_, err = c.Patch(ctx, "a", types.JSONPatchType, []byte(`[{"op":"remove","path":"/data/nope"}]`), metav1.PatchOptions{})
	p.add("json patch a removing a missing key", errFact(err))
	pa, err = c.Patch(ctx, "a", types.MergePatchType, []byte(`{"metadata":{"resourceVersion":"1"},"data":{"k":"rv"}}`), metav1.PatchOptions{})
	if err == nil {
		p.add("merge patch a with a stale resourceVersion", fmt.Sprintf("data=%v", pa.Data))
	} else {
		p.add("merge patch a with a stale resourceVersion", errFact(err))
	}

	err = c.Delete(ctx, "missing", metav1.DeleteOptions{})
	p.add("delete missing", errFact(err))
	wrongUID := types.UID("00000000-0000-0000-0000-000000000000")
	err = c.Delete(ctx, "a", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &wrongUID}})
	p.add("delete a with a wrong uid precondition", errFact(err))
	staleRV := a.ResourceVersion
	err = c.Delete(ctx, "a", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &staleRV}})
	p.add("delete a with a stale resourceVersion precondition", errFact(err))

	rc := cs.CoreV1().RESTClient()
	body := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"b","namespace":"` + p.ns + `"},"data":{"k":"v"}}`
	err = rc.Put().Namespace(p.ns).Resource("configmaps").Name("a").SetHeader("Content-Type", "application/json").Body([]byte(body)).Do(ctx).Error()
	p.add("put a with name b in the body", errFact(err))
	body = `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"other"},"data":{"k":"v"}}`
	err = rc.Put().Namespace(p.ns).Resource("configmaps").Name("a").SetHeader("Content-Type", "application/json").Body([]byte(body)).Do(ctx).Error()
	p.add("put a with another namespace in the body", errFact(err))
	_, err = cs.CoreV1().ConfigMaps("no-such-namespace").Create(ctx, cm("a", "v"), metav1.CreateOptions{})
	p.add("create in a missing namespace", errFact(err))
	_, err = c.Create(ctx, cm("Bad_Name", "v"), metav1.CreateOptions{})
	p.add("create with an invalid name", errFact(err))
	gen, err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "gen-"}}, metav1.CreateOptions{})
	if err == nil {
		p.add("create with generateName", fmt.Sprintf("prefix=%t len=%d generateName=%q", strings.HasPrefix(gen.Name, "gen-"), len(gen.Name), gen.GenerateName))
		if err := c.Delete(ctx, gen.Name, metav1.DeleteOptions{}); err != nil {
			return nil, fmt.Errorf("delete %s: %w", gen.Name, err)
		}
	} else {
		p.add("create with generateName", errFact(err))
	}

	// Lists: selectors, pagination, resourceVersion semantics.
	for _, n := range []string{"b", "c", "d", "e"} {
		if _, err := c.Create(ctx, cm(n, "v1"), metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create %s: %w", n, err)
		}
	}
	_, err = c.List(ctx, metav1.ListOptions{LabelSelector: "app in (parity"})
	p.add("list with a bad label selector", errFact(err))
	_, err = c.List(ctx, metav1.ListOptions{FieldSelector: "data.k=v1"})
	p.add("list with an unsupported field selector", errFact(err))
	_, err = cs.CoreV1().Secrets(p.ns).List(ctx, metav1.ListOptions{FieldSelector: "data.k=v1"})
	p.add("list secrets with an unsupported field selector", errFact(err))
	svcs, err := cs.CoreV1().Services(p.ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.type=ClusterIP,spec.clusterIP=10.0.0.1"})
	if err == nil {
		p.add("list services with field selectors spec.type, spec.clusterIP", fmt.Sprintf("items=%d", len(svcs.Items)))
	} else {
		p.add("list services with field selectors spec.type, spec.clusterIP", errFact(err))
	}
	_, err = c.Watch(ctx, metav1.ListOptions{ResourceVersion: "x"})
	p.add("watch rv=x", errFact(err))
	p.add("list with field selector metadata.name=c", listFact(c.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=c"})))
	p.add("list with label selector app!=parity", listFact(c.List(ctx, metav1.ListOptions{LabelSelector: "app!=parity"})))
	all, err := c.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	p.add("list", listFact(all, nil))
	opts := metav1.ListOptions{Limit: 2}
	for page := 1; ; page++ {
		l, err := c.List(ctx, opts)
		p.add(fmt.Sprintf("list limit=2 page %d", page), listFact(l, err))
		if err != nil || l.Continue == "" || page == 5 {
			break
		}
		opts.Continue = l.Continue
	}
	p.add("list limit=2 labelSelector=app=parity", listFact(c.List(ctx, metav1.ListOptions{Limit: 2, LabelSelector: "app=parity"})))
	p.add("list rv=0 limit=2", listFact(c.List(ctx, metav1.ListOptions{ResourceVersion: "0", Limit: 2})))
	p.add("list rv=N limit=2", listFact(c.List(ctx, metav1.ListOptions{ResourceVersion: all.ResourceVersion, Limit: 2})))
	p.add("list rv=N match=Exact", listFact(c.List(ctx, metav1.ListOptions{ResourceVersion: all.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchExact})))
	p.add("list rv=N match=NotOlderThan", listFact(c.List(ctx, metav1.ListOptions{ResourceVersion: all.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})))
	p.add("list match=Exact without rv", listFact(c.List(ctx, metav1.ListOptions{ResourceVersionMatch: metav1.ResourceVersionMatchExact})))
	p.add("list rv=0 match=Exact", listFact(c.List(ctx, metav1.ListOptions{ResourceVersion: "0", ResourceVersionMatch: metav1.ResourceVersionMatchExact})))
	p.add("list match=Bogus", listFact(c.List(ctx, metav1.ListOptions{ResourceVersion: all.ResourceVersion, ResourceVersionMatch: "Bogus"})))
	p.add("list rv=x", listFact(c.List(ctx, metav1.ListOptions{ResourceVersion: "x"})))
	future := strconv.FormatUint(rvNum(all.ResourceVersion)+1000, 10)
	// Without client-go's retries (it retries a 504 with Retry-After ten times).
	p.add("list rv=future", listFact(p.listOnce(ctx, "resourceVersion", future)))
	p.add("list rv=future match=Exact", listFact(p.listOnce(ctx, "resourceVersion", future, "resourceVersionMatch", "Exact")))
	p.add("list continue=garbage", listFact(c.List(ctx, metav1.ListOptions{Continue: "garbage", Limit: 2})))

	// Watches.
	base, err := c.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	w, err := c.Watch(ctx, metav1.ListOptions{ResourceVersion: base.ResourceVersion, AllowWatchBookmarks: true})
	if err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	if _, err := c.Create(ctx, cm("w", "v1"), metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if _, err := c.Patch(ctx, "w", types.MergePatchType, []byte(`{"data":{"k":"v2"}}`), metav1.PatchOptions{}); err != nil {
		return nil, err
	}
	if err := c.Delete(ctx, "w", metav1.DeleteOptions{}); err != nil {
		return nil, err
	}
	var lastRV, deletedRV uint64
	p.add("watch from a list's rv: create, patch, delete", watchFacts(w, 20*time.Second, func(ev watch.Event, n int) bool {
		if o, ok := ev.Object.(*corev1.ConfigMap); ok && ev.Type != watch.Bookmark {
			if ev.Type == watch.Deleted {
				deletedRV = rvNum(o.ResourceVersion)
			} else {
				lastRV = rvNum(o.ResourceVersion)
			}
		}
		return ev.Type == watch.Deleted || ev.Type == watch.Error
	}))
	p.add("the DELETED event carries the deletion's rv", fmt.Sprintf("%t", deletedRV > lastRV))

	w, err = c.Watch(ctx, metav1.ListOptions{LabelSelector: "app=parity", ResourceVersion: base.ResourceVersion})
	if err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	for _, patch := range []string{`{"metadata":{"labels":{"app":"other"}}}`, `{"data":{"k":"unseen"}}`, `{"metadata":{"labels":{"app":"parity"}}}`} {
		if _, err := c.Patch(ctx, "b", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return nil, err
		}
	}
	p.add("selector watch: b stops and starts matching", watchFacts(w, 20*time.Second, func(ev watch.Event, n int) bool {
		o, ok := ev.Object.(*corev1.ConfigMap)
		return ev.Type == watch.Error || (ok && o.Name == "b" && ev.Type == watch.Added)
	}))

	for _, wt := range []struct {
		op   string
		opts metav1.ListOptions
	}{
		{"watch sendInitialEvents=true", metav1.ListOptions{SendInitialEvents: ptr(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true}},
		{"watch rv=0", metav1.ListOptions{ResourceVersion: "0"}},
		{"watch sendInitialEvents=true without bookmarks", metav1.ListOptions{SendInitialEvents: ptr(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}},
		{"watch sendInitialEvents=true without match", metav1.ListOptions{SendInitialEvents: ptr(true), AllowWatchBookmarks: true}},
		{"watch sendInitialEvents=false match=NotOlderThan", metav1.ListOptions{SendInitialEvents: ptr(false), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true}},
		{"watch match=Exact", metav1.ListOptions{ResourceVersion: base.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchExact}},
		{"watch rv=future", metav1.ListOptions{ResourceVersion: future}},
	} {
		w, err := c.Watch(ctx, wt.opts)
		if err != nil {
			p.add(wt.op, "open: "+errFact(err))
			continue
		}
		want := len(base.Items)
		p.add(wt.op, watchFacts(w, 2*time.Second, func(ev watch.Event, n int) bool {
			return ev.Type == watch.Error || ev.Type == watch.Bookmark || (wt.opts.SendInitialEvents == nil && n == want)
		}))
	}

	// Compaction: exact lists and continue tokens from before it are
	// refused; a watch from before the server's window gets 410.
	before, err := c.List(ctx, metav1.ListOptions{Limit: 2})
	if err != nil {
		return nil, err
	}
	for i, k := range []string{"c1", "c2", "c3"} {
		if _, err := c.Patch(ctx, []string{"c", "d", "e"}[i], types.MergePatchType, []byte(`{"data":{"k":"`+k+`"}}`), metav1.PatchOptions{}); err != nil {
			return nil, err
		}
	}
	if err := tg.compact(ctx, p, before.ResourceVersion); err != nil {
		return nil, fmt.Errorf("compact: %w", err)
	}
	_, err = c.List(ctx, metav1.ListOptions{ResourceVersion: before.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	p.add("list match=Exact at a compacted rv", errFact(err))
	_, err = c.List(ctx, metav1.ListOptions{ResourceVersion: before.ResourceVersion, Limit: 2})
	p.add("list rv=N limit=2 at a compacted rv", errFact(err))
	_, err = c.List(ctx, metav1.ListOptions{Continue: before.Continue, Limit: 2})
	p.add("list with a compacted continue token", errFact(err))
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Continue != "" {
		l, err := c.List(ctx, metav1.ListOptions{Continue: st.Status().Continue, Limit: 10})
		p.add("list with the continue token of the 410", listFact(l, err))
	}
	p.add("list rv=N (not older than) at a compacted rv", listFact(c.List(ctx, metav1.ListOptions{ResourceVersion: before.ResourceVersion})))
	w, err = c.Watch(ctx, metav1.ListOptions{ResourceVersion: before.ResourceVersion})
	if err != nil {
		p.add("watch from a compacted rv", "open: "+errFact(err))
	} else {
		p.add("watch from a compacted rv", watchFacts(w, 10*time.Second, func(ev watch.Event, n int) bool { return n == 3 || ev.Type == watch.Error }))
	}
	return p.facts, nil
}

func ptr[T any](v T) *T { return &v }
