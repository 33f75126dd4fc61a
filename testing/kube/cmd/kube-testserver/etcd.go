package main

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

type etcdServer struct {
	e         *embed.Etcd
	clientURL string
	errs      <-chan error
}

// startEtcd starts a single-member etcd on loopback. Both listeners bind
// port 0, so the kernel picks free ports and nothing can race for them;
// the apiserver is pointed at the client listener's actual address.
func startEtcd(ctx context.Context, dataDir string, quotaBytes int64) (*etcdServer, error) {
	cfg := embed.NewConfig()
	cfg.Name = "kube-testserver"
	cfg.Dir = dataDir
	loopback := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls = []url.URL{loopback}
	cfg.AdvertiseClientUrls = []url.URL{loopback}
	cfg.ListenPeerUrls = []url.URL{loopback}
	cfg.AdvertisePeerUrls = []url.URL{loopback}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.InitialClusterToken = "kube-testserver"

	// Keep the footprint small: this etcd holds a test cluster's objects.
	cfg.QuotaBackendBytes = quotaBytes
	cfg.SnapshotCount = 5000
	cfg.MaxSnapFiles = 1
	cfg.MaxWalFiles = 1
	// Throw-away data: skipping fsync makes writes (and so tests) faster.
	cfg.UnsafeNoFsync = true
	// Auto-compaction stays off (the default): the apiserver compacts etcd
	// itself (--etcd-compaction-interval).
	cfg.EnableGRPCGateway = false
	cfg.ListenMetricsUrls = nil
	cfg.Metrics = "basic"

	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{"stderr"}

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd failed while starting: %w", err)
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("etcd not ready within 60s")
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
	if len(e.Clients) == 0 {
		e.Close()
		return nil, fmt.Errorf("etcd has no client listener")
	}
	return &etcdServer{
		e:         e,
		clientURL: "http://" + e.Clients[0].Addr().String(),
		errs:      e.Err(),
	}, nil
}

func (s *etcdServer) stop() {
	s.e.Close()
}
