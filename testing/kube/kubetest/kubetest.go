// Package kubetest starts the real kube-apiserver of testing/kube (through
// its start script, building out/kube-testserver when needed) for a Go test
// and stops it in the test's cleanup, failed or not.
package kubetest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Server is what the start script reported.
type Server struct {
	Kubeconfig             string
	UnprivilegedKubeconfig string
	URL                    string
	PID                    int
	Log                    string
}

// Start runs testing/kube/start and registers a cleanup that stops the
// server (SIGTERM, then waits until the process is gone; SIGKILL after 45 s).
// Arguments in serverArgs go to kube-testserver after the script's "--";
// a further "--" among them starts the kube-apiserver flags.
func Start(t testing.TB, serverArgs ...string) *Server {
	t.Helper()
	dir := t.TempDir()

	ctx, cancel := context.WithTimeout(context.Background(), buildBudget(t))
	defer cancel()

	args := []string{
		"--kubeconfig-out", filepath.Join(dir, "admin.kubeconfig"),
		"--unprivileged-kubeconfig-out", filepath.Join(dir, "unprivileged.kubeconfig"),
		"--log", filepath.Join(dir, "server.log"),
		"--timeout", "120",
	}
	if len(serverArgs) > 0 {
		args = append(append(args, "--"), serverArgs...)
	}
	cmd := exec.CommandContext(ctx, script(t, "start"), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	// The server is started in the background by the script and keeps the
	// log file, not these pipes, open; don't wait for stray descendants.
	cmd.WaitDelay = 10 * time.Second
	began := time.Now()
	err := cmd.Run()
	t.Logf("start took %v; stderr:\n%s", time.Since(began).Round(time.Millisecond), stderr.String())
	s := &Server{}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ": ")
		if !ok {
			continue
		}
		switch key {
		case "kubeconfig":
			s.Kubeconfig = value
		case "unprivileged-kubeconfig":
			s.UnprivilegedKubeconfig = value
		case "server":
			s.URL = value
		case "pid":
			s.PID, _ = strconv.Atoi(value)
		case "log":
			s.Log = value
		}
	}
	if s.PID > 0 {
		// Registered before any check can fail, so the server never outlives the test.
		t.Cleanup(func() { Stop(t, s) })
	}
	if err != nil {
		t.Fatalf("start failed: %v\nstdout:\n%s", err, stdout.String())
	}
	if s.PID <= 0 || s.Kubeconfig == "" || s.UnprivilegedKubeconfig == "" || s.URL == "" {
		t.Fatalf("start printed an incomplete report:\n%s", stdout.String())
	}
	t.Logf("server %s pid %d", s.URL, s.PID)
	return s
}

// buildBudget is how long a script that may have to build its binary first
// may take: inside the test binary's own deadline.
func buildBudget(t testing.TB) time.Duration {
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := d.Deadline(); ok {
			return time.Until(dl) - 90*time.Second
		}
	}
	return 9 * time.Minute
}

// script is the absolute path of testing/kube/NAME ("start", "kubectl"):
// next to this package's source, or (a -trimpath build) next to the test's
// directory, which go test makes the working directory.
func script(t testing.TB, name string) string {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		return filepath.Join(filepath.Dir(file), "..", name)
	}
	p, err := filepath.Abs(filepath.Join("..", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Kubectl returns the path of the real kubectl (out/kubectl), which
// testing/kube/kubectl builds from cmd/kubectl when it is missing or stale
// (a link when `go vet ./...` has filled the build cache, as in make test).
func Kubectl(t testing.TB) string {
	t.Helper()
	return built(t, "kubectl", "binary: ")
}

// Helm returns the path of the real helm (out/helm), which testing/helm/helm
// builds from its Go module when it is missing or stale.
func Helm(t testing.TB) string {
	t.Helper()
	return built(t, filepath.Join("..", "helm", "helm"), "binary: ")
}

// PrometheusOperatorCRDs returns the directory of the Prometheus Operator's
// CRDs (ServiceMonitor, PrometheusRule, ...), which
// testing/helm/prometheus-operator-crds generates from its Go types.
func PrometheusOperatorCRDs(t testing.TB) string {
	t.Helper()
	return built(t, filepath.Join("..", "helm", "prometheus-operator-crds"), "dir: ")
}

// built runs the script testing/kube/NAME with --build-only (which the
// scripts that only build ignore) and returns the absolute path it printed
// after prefix.
func built(t testing.TB, name, prefix string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), buildBudget(t))
	defer cancel()
	cmd := exec.CommandContext(ctx, script(t, name), "--build-only")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	began := time.Now()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s --build-only: %v\n%s", name, err, stderr.String())
	}
	p, ok := strings.CutPrefix(strings.TrimSpace(string(out)), prefix)
	if !ok || !filepath.IsAbs(p) {
		t.Fatalf("%s --build-only printed %q", name, out)
	}
	t.Logf("%s: %s (%v) %s", name, p, time.Since(began).Round(time.Millisecond), strings.TrimSpace(stderr.String()))
	return p
}

// Stop sends SIGTERM and waits for the process to go away, then checks from
// the log that the shutdown was the graceful one.
func Stop(t testing.TB, s *Server) {
	if err := syscall.Kill(s.PID, syscall.SIGTERM); err != nil {
		t.Errorf("SIGTERM %d: %v", s.PID, err)
		return
	}
	deadline := time.Now().Add(45 * time.Second)
	for Alive(s.PID) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(s.PID, syscall.SIGKILL)
			t.Errorf("server %d still running 45s after SIGTERM; killed", s.PID)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	log, err := os.ReadFile(s.Log)
	if err != nil {
		t.Errorf("read server log: %v", err)
		return
	}
	if !bytes.Contains(log, []byte("kube-testserver: signal received: shutting down")) {
		t.Errorf("server log has no graceful-shutdown line; tail:\n%s", Tail(log, 2000))
	}
	if t.Failed() {
		t.Logf("server log tail:\n%s", Tail(log, 4000))
	}
}

// Alive reports whether pid is a running (not zombie) process. The server
// was started by the script, so it is not our child and we cannot wait(2).
func Alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	// Field 3, after the parenthesised command name, is the state.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z'
	}
	return true
}

// Tail is the last n bytes of b.
func Tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// RESTConfig loads a kubeconfig the script wrote.
func RESTConfig(t testing.TB, kubeconfig string) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("load %s: %v", kubeconfig, err)
	}
	return cfg
}
