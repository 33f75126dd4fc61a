package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/rest"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

const (
	serviceClusterIPRange = "10.0.0.0/24"
	// apiServerServiceIP is the first address of serviceClusterIPRange, the
	// ClusterIP of the "kubernetes" service; the serving certificate lists it.
	apiServerServiceIP   = "10.0.0.1"
	serviceAccountIssuer = "https://kubernetes.default.svc.cluster.local"
)

// disabledAdmissionPlugins are default-on plugins turned off. ServiceAccount
// would reject every pod, since no controller-manager creates the "default"
// service account; the rest enforce policies informerd's tests do not need
// and most of them run informers of their own, which cost memory.
// NamespaceLifecycle, the admission webhooks and the admission policies
// stay on.
var disabledAdmissionPlugins = []string{
	"ServiceAccount",
	"LimitRanger",
	"ResourceQuota",
	"PodSecurity",
	"Priority",
	"DefaultTolerationSeconds",
	"DefaultStorageClass",
	"DefaultIngressClass",
	"PersistentVolumeClaimResize",
	"StorageObjectInUseProtection",
	"PodGroupProtection",
	"TaintNodesByCondition",
	"RuntimeClass",
	"CertificateApproval",
	"CertificateSigning",
	"ClusterTrustBundleAttest",
	"CertificateSubjectRestriction",
	"PodTopologyLabels",
	"NodeDeclaredFeatureValidator",
	"PodResizeValidator",
}

type apiserverParams struct {
	dir        string
	port       int
	etcdURL    string
	pki        *pkiFiles
	verbosity  int
	extraFlags []string
}

type runningAPIServer struct {
	url  string
	port int
	// done is closed when the apiserver has stopped; err says why.
	done chan struct{}
	err  error
}

func apiserverFlags(p apiserverParams, port int) []string {
	return []string{
		"--advertise-address=127.0.0.1",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(p.dir, "certs"),
		"--tls-cert-file=" + p.pki.servingCertFile,
		"--tls-private-key-file=" + p.pki.servingKeyFile,
		"--etcd-servers=" + p.etcdURL,
		"--authorization-mode=RBAC",
		"--token-auth-file=" + p.pki.tokenFile,
		"--service-account-issuer=" + serviceAccountIssuer,
		"--service-account-key-file=" + p.pki.serviceAccountKeyFile,
		"--service-account-signing-key-file=" + p.pki.serviceAccountKeyFile,
		"--service-cluster-ip-range=" + serviceClusterIPRange,
		// The lease reconciler would publish 127.0.0.1 as the endpoint of
		// the "kubernetes" service, which validation rejects (loopback).
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		"--disable-admission-plugins=" + strings.Join(disabledAdmissionPlugins, ","),
		"--profiling=false",
		"--v=" + strconv.Itoa(p.verbosity),
	}
}

// startAPIServer configures kube-apiserver exactly as its command line would
// (options.NewServerRunOptions + flag parsing + Complete + Validate) and runs
// app.Run in a goroutine until ctx is cancelled. The secure listener is
// opened here, so an ephemeral port is known before the server starts.
func startAPIServer(ctx context.Context, p apiserverParams) (*runningAPIServer, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)))
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	closeListener := true
	defer func() {
		if closeListener {
			ln.Close()
		}
	}()

	s := options.NewServerRunOptions()
	fs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	for _, f := range s.Flags().FlagSets {
		fs.AddFlagSet(f)
	}
	args := append(apiserverFlags(p, port), p.extraFlags...)
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("kube-apiserver flags: %w", err)
	}
	s.SecureServing.Listener = ln
	s.SecureServing.BindPort = port
	s.SecureServing.ExternalAddress = net.ParseIP("127.0.0.1")

	// What the kube-apiserver command does before and in its RunE.
	registry := s.GenericServerRunOptions.ComponentGlobalsRegistry
	if err := registry.Set(); err != nil {
		return nil, err
	}
	featureGate := registry.FeatureGateFor(basecompatibility.DefaultKubeComponent)
	if err := logsapi.ValidateAndApply(s.Logs, featureGate); err != nil {
		return nil, err
	}
	rest.SetDefaultWarningHandler(rest.NoWarnings{})

	completed, err := s.Complete(ctx)
	if err != nil {
		return nil, fmt.Errorf("complete options: %w", err)
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return nil, fmt.Errorf("validate options: %w", utilerrors.NewAggregate(errs))
	}
	if mg, ok := featureGate.(featuregate.MutableFeatureGate); ok {
		mg.AddMetrics()
	}
	registry.AddMetrics()

	srv := &runningAPIServer{
		url:  "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		port: port,
		done: make(chan struct{}),
	}
	closeListener = false
	go func() {
		defer close(srv.done)
		srv.err = app.Run(ctx, completed)
	}()
	return srv, nil
}

// waitReady polls /readyz until it answers "ok", then waits for the
// "default" namespace (created by a controller shortly after readiness),
// so that a test can create objects in it as soon as it is handed the
// kubeconfig.
func waitReady(ctx context.Context, baseURL string, pki *pkiFiles, done <-chan struct{}) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pki.caPEM) {
		return fmt.Errorf("bad CA PEM")
	}
	client := &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		},
	}
	defer client.CloseIdleConnections()

	get := func(path string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+path, nil)
		if err != nil {
			return 0, "", err
		}
		req.Header.Set("Authorization", "Bearer "+pki.adminToken)
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(body), err
	}

	var last string
	for _, check := range []struct {
		path string
		ok   func(code int, body string) bool
	}{
		{"/readyz", func(code int, body string) bool { return code == http.StatusOK && strings.TrimSpace(body) == "ok" }},
		{"/api/v1/namespaces/default", func(code int, _ string) bool { return code == http.StatusOK }},
	} {
		for {
			code, body, err := get(check.path)
			if err == nil && check.ok(code, body) {
				break
			}
			if err != nil {
				last = err.Error()
			} else {
				last = fmt.Sprintf("%s: HTTP %d: %.300s", check.path, code, body)
			}
			select {
			case <-done:
				return fmt.Errorf("kube-apiserver exited")
			case <-ctx.Done():
				return fmt.Errorf("%w (last: %s)", ctx.Err(), last)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}
