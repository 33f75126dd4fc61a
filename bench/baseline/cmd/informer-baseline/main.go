// Command informer-baseline runs the scenarios of bench/informer_benchmark.cc with a client-go
// SharedIndexInformer against the same testing/apiserver, one scenario per process, and prints
// the same JSON figures (for tools/bench_informer).
//
//	informer-baseline --kubeconfig K --resource configmaps --namespace N --mode sync
//
// --transform strip installs the usual managedFields-stripping transform; --streaming sets the
// WatchListClient feature gate (streaming lists) through KUBE_FEATURE_WatchListClient, which must
// be set before client-go reads it, so this program re-executes itself with it when needed.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

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

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the fake server")
	resource := flag.String("resource", "configmaps", "configmaps or pods")
	namespace := flag.String("namespace", "", "namespace to watch")
	mode := flag.String("mode", "sync", "sync, ingest or relist")
	transform := flag.String("transform", "strip", "strip (TransformStripManagedFields) or none")
	streaming := flag.Bool("streaming", true, "WatchListClient (streaming list)")
	events := flag.Int("events", 100000, "ingest: updates to replay")
	holdMs := flag.Int("hold_ms", 15000, "ingest: how long the watch is held while updates are made")
	flag.Parse()

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
	clientset := kubernetes.NewForConfigOrDie(config)

	rssBefore := statusKiB("VmRSS:")
	cpu0 := cpuSeconds()
	t0 := time.Now()
	opts := []informers.SharedInformerOption{informers.WithNamespace(*namespace)}
	if *transform == "strip" {
		opts = append(opts, informers.WithTransform(stripManagedFields))
	}
	factory := informers.NewSharedInformerFactoryWithOptions(clientset, 0, opts...)
	var informer cache.SharedIndexInformer
	switch *resource {
	case "configmaps":
		informer = factory.Core().V1().ConfigMaps().Informer()
	case "pods":
		informer = factory.Core().V1().Pods().Informer()
	default:
		fail("unknown resource %q", *resource)
	}
	c := &counter{}
	registration, err := informer.AddEventHandler(c.handlers())
	if err != nil {
		fail("handler: %v", err)
	}
	stop := make(chan struct{})
	factory.Start(stop)
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
		"streaming": *streaming, "objects": objects, "sync_seconds": syncSeconds,
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
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}
