package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// binary builds the command once per test run.
func binary(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go toolchain not in PATH")
	}
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "fake-apiserver-test"); buildErr != nil {
			return
		}
		if out, err := exec.Command(goBin, "build", "-o", filepath.Join(buildDir, "fake-apiserver"), ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, "fake-apiserver")
}

// TestBinaryServesTLSWithKubeconfig builds the binary, starts it on port 0
// and uses the kubeconfig and CA it writes.
func TestBinaryServesTLSWithKubeconfig(t *testing.T) {
	bin := binary(t)
	dir := t.TempDir()
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

// TestBinaryAuthFlags starts the binary with --auth-token and --authz-rule
// and asks it for reviews; malformed flag values stop it at once.
func TestBinaryAuthFlags(t *testing.T) {
	bin := binary(t)
	for _, bad := range [][]string{
		{"--auth-token", `{"token":"t"}`},                                        // no user
		{"--auth-token", `{"token":"t","user":{"username":"u"},"x":1}`},          // unknown field
		{"--authz-rule", `{"users":["u"],"verbs":["get"],"resources":["pods"]}`}, // no apiGroups
	} {
		out, err := exec.Command(bin, append([]string{"--addr", "127.0.0.1:0"}, bad...)...).CombinedOutput()
		if err == nil {
			t.Fatalf("%v: started\n%s", bad, out)
		}
	}
	cmd := exec.Command(bin, "--addr", "127.0.0.1:0",
		"--auth-token", `{"token":"t1","user":{"username":"alice","groups":["dev"]},"audiences":["informerd"]}`,
		"--auth-token", `{"token":"t2","user":{"username":"bob"}}`,
		"--authz-rule", `{"users":["alice"],"verbs":["list","watch"],"apiGroups":[""],"resources":["configmaps"],"namespaces":["ns1"]}`,
		"--authz-rule", `{"groups":["dev"],"verbs":["get"],"apiGroups":["informerd.io"],"resources":["queues"]}`)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "listening on http://127.0.0.1:") {
		t.Fatalf("first line %q: %v", line, err)
	}
	url := strings.TrimSpace(strings.TrimPrefix(line, "listening on "))
	post := func(path, body string) string {
		t.Helper()
		resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 201 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	for _, tc := range []struct{ path, body, want string }{
		{"/apis/authentication.k8s.io/v1/tokenreviews", `{"spec":{"token":"t1","audiences":["informerd"]}}`,
			`"status":{"authenticated":true,"user":{"username":"alice","groups":["dev","system:authenticated"]},"audiences":["informerd"]}`},
		{"/apis/authentication.k8s.io/v1/tokenreviews", `{"spec":{"token":"t2"}}`, `"username":"bob"`},
		{"/apis/authorization.k8s.io/v1/subjectaccessreviews", `{"spec":{"user":"alice","resourceAttributes":{"namespace":"ns1","verb":"watch","resource":"configmaps"}}}`,
			`"status":{"allowed":true,"reason":"RBAC: allowed by rule 0 to User \"alice\""}`},
		{"/apis/authorization.k8s.io/v1/subjectaccessreviews", `{"spec":{"user":"alice","groups":["dev"],"resourceAttributes":{"verb":"get","group":"informerd.io","resource":"queues","name":"q"}}}`,
			`"status":{"allowed":true,"reason":"RBAC: allowed by rule 1 to Group \"dev\""}`},
		{"/apis/authorization.k8s.io/v1/subjectaccessreviews", `{"spec":{"user":"alice","resourceAttributes":{"verb":"watch","resource":"configmaps"}}}`,
			`"status":{"allowed":false}`},
	} {
		if got := post(tc.path, tc.body); !strings.Contains(got, tc.want) {
			t.Errorf("%s %s:\n%s\nlacks %s", tc.path, tc.body, got, tc.want)
		}
	}
	resp, err := http.Get(url + "/_fake/stats")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"tokenReviews":2,"subjectAccessReviews":3`) {
		t.Fatalf("stats: %s", b)
	}
}
