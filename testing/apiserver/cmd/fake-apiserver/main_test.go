package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBinaryServesTLSWithKubeconfig builds the binary, starts it on port 0
// and uses the kubeconfig and CA it writes.
func TestBinaryServesTLSWithKubeconfig(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go toolchain not in PATH")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "fake-apiserver")
	if out, err := exec.Command(goBin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "--kubeconfig-out") && !strings.Contains(string(out), "-kubeconfig-out") {
		t.Fatalf("--help: %v\n%s", err, out)
	}
	kc := filepath.Join(dir, "cfg", "kubeconfig")
	cmd := exec.Command(bin, "--addr", "127.0.0.1:0", "--tls", "--token", "tok", "--kubeconfig-out", kc)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "listening on https://127.0.0.1:") {
		t.Fatalf("first line %q: %v", line, err)
	}
	url := strings.TrimSpace(strings.TrimPrefix(line, "listening on "))
	cfg, err := os.ReadFile(kc)
	if err != nil || !strings.Contains(string(cfg), "server: "+url) || !strings.Contains(string(cfg), "token: tok") || !strings.Contains(string(cfg), "certificate-authority-data: ") {
		t.Fatalf("kubeconfig: %v\n%s", err, cfg)
	}
	ca, err := os.ReadFile(filepath.Join(dir, "cfg", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	for _, tc := range []struct {
		token string
		code  int
	}{{"", 401}, {"tok", 200}} {
		req, _ := http.NewRequest("GET", url+"/api/v1/namespaces/default", nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.code || resp.Proto != "HTTP/2.0" {
			t.Fatalf("token %q: %d %s", tc.token, resp.StatusCode, resp.Proto)
		}
	}
}
