// Package parity runs the same client-go scenario against the fake API
// server (testing/apiserver) and the real kube-apiserver (testing/kube) and
// checks that what a client can observe agrees: the fault-free conformance
// scenario (SharedInformers sync, follow seeded changes and converge), and a
// fixed sequence of API operations whose outcomes (objects' server fields,
// error codes, reasons, details and messages, pagination, watch events,
// 410s after compaction) must be the same.
package parity

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"informerd/testing/apiserver/conformance"
	"informerd/testing/apiserver/server"
	"informerd/testing/kube/kubetest"
)

func TestMain(m *testing.M) {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	klog.SetOutput(io.Discard)
	os.Exit(m.Run())
}

// target is one server under test.
type target struct {
	name string
	cfg  *rest.Config
	// compact makes every resourceVersion up to rv unusable for exact lists
	// and continue tokens (etcd compaction), and returns once that is
	// visible through the API.
	compact func(ctx context.Context, p *prober, rv string) error
	// registerCRD makes the widgets custom resource (content_test.go) exist.
	registerCRD func(ctx context.Context, c *rawClient) error
}

// startFake starts the fake API server in-process, over TLS like the real one.
func startFake(t *testing.T) *target {
	srv, err := server.New(server.Options{Addr: "127.0.0.1:0", TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	cfg := &rest.Config{Host: srv.URL(), BearerToken: srv.Token(), TLSClientConfig: rest.TLSClientConfig{CAData: srv.CAPEM()}}
	return &target{name: "fake", cfg: cfg, compact: func(ctx context.Context, p *prober, rv string) error {
		// Storage compaction only: the real server's watch cache keeps its
		// history when etcd compacts.
		_, err := srv.InjectFault(server.FaultSpec{Type: server.FaultCompact, Mode: "etcd"})
		return err
	}, registerCRD: func(context.Context, *rawClient) error {
		return srv.RegisterResource(server.ResourceDef{Group: crdGroup, Version: "v1", Resource: "widgets", Kind: "Widget",
			ListKind: "WidgetList", Singular: "widget", Namespaced: true, CustomResource: true, Generation: server.GenerationNonMetadata})
	}}
}

// compactionInterval is the real server's --etcd-compaction-interval: etcd
// compacts every interval up to the revision of the previous interval, and
// the watch cache picks the compacted revision up within 15 s.
const compactionInterval = 3 * time.Second

func startReal(t *testing.T) *target {
	s := kubetest.Start(t, "--", fmt.Sprintf("--etcd-compaction-interval=%v", compactionInterval))
	cfg := kubetest.RESTConfig(t, s.Kubeconfig)
	return &target{name: "real", cfg: cfg, registerCRD: createCRD, compact: func(ctx context.Context, p *prober, rv string) error {
		// Wait until an exact list at rv is refused.
		ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		for {
			if err := p.exactListExpired(ctx, rv); err == nil {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("resourceVersion %s not compacted after 90s", rv)
			case <-time.After(500 * time.Millisecond):
			}
		}
	}}
}

// scenario is the fault-free conformance scenario, the same for both servers.
func scenario(t *testing.T) conformance.Options {
	t.Helper()
	wl, lw := true, false
	return conformance.Options{
		Namespace: "parity-scenario",
		Objects:   10000,
		Changes:   1000,
		Seed:      20370602,
		Informers: []conformance.InformerOptions{
			{Name: "watchlist", WatchListClient: &wl},
			{Name: "listwatch", WatchListClient: &lw},
		},
		ConvergeTimeout: 90 * time.Second,
		Logf:            t.Logf,
	}
}

func TestFakeAndRealAgree(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real kube-apiserver")
	}
	// Both servers live for the whole test; the real one is stopped in the
	// cleanup whatever happens.
	targets := []*target{startReal(t), startFake(t)}

	// Each part runs on one server, then the other (they share two cores).
	t.Run("scenario", func(t *testing.T) {
		results := map[string]*conformance.Result{}
		for _, tg := range targets {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			began := time.Now()
			opts := scenario(t)
			opts.Logf = func(format string, args ...any) { t.Logf(tg.name+": "+format, args...) }
			res, err := conformance.Run(ctx, tg.cfg, opts)
			cancel()
			if err != nil {
				t.Fatalf("%s: scenario: %v", tg.name, err)
			}
			t.Logf("%s: scenario took %v: ops %+v, final keys %d", tg.name, time.Since(began).Round(time.Millisecond), res.Ops, res.FinalKeys)
			for _, ir := range res.Informers {
				t.Logf("%s: %s: events %+v, requests %q", tg.name, ir.Name, ir.Events, ir.Requests)
			}
			results[tg.name] = res
		}
		compareScenario(t, scenario(t), results["real"], results["fake"])
	})

	t.Run("content", func(t *testing.T) { runProbes(t, targets, "content probes", time.Minute, contentProbes) })
	t.Run("probes", func(t *testing.T) { runProbes(t, targets, "probes", 3*time.Minute, probe) })
}

// runProbes runs a probe sequence on each server in turn and compares the facts.
func runProbes(t *testing.T, targets []*target, what string, timeout time.Duration, run func(context.Context, *target) ([]fact, error)) {
	facts := map[string][]fact{}
	for _, tg := range targets {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		began := time.Now()
		fs, err := run(ctx, tg)
		cancel()
		if err != nil {
			t.Fatalf("%s: %s: %v", tg.name, what, err)
		}
		t.Logf("%s: %d %s took %v", tg.name, len(fs), what, time.Since(began).Round(time.Millisecond))
		facts[tg.name] = fs
	}
	compareFacts(t, facts["real"], facts["fake"])
}

// compareScenario checks that both runs made the same changes, reached the
// same state, notified the same events and sent the same requests.
func compareScenario(t *testing.T, opts conformance.Options, real, fake *conformance.Result) {
	t.Helper()
	if real.Ops != fake.Ops {
		t.Errorf("changes made: real %+v, fake %+v", real.Ops, fake.Ops)
	}
	if real.FinalKeys != fake.FinalKeys || real.FinalDigest != fake.FinalDigest {
		t.Errorf("final state: real %d objects (%s), fake %d objects (%s)", real.FinalKeys, real.FinalDigest[:12], fake.FinalKeys, fake.FinalDigest[:12])
	}
	if got := real.Ops.Creates + real.Ops.Updates + real.Ops.Deletes; got != opts.Changes {
		t.Errorf("real: %d changes made, want %d", got, opts.Changes)
	}
	want := conformance.EventCounts{InitialAdds: opts.Objects, Adds: real.Ops.Creates, Updates: real.Ops.Updates, Deletes: real.Ops.Deletes}
	if len(real.Informers) != len(opts.Informers) || len(fake.Informers) != len(opts.Informers) {
		t.Fatalf("informer results: real %d, fake %d, want %d", len(real.Informers), len(fake.Informers), len(opts.Informers))
	}
	for i := range opts.Informers {
		r, f := real.Informers[i], fake.Informers[i]
		if r.Events != f.Events {
			t.Errorf("%s: handler notifications: real %+v, fake %+v", r.Name, r.Events, f.Events)
		}
		if r.Events != want {
			t.Errorf("%s: real server: handler notifications %+v, want one per change %+v", r.Name, r.Events, want)
		}
		// A watch the server ends early is resumed from the last
		// resourceVersion: that does not change what the client sees, and
		// either server may do it; leave such resumptions out.
		rq, fq := withoutResumptions(r.Requests), withoutResumptions(f.Requests)
		if strings.Join(rq, "\n") != strings.Join(fq, "\n") {
			t.Errorf("%s: reflector requests differ:\nreal: %q\nfake: %q", r.Name, rq, fq)
		}
	}
}

// withoutResumptions drops the watches from a resourceVersion that follow
// another watch: the reflector resuming a watch that ended. Lists, streaming
// lists and the watch that follows a list stay.
func withoutResumptions(reqs []string) []string {
	var out []string
	for _, r := range reqs {
		if strings.HasPrefix(r, "WATCH rv=N ") && len(out) > 0 && strings.HasPrefix(out[len(out)-1], "WATCH ") {
			continue
		}
		out = append(out, r)
	}
	return out
}

func compareFacts(t *testing.T, real, fake []fact) {
	t.Helper()
	byOp := map[string]fact{}
	for _, f := range fake {
		byOp[f.Op] = f
	}
	for _, r := range real {
		f, ok := byOp[r.Op]
		if !ok {
			t.Errorf("%s: no fake result", r.Op)
			continue
		}
		if r.Got != f.Got {
			t.Errorf("%s (real %v, fake %v):\n  real: %s\n  fake: %s", r.Op, r.Took.Round(time.Millisecond), f.Took.Round(time.Millisecond), r.Got, f.Got)
		} else {
			t.Logf("same (real %v, fake %v): %s: %s", r.Took.Round(time.Millisecond), f.Took.Round(time.Millisecond), r.Op, r.Got)
		}
	}
	if len(real) != len(fake) {
		t.Errorf("real server: %d probes, fake: %d", len(real), len(fake))
	}
}
