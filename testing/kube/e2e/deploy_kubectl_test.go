package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"informerd/testing/kube/kubetest"
)

// kubectlName is how kubectl names an object in its output: "kind.group/name"
// (lower-case kind; no group for the core API).
func kubectlName(m manifest) string {
	gvk := m.obj.GroupVersionKind()
	kind := strings.ToLower(gvk.Kind)
	if gvk.Group != "" {
		kind += "." + gvk.Group
	}
	return kind + "/" + m.obj.GetName()
}

// TestDeployKubectl installs deploy/ the way its README says, with the real
// kubectl against the real kube-apiserver: the CRD for real (waiting until it
// is Established), the Namespaces for real, then `kubectl apply
// --dry-run=server -R -f deploy/<dir>` for every directory of Kubernetes
// objects (manifestDirs), which must create every object (server dry run) and
// print nothing on stderr. A Queue object must then be accepted, and
// broken manifests must fail naming the field.
func TestDeployKubectl(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real kube-apiserver")
	}
	deployDir, err := filepath.Abs(filepath.Join("..", "..", "..", "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	ms := loadManifests(t, deployDir)
	kubectl := kubetest.Kubectl(t)
	s := kubetest.Start(t)
	tmp := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// run runs kubectl with the admin kubeconfig and nothing of this
	// machine's (no ~/.kube, no kuberc, no $KUBECONFIG).
	run := func(args ...string) (string, string, int) {
		t.Helper()
		return runTool(ctx, t, kubectlEnv(tmp), kubectl, append([]string{"--kubeconfig", s.Kubeconfig}, args...)...)
	}
	mustRun := func(want string, args ...string) {
		t.Helper()
		out, errOut, code := run(args...)
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("kubectl %s: exit %d, want 0 and %q in the output\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, out, errOut)
		}
	}

	// 1. The CRD, for real, first: it must be served before anything refers to it.
	var crd manifest
	for _, m := range ms {
		if m.obj.GetKind() == "CustomResourceDefinition" {
			crd = m
		}
	}
	if crd.obj == nil {
		t.Fatal("no CustomResourceDefinition under deploy/")
	}
	mustRun(kubectlName(crd)+" created", "apply", "-f", crd.path)
	mustRun(kubectlName(crd)+" condition met", "wait", "--for=condition=Established", "--timeout=60s", kubectlName(crd))

	// 2. The Namespaces, for real: a dry run does not create them, and the
	// objects in them would be refused without them.
	var nsDocs [][]byte
	for _, m := range ms {
		if m.obj.GetKind() == "Namespace" {
			b, err := yaml.Marshal(m.obj.Object)
			if err != nil {
				t.Fatal(err)
			}
			nsDocs = append(nsDocs, b)
		}
	}
	nsFile := filepath.Join(tmp, "namespaces.yaml")
	if err := os.WriteFile(nsFile, bytes.Join(nsDocs, []byte("---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun("created", "apply", "-f", nsFile)

	// 3. Everything, with server-side dry run (kubectl validates fields
	// strictly by default).
	applyArgs := []string{"apply", "--dry-run=server", "-R"}
	for _, dir := range manifestDirs(t, deployDir) {
		applyArgs = append(applyArgs, "-f", dir)
	}
	out, errOut, code := run(applyArgs...)
	if code != 0 {
		t.Fatalf("kubectl %s: exit %d\n%s", strings.Join(applyArgs, " "), code, errOut)
	}
	if errOut != "" {
		t.Errorf("kubectl %s wrote to stderr:\n%s", strings.Join(applyArgs, " "), errOut)
	}
	var want []string
	for _, m := range ms {
		verb := "created"
		if m.path == crd.path || m.obj.GetKind() == "Namespace" {
			verb = "unchanged" // applied for real above
		}
		want = append(want, kubectlName(m)+" "+verb+" (server dry run)")
	}
	got := strings.Split(strings.TrimSpace(out), "\n")
	sort.Strings(want)
	sort.Strings(got)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("kubectl %s printed\n%s\nwant (in any order)\n%s", strings.Join(applyArgs, " "), strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// 4. The CRD serves Queue objects as informerd writes them.
	queueFile := filepath.Join(tmp, "queue.yaml")
	queue := `apiVersion: informerd.io/v1alpha1
kind: Queue
metadata:
  name: configmap-reconciler
  namespace: informerd
  labels: {informerd.io/lease: informerd}
spec:
  name: configmap-reconciler
  sources: [{informerId: configmaps, predicates: [{generationChanged: {}}]}]
  rateLimiter: {exponential: {baseDelayMs: "5", maxDelayMs: "60000"}}
  resyncPeriodMs: "600000"
`
	if err := os.WriteFile(queueFile, []byte(queue), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun("queue.informerd.io/configmap-reconciler created (server dry run)", "apply", "--dry-run=server", "-f", queueFile)

	// 5. And the check can fail: broken manifests are refused, naming the field.
	deployment, err := os.ReadFile(filepath.Join(deployDir, "informerd", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, text, old, new, want string
	}{
		{"deployment.yaml", string(deployment), "\n  replicas: 3\n", "\n  replica: 3\n", `unknown field "spec.replica"`},
		{"queue.yaml", queue, "\nspec:\n", "\nspecc: {}\nspec:\n", `unknown field "specc"`},
	} {
		if !strings.Contains(c.text, c.old) {
			t.Fatalf("%s has no %q to break", c.name, c.old)
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, c.name), []byte(strings.Replace(c.text, c.old, c.new, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := run("apply", "--dry-run=server", "-f", dir, "-R")
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("broken %s: exit %d, want non-zero and %s\nstdout:\n%s\nstderr:\n%s", c.name, code, c.want, out, errOut)
		}
	}
}

// kubectlEnv is the environment kubectl (and helm) run with in these tests:
// home as HOME, no kuberc, a PATH of the system's directories only.
func kubectlEnv(home string) []string {
	return []string{"HOME=" + home, "KUBERC=off", "PATH=/usr/bin:/bin"}
}

// runTool runs bin with args and env (stdin from the optional input), logs
// the command and what it wrote, and returns stdout, stderr and the exit code.
func runTool(ctx context.Context, t *testing.T, env []string, bin string, args ...string) (string, string, int) {
	t.Helper()
	return runToolInput(ctx, t, env, nil, bin, args...)
}

func runToolInput(ctx context.Context, t *testing.T, env []string, stdin []byte, bin string, args ...string) (string, string, int) {
	t.Helper()
	cctx, ccancel := context.WithTimeout(ctx, time.Minute)
	defer ccancel()
	cmd := exec.CommandContext(cctx, bin, args...)
	cmd.Env = env
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	code := 0
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %s: %v", filepath.Base(bin), strings.Join(args, " "), err)
	}
	out := stdout.String()
	if len(out) > 4000 {
		out = out[:4000] + "..."
	}
	t.Logf("%s %s: exit %d\n%s%s", filepath.Base(bin), strings.Join(args, " "), code, out, stderr.String())
	return stdout.String(), stderr.String(), code
}

// TestDeployInstallsInOneCommand runs deploy/README.md's install command on an
// empty cluster, for real: kubectl applies its -f arguments in order, so the
// CRD and the Namespace (deploy/crd, deploy/rbac/informerd.yaml) exist before
// the objects that need them (deploy/informerd). Every object must be
// created, with nothing on stderr.
func TestDeployInstallsInOneCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real kube-apiserver")
	}
	deployDir, err := filepath.Abs(filepath.Join("..", "..", "..", "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	kubectl := kubetest.Kubectl(t)
	s := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	paths := []string{filepath.Join(deployDir, "crd"), filepath.Join(deployDir, "rbac", "informerd.yaml"), filepath.Join(deployDir, "informerd")}
	args := []string{"--kubeconfig", s.Kubeconfig, "apply"}
	var want []string
	for _, p := range paths {
		args = append(args, "-f", p)
		var ms []manifest
		if strings.HasSuffix(p, ".yaml") {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			ms = parseManifests(t, p, filepath.Base(p), b)
		} else {
			ms = loadManifests(t, p)
		}
		for _, m := range ms {
			want = append(want, kubectlName(m)+" created")
		}
	}
	out, errOut, code := runTool(ctx, t, kubectlEnv(t.TempDir()), kubectl, args...)
	if code != 0 || errOut != "" {
		t.Fatalf("kubectl %s: exit %d, stderr:\n%s", strings.Join(args[2:], " "), code, errOut)
	}
	got := strings.Split(strings.TrimSpace(out), "\n")
	sort.Strings(want)
	sort.Strings(got)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("kubectl apply printed\n%s\nwant (in any order)\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
