package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"k8s.io/client-go/rest"
)

// FakeInjector injects faults through the fake API server's control
// endpoint (/_fake/faults), scoped to the target's namespace and User-Agent.
type FakeInjector struct {
	base string
	hc   *http.Client
}

// NewFakeInjector talks to the control endpoint of the server cfg points at.
func NewFakeInjector(cfg *rest.Config) (*FakeInjector, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return &FakeInjector{base: strings.TrimSuffix(cfg.Host, "/"), hc: hc}, nil
}

func (f *FakeInjector) call(ctx context.Context, method, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	var lastErr error
	for attempt := 0; attempt < 50; attempt++ { // the server may be refusing connections
		if rd != nil {
			rd.(*bytes.Reader).Seek(0, io.SeekStart)
		}
		req, err := http.NewRequestWithContext(ctx, method, f.base+path, rd)
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := f.hc.Do(req)
		if err != nil {
			lastErr = err
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-timeAfter100ms():
			}
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		if out != nil {
			return json.Unmarshal(b, out)
		}
		return nil
	}
	return lastErr
}

// Inject implements Injector.
func (f *FakeInjector) Inject(ctx context.Context, target Target, spec FaultSpec) error {
	spec.Namespace = target.Namespace
	spec.UserAgent = target.UserAgent
	return f.call(ctx, http.MethodPost, "/_fake/faults", spec, nil)
}

// Disarm implements Injector.
func (f *FakeInjector) Disarm(ctx context.Context, target Target) (int, error) {
	var out struct {
		Cleared int `json:"cleared"`
	}
	err := f.call(ctx, http.MethodDelete, "/_fake/faults?userAgent="+url.QueryEscape(target.UserAgent), nil, &out)
	return out.Cleared, err
}

func bptr(b bool) *bool { return &b }

var closeWatches = FaultSpec{Type: "close-watches", Resource: "configmaps"}

func onWatch(spec FaultSpec) Fault {
	spec.Verb = "watch"
	spec.Resource = "configmaps"
	return Fault{Name: "watch-" + spec.Type + suffix(spec), Specs: []FaultSpec{spec, closeWatches}}
}

func onList(spec FaultSpec) Fault {
	spec.Verb = "list"
	spec.Resource = "configmaps"
	// A 410 on the watch makes the reflector list again.
	return Fault{Name: "list-" + spec.Type, Specs: []FaultSpec{spec, {Type: "gone", Verb: "watch", Resource: "configmaps"}, closeWatches}}
}

func suffix(s FaultSpec) string {
	switch {
	case s.Mode != "":
		return "-" + s.Mode
	case s.AfterEvents > 0:
		return "-mid-stream"
	}
	return ""
}

// FakeServerPlan is the fault plan for the fake API server: every fault
// listed in its README, spread over informers in both client-go modes
// (streaming list and list+watch) so that no reflector accumulates a long
// backoff (client-go's grows for two minutes). Faults that act on the whole
// server are in ConnectionFaultPlan, to be run against another server.
func FakeServerPlan() []InformerOptions {
	stream := []Fault{
		{Name: "watch-close", Specs: []FaultSpec{closeWatches}},
		{Name: "watch-close-after-events", Specs: []FaultSpec{{Type: "close-watches", Resource: "configmaps", AfterEvents: 20}}},
		onWatch(FaultSpec{Type: "truncate", AfterEvents: 5}),
		onWatch(FaultSpec{Type: "slow", BytesPerSecond: 64 << 10}),
		onWatch(FaultSpec{Type: "stall", DurationMs: 60000}),
	}
	gone := []Fault{
		onWatch(FaultSpec{Type: "gone"}),
		onWatch(FaultSpec{Type: "gone", Mode: "status"}),
	}
	errs := []Fault{
		onWatch(FaultSpec{Type: "too-many-requests", RetryAfterSeconds: 1}),
		onWatch(FaultSpec{Type: "internal-error"}),
	}
	breaks := []Fault{
		onWatch(FaultSpec{Type: "internal-error", AfterEvents: 10}),
		onWatch(FaultSpec{Type: "garbage", AfterEvents: 5}),
		onWatch(FaultSpec{Type: "gone", AfterEvents: 10}),
	}
	lists1 := []Fault{
		onList(FaultSpec{Type: "gone"}),
		onList(FaultSpec{Type: "truncate"}),
	}
	lists2 := []Fault{
		onList(FaultSpec{Type: "internal-error"}),
		onList(FaultSpec{Type: "too-many-requests", RetryAfterSeconds: 1}),
	}
	// Compaction: the informer's next watch stalls (until the client's stall
	// timeout), changes are made, the history is compacted, so the informer
	// resumes from a compacted resourceVersion and must relist. It is done by
	// the stream informers only: compaction does not end open watches, so the
	// others are not disturbed.
	compaction := Fault{Name: "compaction",
		Specs: []FaultSpec{{Type: "stall", Verb: "watch", Resource: "configmaps", DurationMs: 60000}, closeWatches},
		After: []FaultSpec{{Type: "compact"}}}
	stream = append(stream, compaction)
	steps := max(len(stream), len(gone), len(errs), len(breaks), len(lists1), len(lists2))
	with := func(fs []Fault) []Fault {
		out := append([]Fault(nil), fs...)
		for len(out) < steps {
			out = append(out, Fault{Name: "none"})
		}
		return out
	}
	return []InformerOptions{
		{Name: "watchlist-stream", WatchListClient: bptr(true), Faults: with(stream)},
		{Name: "watchlist-gone", WatchListClient: bptr(true), Faults: with(gone)},
		{Name: "watchlist-errors", WatchListClient: bptr(true), Faults: with(errs)},
		{Name: "watchlist-breaks", WatchListClient: bptr(true), Faults: with(breaks)},
		{Name: "listwatch-stream", WatchListClient: bptr(false), Faults: with(stream)},
		{Name: "listwatch-gone", WatchListClient: bptr(false), Faults: with(gone)},
		{Name: "listwatch-errors", WatchListClient: bptr(false), Faults: with(errs)},
		{Name: "listwatch-breaks", WatchListClient: bptr(false), Faults: with(breaks)},
		{Name: "listwatch-lists1", WatchListClient: bptr(false), Faults: with(lists1)},
		{Name: "listwatch-lists2", WatchListClient: bptr(false), Faults: with(lists2)},
	}
}

// ConnectionFaultPlan is the plan of faults that act on the whole server
// (connection resets, refused connections), for one informer of each
// client-go mode. Run it against its own server: these faults end every
// watch of every client, and would add to the backoff of FakeServerPlan's
// informers.
func ConnectionFaultPlan() []InformerOptions {
	first := []Fault{
		{Name: "connection-reset", Specs: []FaultSpec{{Type: "reset-connections"}}},
		{Name: "refused-connections", Specs: []FaultSpec{{Type: "refuse", DurationMs: 1000}}},
	}
	others := []Fault{{Name: "connection-reset (shared)"}, {Name: "refused-connections (shared)"}}
	return []InformerOptions{
		{Name: "watchlist-conn", WatchListClient: bptr(true), Faults: first},
		{Name: "listwatch-conn", WatchListClient: bptr(false), Faults: others},
	}
}
