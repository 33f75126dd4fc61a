package conformance

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

	"informerd/testing/apiserver/server"
)

func TestMain(m *testing.M) {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	klog.SetOutput(io.Discard) // client-go warns about every injected fault
	os.Exit(m.Run())
}

func restConfigFor(srv *server.Server) *rest.Config {
	return &rest.Config{
		Host:            srv.URL(),
		BearerToken:     srv.Token(),
		TLSClientConfig: rest.TLSClientConfig{CAData: srv.CAPEM()},
	}
}

// TestSharedInformerSurvivesEveryFaultOfTheFakeServer runs client-go
// SharedInformers (streaming list and list+watch) against the fake API
// server over TLS: 10k ConfigMaps, 1k changes, every fault of the plans, and
// after each step every cache equals the server (keys, RVs, UIDs). The
// server-wide faults run against a second server in parallel, so that they
// do not add to the per-informer faults' client-go backoff.
func TestSharedInformerSurvivesEveryFaultOfTheFakeServer(t *testing.T) {
	for _, tc := range []struct {
		name string
		plan []InformerOptions
	}{
		{"request-and-stream-faults", FakeServerPlan()},
		{"connection-faults", ConnectionFaultPlan()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runAgainstFake(t, tc.plan)
		})
	}
}

func runAgainstFake(t *testing.T, plan []InformerOptions) {
	srv, err := server.New(server.Options{Addr: "127.0.0.1:0", TLS: true, BookmarkInterval: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cfg := restConfigFor(srv)
	inj, err := NewFakeInjector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg, Options{
		Objects:      10000,
		Changes:      1000,
		Informers:    plan,
		Injector:     inj,
		StallTimeout: 2 * time.Second, // > the 500ms bookmark interval
		Logf:         t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Changes != 1000 || res.FinalKeys < 9000 {
		t.Fatalf("result %+v", res)
	}
	for _, s := range res.Steps {
		if s.Untriggered != 0 {
			t.Errorf("%s: fault %s armed but never hit (%d left)", s.Informer, s.Fault, s.Untriggered)
		}
	}
	st := srv.Stats()
	t.Logf("server: %d requests, %d lists, %d watches (%d streaming lists), %d events sent, %d faults hit",
		st.Requests, st.Lists, st.WatchesTotal, st.WatchLists, st.EventsSent, st.FaultsHit)
	if st.WatchLists == 0 {
		t.Error("no informer used a streaming list (sendInitialEvents)")
	}
}

// TestSameSeedSameObservations runs the fault-free scenario twice against
// fresh fake servers with one Seed: the changes, the final state, the event
// handlers' notifications and the reflectors' requests are the same, and
// the notifications match the changes one for one.
func TestSameSeedSameObservations(t *testing.T) {
	run := func() *Result {
		srv, err := server.New(server.Options{Addr: "127.0.0.1:0", TLS: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		res, err := Run(ctx, restConfigFor(srv), Options{
			Namespace: "seeded", Objects: 300, Changes: 200, Seed: 42,
			Informers: []InformerOptions{{Name: "wl", WatchListClient: bptr(true)}, {Name: "lw", WatchListClient: bptr(false)}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	a, b := run(), run()
	if a.Ops != b.Ops || a.FinalDigest != b.FinalDigest || a.FinalKeys != b.FinalKeys {
		t.Fatalf("same seed, different changes: %+v %s %d vs %+v %s %d", a.Ops, a.FinalDigest, a.FinalKeys, b.Ops, b.FinalDigest, b.FinalKeys)
	}
	if a.Ops.Creates+a.Ops.Updates+a.Ops.Deletes != 200 || a.FinalKeys != 300+a.Ops.Creates-a.Ops.Deletes {
		t.Fatalf("ops %+v, final keys %d", a.Ops, a.FinalKeys)
	}
	want := EventCounts{InitialAdds: 300, Adds: a.Ops.Creates, Updates: a.Ops.Updates, Deletes: a.Ops.Deletes}
	for _, r := range []*Result{a, b} {
		if len(r.Informers) != 2 {
			t.Fatalf("informer results %+v", r.Informers)
		}
		for _, ir := range r.Informers {
			if ir.Events != want {
				t.Errorf("%s: events %+v, want %+v", ir.Name, ir.Events, want)
			}
		}
	}
	if got := a.Informers[0].Requests; len(got) == 0 || got[0] != `WATCH resourceVersionMatch=NotOlderThan sendInitialEvents=true allowWatchBookmarks=true timeoutSeconds -> 200` {
		t.Errorf("streaming-list informer's requests: %q", got)
	}
	if got := a.Informers[1].Requests; len(got) < 2 || got[0] != `LIST rv="0" limit=500 -> 200` || !strings.HasPrefix(got[1], "WATCH rv=N") {
		t.Errorf("list+watch informer's requests: %q", got)
	}
	for i := range a.Informers {
		if fmt.Sprint(a.Informers[i].Requests) != fmt.Sprint(b.Informers[i].Requests) {
			t.Errorf("%s: requests differ between runs: %q vs %q", a.Informers[i].Name, a.Informers[i].Requests, b.Informers[i].Requests)
		}
	}
}
