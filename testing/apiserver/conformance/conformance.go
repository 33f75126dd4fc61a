// Package conformance is an informer scenario that any Kubernetes API server
// must pass: a client-go SharedInformer syncs many ConfigMaps, follows
// creates, updates and deletes while faults are injected, and after each
// quiet period its cache equals the server's state (same keys,
// resourceVersions and UIDs).
//
// Run takes a *rest.Config, so the same scenario runs against the fake API
// server (with an Injector that arms its faults) and against a real
// kube-apiserver (with no faults, or an Injector of its own).
package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// FaultSpec is one fault as the fake API server's control endpoint takes it
// (POST /_fake/faults). The Injector fills in Namespace and UserAgent so that
// only the informer under test is hit.
type FaultSpec struct {
	Type              string `json:"type"`
	Resource          string `json:"resource,omitempty"`
	Namespace         string `json:"namespace,omitempty"`
	Verb              string `json:"verb,omitempty"`
	UserAgent         string `json:"userAgent,omitempty"`
	Count             int    `json:"count,omitempty"`
	AfterEvents       int    `json:"afterEvents,omitempty"`
	Mode              string `json:"mode,omitempty"`
	RetryAfterSeconds int    `json:"retryAfterSeconds,omitempty"`
	BytesPerSecond    int    `json:"bytesPerSecond,omitempty"`
	DurationMs        int    `json:"durationMs,omitempty"`
	Message           string `json:"message,omitempty"`
}

// Fault is one step of the scenario: its Specs are injected in order, then
// a share of the changes is applied, then the After specs are injected, and
// the cache must converge.
type Fault struct {
	Name  string
	Specs []FaultSpec
	After []FaultSpec
}

// Target says whom a fault is for.
type Target struct {
	Namespace string
	UserAgent string // the informer's User-Agent
}

// Injector injects faults into the server under test.
type Injector interface {
	// Inject arms or performs one fault for target.
	Inject(ctx context.Context, target Target, spec FaultSpec) error
	// Disarm removes the faults armed for target that did not trigger and
	// returns how many there were.
	Disarm(ctx context.Context, target Target) (int, error)
}

// Options configure Run.
type Options struct {
	// Namespace to use; created if missing. Default: a random "conformance-" name.
	Namespace string
	// Objects is the number of ConfigMaps synced at start (default 10000).
	Objects int
	// Changes is the number of creates, updates and deletes made while the
	// informer runs, spread over the faults (default 1000).
	Changes int
	// Workers create the initial objects in parallel (default 16).
	Workers int
	// Informers run side by side over the same objects, each with its own
	// client (User-Agent) and faults; client-go backs off per reflector, so
	// spreading faults over several informers keeps the run short. Empty:
	// one informer without faults.
	Informers []InformerOptions
	// Injector injects the faults; required when an informer has faults.
	Injector Injector
	// StallTimeout tears down a watch stream on which no byte arrived for
	// that long (client-go itself has no such timeout; informerd does). It
	// must exceed the server's bookmark interval. 0: off.
	StallTimeout time.Duration
	// ConvergeTimeout bounds each wait for the cache to equal the server
	// (default 2 minutes).
	ConvergeTimeout time.Duration
	// KeepNamespace leaves the namespace and its objects behind; by default
	// Run deletes the namespace when it returns.
	KeepNamespace bool
	// Seed makes the changes reproducible: two runs with the same Seed,
	// Objects, Changes and number of steps make the same creates, updates
	// and deletes of the same objects with the same data, in the same order,
	// whatever the server. 0: a seed from the clock.
	Seed uint64
	// Logf receives progress lines.
	Logf func(format string, args ...any)
}

// InformerOptions describe one informer of the scenario.
type InformerOptions struct {
	// Name is part of the informer's User-Agent ("conformance-<name>/<namespace>").
	Name string
	// WatchListClient, when set, overrides client-go's WatchListClient feature
	// gate for this informer (streaming list vs list+watch).
	WatchListClient *bool
	// Faults are injected one per step, in order.
	Faults []Fault
}

// StepResult is the outcome of one fault step for one informer.
type StepResult struct {
	Informer string
	Fault    string
	// Converged is how long the cache took to equal the server after the
	// fault and the step's changes.
	Converged time.Duration
	// Untriggered counts armed faults that the informer never hit.
	Untriggered int
}

// Result summarises a run. Besides timings it holds what a client can
// observe, so that runs against different servers can be compared: the
// changes made, the final state, and per informer the notifications its
// event handler received and the requests its reflector sent.
type Result struct {
	Namespace   string
	InitialSync time.Duration // until every informer had synced
	Steps       []StepResult
	Changes     int
	FinalKeys   int
	// Ops are the changes made after the initial sync, by kind.
	Ops OpCounts
	// FinalDigest is a SHA-256 over the final objects' names, labels and
	// data (not resourceVersions, UIDs or timestamps), in name order.
	FinalDigest string
	// Informers holds one entry per informer, in the order of Options.Informers.
	Informers []InformerResult
}

// OpCounts counts the changes made by the scenario.
type OpCounts struct {
	Creates, Updates, Deletes int
}

// InformerResult is what one informer observed.
type InformerResult struct {
	Name string
	// Events are the notifications its event handler received, up to the
	// moment the handler's view equalled the cache at the end of the run.
	Events EventCounts
	// Requests are the API requests its reflector sent, in order, each as
	// "LIST" or "WATCH" with the query parameters that carry semantics
	// (resourceVersion as "", "0" or "N"; limit; continue present;
	// sendInitialEvents; resourceVersionMatch; allowWatchBookmarks), then
	// the HTTP status or the transport error's kind.
	Requests []string
}

// EventCounts counts an informer's handler notifications.
type EventCounts struct {
	InitialAdds int // OnAdd during the first sync (isInInitialList)
	Adds        int // OnAdd afterwards
	Updates     int // OnUpdate to a new resourceVersion
	Resyncs     int // OnUpdate with an unchanged resourceVersion (relist or resync)
	Deletes     int // OnDelete of the object
	Tombstones  int // OnDelete of a DeletedFinalStateUnknown (found missing by a relist)
}

func (o *Options) defaults() {
	if o.Objects == 0 {
		o.Objects = 10000
	}
	if o.Changes == 0 {
		o.Changes = 1000
	}
	if o.Workers == 0 {
		o.Workers = 16
	}
	if o.ConvergeTimeout == 0 {
		o.ConvergeTimeout = 2 * time.Minute
	}
	if o.Namespace == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		o.Namespace = "conformance-" + hex.EncodeToString(b[:])
	}
	if len(o.Informers) == 0 {
		o.Informers = []InformerOptions{{Name: "informer"}}
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
}

// Run executes the scenario. It returns an error when an informer's cache
// does not converge to the server's state.
func Run(ctx context.Context, cfg *rest.Config, opts Options) (*Result, error) {
	opts.defaults()
	steps := 1
	for _, io := range opts.Informers {
		if len(io.Faults) > 0 && opts.Injector == nil {
			return nil, errors.New("faults need an Injector")
		}
		steps = max(steps, len(io.Faults))
	}
	res := &Result{Namespace: opts.Namespace}
	admin, err := adminClient(cfg)
	if err != nil {
		return nil, err
	}
	ns := opts.Namespace
	err = retry(ctx, func() error {
		_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		return err
	})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create namespace: %w", err)
	}
	if !opts.KeepNamespace {
		// Registered first, so it runs after the informers have stopped.
		defer func() {
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			began := time.Now()
			err := admin.CoreV1().Namespaces().Delete(dctx, ns, metav1.DeleteOptions{})
			if err != nil {
				opts.Logf("delete namespace %s: %v", ns, err)
			} else {
				opts.Logf("deleted namespace %s in %v", ns, time.Since(began).Round(time.Millisecond))
			}
		}()
	}
	seed := opts.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	ch := &changer{cs: admin, ns: ns, logf: opts.Logf, rng: mrand.New(mrand.NewPCG(seed, 7))}
	start := time.Now()
	if err := ch.createInitial(ctx, opts.Objects, opts.Workers); err != nil {
		return nil, err
	}
	opts.Logf("created %d ConfigMaps in %v", opts.Objects, time.Since(start).Round(time.Millisecond))

	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	start = time.Now()
	var infs []*informer
	for _, io := range opts.Informers {
		inf, err := startInformer(ictx, cfg, ns, io, opts.StallTimeout)
		if err != nil {
			return res, err
		}
		defer inf.factory.Shutdown()
		infs = append(infs, inf)
	}
	defer cancel()
	if err := converge(ctx, admin, ns, infs, opts.ConvergeTimeout); err != nil {
		return res, fmt.Errorf("initial sync: %w", err)
	}
	res.InitialSync = time.Since(start)
	opts.Logf("%d informers synced %d objects in %v", len(infs), opts.Objects, res.InitialSync.Round(time.Millisecond))

	for i := 0; i < steps; i++ {
		n := opts.Changes / steps
		if i == steps-1 {
			n = opts.Changes - res.Changes
		}
		stepStart := time.Now()
		for _, inf := range infs {
			if i >= len(inf.opts.Faults) {
				continue
			}
			f := inf.opts.Faults[i]
			for _, spec := range f.Specs {
				if err := opts.Injector.Inject(ctx, inf.target, spec); err != nil {
					return res, fmt.Errorf("%s: fault %s: inject %s: %w", inf.opts.Name, f.Name, spec.Type, err)
				}
			}
		}
		if err := ch.apply(ctx, n); err != nil {
			return res, fmt.Errorf("step %d: changes: %w", i, err)
		}
		res.Changes += n
		for _, inf := range infs {
			if i >= len(inf.opts.Faults) {
				continue
			}
			f := inf.opts.Faults[i]
			for _, spec := range f.After {
				if err := opts.Injector.Inject(ctx, inf.target, spec); err != nil {
					return res, fmt.Errorf("%s: fault %s: inject %s: %w", inf.opts.Name, f.Name, spec.Type, err)
				}
			}
		}
		if err := converge(ctx, admin, ns, infs, opts.ConvergeTimeout); err != nil {
			return res, fmt.Errorf("step %d: %w", i, err)
		}
		took := time.Since(stepStart)
		for _, inf := range infs {
			if i >= len(inf.opts.Faults) {
				continue
			}
			sr := StepResult{Informer: inf.opts.Name, Fault: inf.opts.Faults[i].Name, Converged: took}
			if sr.Untriggered, err = opts.Injector.Disarm(ctx, inf.target); err != nil {
				return res, err
			}
			res.Steps = append(res.Steps, sr)
			opts.Logf("step %d %-14s %-24s converged in %v (untriggered faults: %d)", i, inf.opts.Name, sr.Fault, took.Round(time.Millisecond), sr.Untriggered)
		}
		opts.Logf("step %d: %d changes, all caches equal the server after %v", i, n, took.Round(time.Millisecond))
	}
	keys, err := serverState(ctx, admin, ns)
	if err != nil {
		return res, err
	}
	res.FinalKeys = len(keys)
	res.Ops = ch.ops
	if res.FinalDigest, err = digest(ctx, admin, ns); err != nil {
		return res, err
	}
	for _, inf := range infs {
		// Handlers are notified after the cache is updated: wait until each
		// handler has seen the cache's final state before taking its counts.
		if err := inf.waitHandler(ctx, opts.ConvergeTimeout); err != nil {
			return res, err
		}
		res.Informers = append(res.Informers, InformerResult{Name: inf.opts.Name, Events: inf.handler.counts(), Requests: inf.requests.list()})
	}
	return res, nil
}

// informer is one running SharedInformer of the scenario.
type informer struct {
	opts     InformerOptions
	target   Target
	factory  informers.SharedInformerFactory
	inf      cache.SharedIndexInformer
	handler  *countingHandler
	requests *requestLog
}

func startInformer(ctx context.Context, cfg *rest.Config, ns string, io InformerOptions, stall time.Duration) (*informer, error) {
	icfg := rest.CopyConfig(cfg)
	icfg.UserAgent = "conformance-" + io.Name + "/" + ns
	icfg.QPS, icfg.Burst = -1, 0
	requests := &requestLog{}
	{
		prev := icfg.WrapTransport
		icfg.WrapTransport = func(rt httpRoundTripper) httpRoundTripper {
			if prev != nil {
				rt = prev(rt)
			}
			return &recordingTransport{next: rt, log: requests}
		}
	}
	if stall > 0 {
		prev := icfg.WrapTransport
		icfg.WrapTransport = func(rt httpRoundTripper) httpRoundTripper {
			if prev != nil {
				rt = prev(rt)
			}
			return &idleTimeoutTransport{next: rt, idle: stall}
		}
	}
	ics, err := kubernetes.NewForConfig(icfg)
	if err != nil {
		return nil, err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(ics, 0, informers.WithNamespace(ns))
	inf := &informer{opts: io, target: Target{Namespace: ns, UserAgent: icfg.UserAgent}, factory: factory,
		inf: factory.Core().V1().ConfigMaps().Informer(), handler: newCountingHandler(), requests: requests}
	if _, err := inf.inf.AddEventHandler(inf.handler); err != nil {
		return nil, err
	}
	if err := startWithGate(ctx, io.WatchListClient, factory, inf.inf); err != nil {
		return nil, err
	}
	return inf, nil
}

func adminClient(cfg *rest.Config) (*kubernetes.Clientset, error) {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = -1, 0
	if c.UserAgent == "" {
		c.UserAgent = "conformance-admin"
	}
	return kubernetes.NewForConfig(c)
}

// version is what the comparison looks at.
type version struct {
	RV  string
	UID types.UID
}

func serverState(ctx context.Context, cs kubernetes.Interface, ns string) (map[string]version, error) {
	out := map[string]version{}
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
				out = map[string]version{}
				opts.Continue = ""
				continue
			}
			return nil, err
		}
		for i := range list.Items {
			it := &list.Items[i]
			out[it.Namespace+"/"+it.Name] = version{it.ResourceVersion, it.UID}
		}
		if list.Continue == "" {
			return out, nil
		}
		opts.Continue = list.Continue
	}
}

func cacheState(inf cache.SharedIndexInformer) map[string]version {
	out := map[string]version{}
	for _, o := range inf.GetStore().List() {
		c := o.(*corev1.ConfigMap)
		out[c.Namespace+"/"+c.Name] = version{c.ResourceVersion, c.UID}
	}
	return out
}

// diff describes how the cache differs from the server ("" when equal).
func diff(server, cached map[string]version) string {
	var missing, extra, stale []string
	for k, v := range server {
		c, ok := cached[k]
		switch {
		case !ok:
			missing = append(missing, k)
		case c != v:
			stale = append(stale, fmt.Sprintf("%s (cache %s/%s, server %s/%s)", k, c.RV, c.UID, v.RV, v.UID))
		}
	}
	for k := range cached {
		if _, ok := server[k]; !ok {
			extra = append(extra, k)
		}
	}
	if len(missing)+len(extra)+len(stale) == 0 {
		return ""
	}
	sort.Strings(missing)
	sort.Strings(extra)
	sort.Strings(stale)
	clip := func(s []string) []string {
		if len(s) > 5 {
			return append(s[:5:5], "...")
		}
		return s
	}
	return fmt.Sprintf("%d missing %v, %d extra %v, %d stale %v", len(missing), clip(missing), len(extra), clip(extra), len(stale), clip(stale))
}

// converge waits until every informer's cache equals the server's state.
func converge(ctx context.Context, cs kubernetes.Interface, ns string, infs []*informer, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		last = ""
		server, err := serverState(ctx, cs, ns)
		if err != nil {
			return err
		}
		for _, inf := range infs {
			if !inf.inf.HasSynced() {
				last = inf.opts.Name + ": has not synced"
				break
			}
			if d := diff(server, cacheState(inf.inf)); d != "" {
				last = inf.opts.Name + ": " + d
				break
			}
		}
		if last == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cache did not converge in %v: %s", timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// retry retries transient failures (refused connections, 429, 5xx) of the
// admin client for a while: the faults may hit it too (refused connections).
func retry(ctx context.Context, f func() error) error {
	var err error
	for i := 0; i < 100; i++ {
		if err = f(); err == nil || !transient(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return err
}

func transient(err error) bool {
	if apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) || apierrors.IsInvalid(err) ||
		apierrors.IsResourceExpired(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
		return false
	}
	return true
}

// changer makes the changes, tracking which objects exist (it is the only
// writer in its namespace).
type changer struct {
	cs   kubernetes.Interface
	ns   string
	logf func(string, ...any)

	rng  *mrand.Rand // used by apply only (one goroutine)
	ops  OpCounts

	mu    sync.Mutex
	names []string // existing objects, in a deterministic order
	seq   atomic.Int64
}

func configMap(name string, v int64) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "conformance", "bucket": strconv.FormatInt(v%7, 10)}},
		Data:       map[string]string{"v": strconv.FormatInt(v, 10), "note": "informer conformance object"},
	}
}

func (c *changer) createInitial(ctx context.Context, n, workers int) error {
	jobs := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				name := fmt.Sprintf("cm-%06d", i)
				err := retry(ctx, func() error {
					_, err := c.cs.CoreV1().ConfigMaps(c.ns).Create(ctx, configMap(name, int64(i)), metav1.CreateOptions{})
					return err
				})
				if err != nil && !apierrors.IsAlreadyExists(err) {
					errs <- fmt.Errorf("create %s: %w", name, err)
					return
				}
				c.mu.Lock()
				c.names = append(c.names, name)
				c.mu.Unlock()
			}
		}()
	}
	var err error
loop:
	for i := 0; i < n; i++ {
		select {
		case jobs <- i:
		case err = <-errs:
			break loop
		}
	}
	close(jobs)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	c.seq.Store(int64(n))
	// The workers finish in any order; the changes pick objects by index.
	sort.Strings(c.names)
	return err
}

// apply makes n changes: about a third each of creates, updates and deletes.
func (c *changer) apply(ctx context.Context, n int) error {
	rng := c.rng
	for i := 0; i < n; i++ {
		c.mu.Lock()
		op := rng.IntN(3)
		if len(c.names) == 0 {
			op = 0
		}
		var name string
		var idx int
		if op != 0 {
			idx = rng.IntN(len(c.names))
			name = c.names[idx]
		}
		c.mu.Unlock()
		var err error
		switch op {
		case 0:
			s := c.seq.Add(1)
			name = fmt.Sprintf("cm-%06d", s)
			err = retry(ctx, func() error {
				_, err := c.cs.CoreV1().ConfigMaps(c.ns).Create(ctx, configMap(name, s), metav1.CreateOptions{})
				return err
			})
			if apierrors.IsAlreadyExists(err) {
				err = nil
			}
			if err == nil {
				c.mu.Lock()
				c.names = append(c.names, name)
				c.mu.Unlock()
				c.ops.Creates++
			}
		case 1:
			patch := []byte(fmt.Sprintf(`{"data":{"v":"%d"}}`, rng.Int64()))
			err = retry(ctx, func() error {
				_, err := c.cs.CoreV1().ConfigMaps(c.ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
				return err
			})
			if err == nil {
				c.ops.Updates++
			}
		case 2:
			err = retry(ctx, func() error {
				return c.cs.CoreV1().ConfigMaps(c.ns).Delete(ctx, name, metav1.DeleteOptions{})
			})
			if apierrors.IsNotFound(err) { // a retried delete that had succeeded
				err = nil
			}
			if err == nil {
				c.mu.Lock()
				for j, x := range c.names {
					if x == name {
						c.names[j] = c.names[len(c.names)-1]
						c.names = c.names[:len(c.names)-1]
						break
					}
				}
				c.mu.Unlock()
				c.ops.Deletes++
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}
