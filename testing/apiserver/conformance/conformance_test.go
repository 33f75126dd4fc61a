package conformance

import (
	"context"
	"flag"
	"io"
	"os"
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
