// Command kube-testserver runs a real kube-apiserver (k8s.io/kubernetes
// cmd/kube-apiserver/app, in-process) backed by an embedded etcd, both on
// loopback, for informerd's integration tests.
//
// Everything it needs (serving CA and certificate, service-account key,
// static token file, etcd data) lives in a private temporary directory that
// is removed when the process exits on SIGINT or SIGTERM. Once /readyz
// answers "ok" and the "default" namespace exists it writes an admin
// kubeconfig (user "admin", group system:masters) and, optionally, one for
// an unprivileged user (user "unprivileged", no RBAC bindings beyond the
// built-in discovery roles), then the ready file.
//
// Arguments after "--" are appended to the kube-apiserver flags, so a later
// flag of the same name overrides the defaults chosen here.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

type config struct {
	kubeconfigOut             string
	unprivilegedKubeconfigOut string
	readyFile                 string
	workDir                   string
	port                      int
	etcdQuotaBytes            int64
	readyTimeout              time.Duration
	shutdownTimeout           time.Duration
	verbosity                 int
	extraAPIServerFlags       []string
}

func parseFlags(args []string) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("kube-testserver", flag.ContinueOnError)
	fs.StringVar(&c.kubeconfigOut, "kubeconfig-out", "", "write the admin kubeconfig here once the server is ready (required)")
	fs.StringVar(&c.unprivilegedKubeconfigOut, "unprivileged-kubeconfig-out", "", "write the unprivileged user's kubeconfig here once the server is ready")
	fs.StringVar(&c.readyFile, "ready-file", "", "write 'pid port' here once the server is ready and the kubeconfigs are written")
	fs.StringVar(&c.workDir, "work-dir", "", "parent of the private temporary directory (default: $TMPDIR)")
	fs.IntVar(&c.port, "port", 0, "kube-apiserver secure port on 127.0.0.1 (0: an ephemeral port)")
	fs.Int64Var(&c.etcdQuotaBytes, "etcd-quota-bytes", 256<<20, "etcd backend quota in bytes")
	fs.DurationVar(&c.readyTimeout, "ready-timeout", 3*time.Minute, "give up if the server is not ready within this time")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 30*time.Second, "on SIGINT/SIGTERM, wait at most this long for a graceful stop")
	fs.IntVar(&c.verbosity, "v", 0, "kube-apiserver log verbosity (klog -v)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: kube-testserver --kubeconfig-out PATH [flags] [-- kube-apiserver flags...]\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	c.extraAPIServerFlags = fs.Args()
	if c.kubeconfigOut == "" {
		fs.Usage()
		return nil, fmt.Errorf("--kubeconfig-out is required")
	}
	for _, p := range []*string{&c.kubeconfigOut, &c.unprivilegedKubeconfigOut, &c.readyFile} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return nil, err
		}
		*p = abs
	}
	return c, nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "kube-testserver: %v\n", err)
		os.Exit(2)
	}
	os.Exit(run(cfg))
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kube-testserver: "+format+"\n", args...)
}

func run(cfg *config) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	dir, err := os.MkdirTemp(cfg.workDir, "kube-testserver-")
	if err != nil {
		logf("create temp dir: %v", err)
		return 1
	}
	cleanup := func() {
		if err := os.RemoveAll(dir); err != nil {
			logf("remove %s: %v", dir, err)
		}
		if cfg.readyFile != "" {
			_ = os.Remove(cfg.readyFile)
		}
	}
	// A second signal while shutting down skips the graceful stop but still
	// removes the temporary directory.
	go func() {
		<-ctx.Done()
		stop()
		hard := make(chan os.Signal, 1)
		signal.Notify(hard, syscall.SIGINT, syscall.SIGTERM)
		select {
		case <-hard:
			logf("second signal: exiting without graceful shutdown")
		case <-time.After(cfg.shutdownTimeout):
			logf("graceful shutdown took longer than %v: exiting", cfg.shutdownTimeout)
		}
		cleanup()
		os.Exit(1)
	}()

	code := serve(ctx, cfg, dir)
	cleanup()
	return code
}

func serve(ctx context.Context, cfg *config, dir string) int {
	start := time.Now()

	pki, err := generatePKI(dir)
	if err != nil {
		logf("generate certificates and keys: %v", err)
		return 1
	}

	etcd, err := startEtcd(ctx, filepath.Join(dir, "etcd"), cfg.etcdQuotaBytes)
	if err != nil {
		logf("start etcd: %v", err)
		return 1
	}
	defer etcd.stop()
	logf("etcd ready at %s after %v", etcd.clientURL, time.Since(start).Round(time.Millisecond))

	apiserverCtx, cancelAPIServer := context.WithCancel(ctx)
	defer cancelAPIServer()
	srv, err := startAPIServer(apiserverCtx, apiserverParams{
		dir:        dir,
		port:       cfg.port,
		etcdURL:    etcd.clientURL,
		pki:        pki,
		verbosity:  cfg.verbosity,
		extraFlags: cfg.extraAPIServerFlags,
	})
	if err != nil {
		logf("start kube-apiserver: %v", err)
		return 1
	}

	readyCtx, cancelReady := context.WithTimeout(ctx, cfg.readyTimeout)
	err = waitReady(readyCtx, srv.url, pki, srv.done)
	cancelReady()
	if err != nil {
		logf("kube-apiserver did not become ready: %v", err)
		if srv.err != nil {
			logf("kube-apiserver error: %v", srv.err)
		}
		cancelAPIServer()
		<-srv.done
		return 1
	}

	if err := writeKubeconfig(cfg.kubeconfigOut, srv.url, pki.caPEM, "admin", pki.adminToken); err != nil {
		logf("write kubeconfig: %v", err)
		return 1
	}
	if cfg.unprivilegedKubeconfigOut != "" {
		if err := writeKubeconfig(cfg.unprivilegedKubeconfigOut, srv.url, pki.caPEM, "unprivileged", pki.unprivilegedToken); err != nil {
			logf("write kubeconfig: %v", err)
			return 1
		}
	}
	if cfg.readyFile != "" {
		content := fmt.Sprintf("%d %d\n", os.Getpid(), srv.port)
		if err := writeFileAtomic(cfg.readyFile, []byte(content), 0o644); err != nil {
			logf("write ready file: %v", err)
			return 1
		}
	}
	logf("ready: server %s, kubeconfig %s, startup %v, pid %d",
		srv.url, cfg.kubeconfigOut, time.Since(start).Round(time.Millisecond), os.Getpid())

	select {
	case <-ctx.Done():
		logf("signal received: shutting down")
		<-srv.done
		if srv.err != nil {
			logf("kube-apiserver stopped with error: %v", srv.err)
		}
		return 0
	case <-srv.done:
		logf("kube-apiserver exited unexpectedly: %v", srv.err)
		return 1
	case err := <-etcd.errs:
		logf("etcd failed: %v", err)
		return 1
	}
}

// writeFileAtomic writes via a temporary file in the same directory and a
// rename, so readers never see a partial file.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	name := tmp.Name()
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if werr != nil || cerr != nil {
		os.Remove(name)
		if werr != nil {
			return werr
		}
		return cerr
	}
	if err := os.Chmod(name, perm); err != nil {
		os.Remove(name)
		return err
	}
	if err := os.Rename(name, path); err != nil {
		os.Remove(name)
		return err
	}
	return nil
}

// csvQuote quotes a field for the static token file (a CSV file).
func csvQuote(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}
