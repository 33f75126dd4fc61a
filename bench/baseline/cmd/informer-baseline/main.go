// Command informer-baseline runs the scenarios of bench/informer_benchmark.cc with a client-go
// SharedIndexInformer against the same testing/apiserver, one scenario per process, and prints
// the same JSON figures (for tools/bench_informer).
//
//	informer-baseline --kubeconfig K --resource configmaps --namespace N --mode sync
//
// --transform strip installs the usual managedFields-stripping transform; --streaming sets the
// WatchListClient feature gate (streaming lists) through KUBE_FEATURE_WatchListClient, which must
// be set before client-go reads it, so this program re-executes itself with it when needed.
//
// The informer is built through kubernetes.NewForConfig on client-go's defaults: its typed
// clients ask for protobuf for built-in types (Accept: application/vnd.kubernetes.protobuf,
// application/json; rest.Request.UseProtobufAsDefault, since client-go v0.37 the default of every
// typed client when the rest.Config sets neither ContentType nor AcceptContentTypes).
// --content-type=json sets ContentType application/json (Accept: application/json, */*) for the
// JSON rows. --metadata runs a metadata informer instead (k8s.io/client-go/metadata +
// metadatainformer: PartialObjectMetadata, asked for as
// application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1 with a JSON
// fallback). The output's response_content_types counts the Content-Types of the answers the
// informer got, so a run shows what it was served.
//
// Memory: --gomemlimit sets the Go runtime's soft memory limit (debug.SetMemoryLimit; the
// GOMEMLIMIT environment variable works as well, and is what the output's gomemlimit reports when
// the flag is not given). base_rss_kib is the RSS before the informer starts (after a GC), to be
// subtracted from the other RSS figures or shown next to them.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// contentTypes counts the Content-Types of the API's answers.
type contentTypes struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *contentTypes) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err == nil {
			c.mu.Lock()
			c.counts[resp.Header.Get("Content-Type")]++
			c.mu.Unlock()
		}
		return resp, err
	})
}

func (c *contentTypes) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// statusKiB reads a field of /proc/self/status ("VmRSS:", "VmHWM:") in KiB.
func statusKiB(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		if strings.HasPrefix(line, field) {
			v, _ := strconv.ParseInt(strings.Fields(line[len(field):])[0], 10, 64)
			return v
		}
	}
	return 0
}

func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

func cpuSeconds() float64 {
	var u syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &u)
	return float64(u.Utime.Sec) + float64(u.Utime.Usec)/1e6 + float64(u.Stime.Sec) + float64(u.Stime.Usec)/1e6
}

func steadyRSSKiB() int64 {
	runtime.GC()
	debug.FreeOSMemory()
	return statusKiB("VmRSS:")
}

type counter struct {
	adds, updates, deletes  atomic.Int64
	firstUpdate, lastUpdate atomic.Int64
}

func (c *counter) handlers() cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) { c.adds.Add(1) },
		UpdateFunc: func(_, _ interface{}) {
			n := c.updates.Add(1)
			now := time.Now().UnixNano()
			if n == 1 {
				c.firstUpdate.Store(now)
			}
			c.lastUpdate.Store(now)
		},
		DeleteFunc: func(obj interface{}) { c.deletes.Add(1) },
	}
}

// stripManagedFields is the usual client-go transform (as in controller-runtime's
// TransformStripManagedFields): drop metadata.managedFields before the object is stored.
func stripManagedFields(obj interface{}) (interface{}, error) {
	if accessor, err := meta.Accessor(obj); err == nil {
		accessor.SetManagedFields(nil)
	}
	return obj, nil
}

// control calls the fake server's /_fake endpoint (unauthenticated) next to the API.
func control(host, method, path, body string) (string, error) {
	req, err := http.NewRequest(method, strings.TrimSuffix(host, "/")+path, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return "", fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return string(b), nil
}

func waitFor(pred func() bool, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for !pred() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

// parseMemLimit reads a limit as GOMEMLIMIT spells it: bytes, or a number with B, KiB, MiB, GiB
// or TiB.
func parseMemLimit(s string) (int64, error) {
	units := []struct {
		suffix string
		shift  uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}
	shift := uint(0)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, shift = strings.TrimSuffix(s, u.suffix), u.shift
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64>>shift {
		return 0, fmt.Errorf("%q is not a size like 512MiB", s)
	}
	return n << shift, nil
}

// newInformer builds the informer: typed (kubernetes.NewForConfig and the shared informer
// factory) or metadata-only (metadata.NewForConfig and the metadata informer factory). start
// starts its factory.
func newInformer(config *rest.Config, resource, namespace string, strip, metadataOnly bool) (cache.SharedIndexInformer, func(stop <-chan struct{})) {
	if metadataOnly {
		client, err := metadata.NewForConfig(config)
		if err != nil {
			fail("metadata client: %v", err)
		}
		var tweak metadatainformer.TweakListOptionsFunc
		factory := metadatainformer.NewFilteredSharedInformerFactory(client, 0, namespace, tweak)
		informer := factory.ForResource(schema.GroupVersionResource{Version: "v1", Resource: resource}).Informer()
		if strip {
			if err := informer.SetTransform(stripManagedFields); err != nil {
				fail("transform: %v", err)
			}
		}
		return informer, factory.Start
	}
	clientset, err := kubernetes.NewForConfig(config)
	if err != nil {
		fail("clientset: %v", err)
	}
	opts := []informers.SharedInformerOption{informers.WithNamespace(namespace)}
	if strip {
		opts = append(opts, informers.WithTransform(stripManagedFields))
	}
	factory := informers.NewSharedInformerFactoryWithOptions(clientset, 0, opts...)
	var informer cache.SharedIndexInformer
	if resource == "pods" {
		informer = factory.Core().V1().Pods().Informer()
	} else {
		informer = factory.Core().V1().ConfigMaps().Informer()
	}
	return informer, factory.Start
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the fake server")
	resource := flag.String("resource", "configmaps", "configmaps or pods")
	namespace := flag.String("namespace", "", "namespace to watch")
	mode := flag.String("mode", "sync", "sync, ingest or relist")
	transform := flag.String("transform", "strip", "strip (TransformStripManagedFields) or none")
	streaming := flag.Bool("streaming", true, "WatchListClient (streaming list)")
	events := flag.Int("events", 100000, "ingest: updates to replay")
	holdMs := flag.Int("hold_ms", 15000, "ingest: how long the watch is held while updates are made")
	contentType := flag.String("content-type", "protobuf", "protobuf (client-go's default for built-in types: the rest.Config is left as it is) or json")
	metadataOnly := flag.Bool("metadata", false, "a metadata informer (PartialObjectMetadata, protobuf) instead of a typed one")
	memLimit := flag.String("gomemlimit", "", "the Go runtime's soft memory limit (e.g. 512MiB); default: GOMEMLIMIT or none")
	flag.Parse()
	if *contentType != "protobuf" && *contentType != "json" {
		fail("--content-type must be protobuf or json")
	}
	if *metadataOnly && *contentType != "protobuf" {
		fail("--metadata asks for protobuf PartialObjectMetadata (with a JSON fallback) whatever --content-type says: leave it at protobuf")
	}
	if *memLimit != "" {
		n, err := parseMemLimit(*memLimit)
		if err != nil {
			fail("--gomemlimit: %v", err)
		}
		debug.SetMemoryLimit(n)
	}

	gate := strconv.FormatBool(*streaming)
	if os.Getenv("KUBE_FEATURE_WatchListClient") != gate {
		// client-go reads feature gates once, early: start again with the gate set.
		cmd := exec.Command(os.Args[0], os.Args[1:]...)
		cmd.Env = append(os.Environ(), "KUBE_FEATURE_WatchListClient="+gate)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			if e, ok := err.(*exec.ExitError); ok {
				os.Exit(e.ExitCode())
			}
			fail("re-exec: %v", err)
		}
		return
	}

	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail("kubeconfig: %v", err)
	}
	userAgent := "client-go-bench-" + *mode
	config.UserAgent = userAgent
	config.QPS, config.Burst = 1000, 1000
	if *contentType == "json" {
		config.ContentType = "application/json"
	}
	served := &contentTypes{counts: map[string]int{}}
	config.Wrap(served.wrap)
	if *resource != "configmaps" && *resource != "pods" {
		fail("unknown resource %q", *resource)
	}

	rssBefore := steadyRSSKiB()
	cpu0 := cpuSeconds()
	t0 := time.Now()
	informer, start := newInformer(config, *resource, *namespace, *transform == "strip", *metadataOnly)
	c := &counter{}
	registration, err := informer.AddEventHandler(c.handlers())
	if err != nil {
		fail("handler: %v", err)
	}
	stop := make(chan struct{})
	start(stop)
	if !cache.WaitForCacheSync(stop, informer.HasSynced, registration.HasSynced) {
		fail("not synced")
	}
	syncSeconds := time.Since(t0).Seconds()
	syncCPU := cpuSeconds() - cpu0
	peak := statusKiB("VmHWM:")
	time.Sleep(500 * time.Millisecond)
	steady := steadyRSSKiB()
	objects := len(informer.GetStore().ListKeys())

	out := map[string]interface{}{
		"side": "client-go", "mode": *mode, "resource": *resource, "transform": *transform,
		"streaming": *streaming, "content_type": *contentType, "metadata": *metadataOnly,
		"gomemlimit": debug.SetMemoryLimit(-1), "objects": objects, "sync_seconds": syncSeconds,
		"sync_cpu_seconds": syncCPU, "peak_rss_kib": peak, "steady_rss_kib": steady,
		"base_rss_kib": rssBefore,
	}
	host := config.Host
	// Lists (and streaming lists) the server has answered: an ingestion run must not include one.
	lists := func() int64 {
		body, err := control(host, "GET", "/_fake/stats", "")
		if err != nil {
			return -1
		}
		var s struct {
			Lists      int64 `json:"lists"`
			WatchLists int64 `json:"watchLists"`
		}
		_ = json.Unmarshal([]byte(body), &s)
		return s.Lists + s.WatchLists
	}
	switch *mode {
	case "ingest":
		// As in bench/informer_benchmark.cc: closing a watch younger than a second that saw no
		// events makes the reflector relist ("very short watch").
		time.Sleep(1500 * time.Millisecond)
		if _, err := control(host, "POST", "/_fake/faults", fmt.Sprintf(`{"type":"stall","verb":"watch","durationMs":%d,"userAgent":%q}`, *holdMs, userAgent)); err != nil {
			fail("%v", err)
		}
		if _, err := control(host, "POST", "/_fake/faults", fmt.Sprintf(`{"type":"close-watches","namespace":%q}`, *namespace)); err != nil {
			fail("%v", err)
		}
		listsBefore := lists()
		churnStart := time.Now()
		if _, err := control(host, "POST", "/_fake/churn", fmt.Sprintf(`{"resource":%q,"namespace":%q,"ops":%d,"wait":true}`, *resource, *namespace, *events)); err != nil {
			fail("%v", err)
		}
		churnSeconds := time.Since(churnStart).Seconds()
		cpuBefore := cpuSeconds()
		if !waitFor(func() bool { return c.updates.Load() >= int64(*events) }, 10*time.Minute) {
			fail("only %d of %d updates arrived", c.updates.Load(), *events)
		}
		seconds := float64(c.lastUpdate.Load()-c.firstUpdate.Load()) / 1e9
		out["ingest_events"] = *events
		out["ingest_seconds"] = seconds
		out["ingest_events_per_second"] = float64(*events-1) / seconds
		out["ingest_cpu_seconds"] = cpuSeconds() - cpuBefore
		out["churn_seconds"] = churnSeconds
		// Anything but 0 means the updates arrived through a relist, not the watch.
		out["ingest_relists"] = lists() - listsBefore
	case "relist":
		before := lists()
		resetPeakRSS()
		cpuBefore := cpuSeconds()
		start := time.Now()
		if _, err := control(host, "POST", "/_fake/faults", fmt.Sprintf(`{"type":"gone","verb":"watch","userAgent":%q}`, userAgent)); err != nil {
			fail("%v", err)
		}
		if _, err := control(host, "POST", "/_fake/faults", fmt.Sprintf(`{"type":"close-watches","namespace":%q}`, *namespace)); err != nil {
			fail("%v", err)
		}
		if !waitFor(func() bool { return lists() > before }, 2*time.Minute) {
			fail("no relist")
		}
		// Settled: RSS unchanged for a second.
		last := statusKiB("VmRSS:")
		for stable := 0; stable < 10; {
			time.Sleep(100 * time.Millisecond)
			now := statusKiB("VmRSS:")
			if now == last {
				stable++
			} else {
				stable = 0
			}
			last = now
		}
		relistPeak := statusKiB("VmHWM:")
		out["relist_seconds"] = time.Since(start).Seconds()
		out["relist_cpu_seconds"] = cpuSeconds() - cpuBefore
		out["relist_peak_rss_kib"] = relistPeak
		out["relist_peak_over_steady"] = float64(relistPeak) / float64(steady)
	}
	close(stop)
	out["response_content_types"] = served.snapshot()
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}
