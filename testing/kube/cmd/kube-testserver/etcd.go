package main

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

type etcdServer struct {
	e         *embed.Etcd
	clientURL string
	errs      <-chan error
	logLevel  zap.AtomicLevel
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

	// Errors only, and none while closing: etcd reports each listener it
	// closes as an error, which would bury the reason for a failed start.
	logLevel := zap.NewAtomicLevelAt(zapcore.ErrorLevel)
	zcfg := zap.NewProductionConfig()
	zcfg.Level = logLevel
	zcfg.DisableStacktrace = true
	zcfg.OutputPaths = []string{"stderr"}
	zcfg.ErrorOutputPaths = []string{"stderr"}
	lg, err := zcfg.Build(zap.Fields(zap.String("component", "etcd")))
	if err != nil {
		return nil, err
	}
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)

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
		logLevel:  logLevel,
	}, nil
}

func (s *etcdServer) stop() {
	s.logLevel.SetLevel(zapcore.FatalLevel)
	s.e.Close()
}
