// Command workqueue-baseline runs the shapes of bench/workqueue_benchmark.cc against
// client-go's workqueue (and the Priority* shapes against controller-runtime's priorityqueue,
// its default queue since v0.23) and prints keys/s per shape as JSON, for tools/bench_table.py.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
)

const batch = 10000

var keys = func() []string {
	k := make([]string, 1000000)
	for i := range k {
		k[i] = fmt.Sprintf("namespace-%d/object-%d", i%50, i)
	}
	return k
}()

func newQueue() workqueue.TypedInterface[string] {
	return workqueue.NewTyped[string]()
}

func drain(q workqueue.TypedInterface[string]) {
	for q.Len() > 0 {
		k, _ := q.Get()
		q.Done(k)
	}
}

// Add of distinct keys (no dedup), batch at a time.
func benchAdd(b *testing.B) {
	q := newQueue()
	for n := 0; n < b.N; n++ {
		for i := 0; i < batch; i++ {
			q.Add(keys[i])
		}
		b.StopTimer()
		drain(q)
		b.StartTimer()
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "keys/s")
}

// Get then Done of batch waiting keys.
func benchGetDone(b *testing.B) {
	q := newQueue()
	for n := 0; n < b.N; n++ {
		b.StopTimer()
		for i := 0; i < batch; i++ {
			q.Add(keys[i])
		}
		b.StartTimer()
		for i := 0; i < batch; i++ {
			k, _ := q.Get()
			q.Done(k)
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "keys/s")
}

// One producer adds batch*10 distinct keys while one consumer Gets and Dones them.
func benchContendedAddGet(b *testing.B) {
	const total = batch * 10
	for n := 0; n < b.N; n++ {
		q := newQueue()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done := 0; done < total; done++ {
				k, _ := q.Get()
				q.Done(k)
			}
		}()
		for i := 0; i < total; i++ {
			q.Add(keys[i])
		}
		wg.Wait()
		q.ShutDown()
	}
	b.ReportMetric(float64(b.N*total)/b.Elapsed().Seconds(), "keys/s")
}

// 1M AddAfter with random delays up to 10 ms, then Get+Done of all of them.
func benchAddAfterDrain1M(b *testing.B) {
	const total = 1000000
	rng := rand.New(rand.NewSource(1))
	delays := make([]time.Duration, total)
	for i := range delays {
		delays[i] = time.Duration(rng.Intn(10000)) * time.Microsecond
	}
	for n := 0; n < b.N; n++ {
		q := workqueue.NewTypedDelayingQueue[string]()
		for i := 0; i < total; i++ {
			q.AddAfter(keys[i], delays[i])
		}
		for i := 0; i < total; i++ {
			k, _ := q.Get()
			q.Done(k)
		}
		q.ShutDown()
	}
	b.ReportMetric(float64(b.N*total)/b.Elapsed().Seconds(), "keys/s")
}

// client-go has no GetBatch: 128 Gets in a row, then Done of each, over batch waiting keys.
func benchGetBatch128(b *testing.B) {
	q := newQueue()
	got := make([]string, 0, 128)
	for n := 0; n < b.N; n++ {
		b.StopTimer()
		for i := 0; i < batch; i++ {
			q.Add(keys[i])
		}
		b.StartTimer()
		for done := 0; done < batch; {
			got = got[:0]
			for j := 0; j < 128 && done+len(got) < batch; j++ {
				k, _ := q.Get()
				got = append(got, k)
			}
			for _, k := range got {
				q.Done(k)
			}
			done += len(got)
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "keys/s")
}

// The five priorities of the Priority* shapes, as in controller-runtime's
// TestHighPriorityItemsAreReturnedBeforeLowPriorityItemMultipleTimes.
var priorities = []int{10, 5, 0, -5, -10}

// noMetrics: both sides run the priority shapes without metrics (informerd's queue records none
// without a provider), so the rows compare the same work.
type noMetrics struct{}

type noGauge struct{}

func (noGauge) Inc()        {}
func (noGauge) Dec()        {}
func (noGauge) Set(float64) {}

type noHistogram struct{}

func (noHistogram) Observe(float64) {}

func (noMetrics) NewDepthMetric(string) workqueue.GaugeMetric            { return noGauge{} }
func (noMetrics) NewAddsMetric(string) workqueue.CounterMetric           { return noGauge{} }
func (noMetrics) NewLatencyMetric(string) workqueue.HistogramMetric      { return noHistogram{} }
func (noMetrics) NewWorkDurationMetric(string) workqueue.HistogramMetric { return noHistogram{} }
func (noMetrics) NewRetriesMetric(string) workqueue.CounterMetric        { return noGauge{} }
func (noMetrics) NewUnfinishedWorkSecondsMetric(string) workqueue.SettableGaugeMetric {
	return noGauge{}
}
func (noMetrics) NewLongestRunningProcessorSecondsMetric(string) workqueue.SettableGaugeMetric {
	return noGauge{}
}

func newPriorityQueue() priorityqueue.PriorityQueue[string] {
	return priorityqueue.New[string]("bench", func(o *priorityqueue.Opts[string]) {
		o.MetricProvider = noMetrics{}
	})
}

// Add of distinct keys at five priorities in turn, batch at a time.
func benchPriorityAdd(b *testing.B) {
	q := newPriorityQueue()
	defer q.ShutDown()
	for n := 0; n < b.N; n++ {
		for i := 0; i < batch; i++ {
			p := priorities[i%len(priorities)]
			q.AddWithOpts(priorityqueue.AddOpts{Priority: &p}, keys[i])
		}
		b.StopTimer()
		for q.Len() > 0 {
			k, _ := q.Get()
			q.Done(k)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "keys/s")
}

// GetWithPriority then Done of batch keys waiting at five priorities.
func benchPriorityGetDone(b *testing.B) {
	q := newPriorityQueue()
	defer q.ShutDown()
	for n := 0; n < b.N; n++ {
		b.StopTimer()
		for i := 0; i < batch; i++ {
			p := priorities[i%len(priorities)]
			q.AddWithOpts(priorityqueue.AddOpts{Priority: &p}, keys[i])
		}
		b.StartTimer()
		for i := 0; i < batch; i++ {
			k, _, _ := q.GetWithPriority()
			q.Done(k)
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "keys/s")
}

type row struct {
	Name  string  `json:"name"`
	Unit  string  `json:"unit"`
	Value float64 `json:"value"`
}

func main() {
	only := flag.String("only", "", "run only the shape with this name")
	flag.Parse()
	shapes := []struct {
		name string
		fn   func(*testing.B)
	}{
		{"Add", benchAdd},
		{"GetDone", benchGetDone},
		{"ContendedAddGet", benchContendedAddGet},
		{"AddAfterDrain1M", benchAddAfterDrain1M},
		{"GetBatch128", benchGetBatch128},
		{"PriorityAdd", benchPriorityAdd},
		{"PriorityGetDone", benchPriorityGetDone},
	}
	var rows []row
	for _, s := range shapes {
		if *only != "" && *only != s.name {
			continue
		}
		r := testing.Benchmark(s.fn)
		rows = append(rows, row{Name: s.name, Unit: "keys/s", Value: r.Extra["keys/s"]})
		fmt.Fprintf(os.Stderr, "baseline %-16s %12.0f keys/s (%d runs)\n", s.name, r.Extra["keys/s"], r.N)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(map[string]any{"rows": rows}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
