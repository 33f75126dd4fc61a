package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"informerd/testing/kube/kubetest"
)

// chartDir is deploy/helm/informerd, absolute.
func chartDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.Abs(filepath.Join("..", "..", "..", "deploy", "helm", "informerd"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// chartValues are the values one render uses: the chart's values.yaml with
// the values file over it (maps merged, everything else replaced), as helm
// merges them.
func chartValues(t *testing.T, chart, file string) map[string]any {
	t.Helper()
	read := func(p string) map[string]any {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := yaml.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		return v
	}
	var merge func(dst, src map[string]any)
	merge = func(dst, src map[string]any) {
		for k, v := range src {
			if sm, ok := v.(map[string]any); ok {
				if dm, ok := dst[k].(map[string]any); ok {
					merge(dm, sm)
					continue
				}
			}
			dst[k] = v
		}
	}
	v := read(filepath.Join(chart, "values.yaml"))
	if file != "" {
		merge(v, read(file))
	}
	return v
}

// value is the value at a dotted path of vals, formatted ("" when absent).
func value(vals map[string]any, dotted string) string {
	var cur any = vals
	for _, k := range strings.Split(dotted, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = m[k]
	}
	if cur == nil {
		return ""
	}
	return fmt.Sprint(cur)
}

// TestChart installs deploy/helm/informerd as an operator would, for its
// default values and for every values file of its ci/ directory, on the real
// kube-apiserver with the real helm and kubectl: helm lint --strict, helm
// template, checkRelease on what it rendered (the config against the
// Deployment, Service, PodDisruptionBudget and RBAC; the RBAC is made from the
// informers and holds no wildcard; the pod's security), then kubectl apply
// --dry-run=server of every rendered object (the Queue CRD and the Prometheus
// Operator's CRDs installed for real first, the namespaces created), which
// must create each one and print nothing on stderr. Then values the chart must
// refuse are refused, naming the value.
func TestChart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real kube-apiserver")
	}
	chart := chartDir(t)
	helm := kubetest.Helm(t)
	kubectl := kubetest.Kubectl(t)
	operatorCRDs := kubetest.PrometheusOperatorCRDs(t)
	s := kubetest.Start(t)
	tmp := t.TempDir()
	env := append(kubectlEnv(tmp), "HELM_CACHE_HOME="+filepath.Join(tmp, "helm-cache"),
		"HELM_CONFIG_HOME="+filepath.Join(tmp, "helm-config"), "HELM_DATA_HOME="+filepath.Join(tmp, "helm-data"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kube := func(stdin []byte, args ...string) (string, string, int) {
		t.Helper()
		return runToolInput(ctx, t, env, stdin, kubectl, append([]string{"--kubeconfig", s.Kubeconfig}, args...)...)
	}
	mustKube := func(stdin []byte, args ...string) string {
		t.Helper()
		out, errOut, code := kube(stdin, args...)
		if code != 0 {
			t.Fatalf("kubectl %s: exit %d\n%s", strings.Join(args, " "), code, errOut)
		}
		return out
	}

	// The CRDs, for real: the Queue CRD as the chart renders it (deploy/crd,
	// which tools/chart --check keeps equal to the chart) and the Prometheus
	// Operator's two that the chart's monitoring objects need.
	mustKube(nil, "apply", "-f", filepath.Join("..", "..", "..", "deploy", "crd", "queues.informerd.io.yaml"))
	for _, crd := range []string{"servicemonitors", "prometheusrules"} {
		mustKube(nil, "apply", "--server-side", "-f", filepath.Join(operatorCRDs, "monitoring.coreos.com_"+crd+".yaml"))
	}
	mustKube(nil, "wait", "--for=condition=Established", "--timeout=60s", "crd/queues.informerd.io",
		"crd/servicemonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com")

	files, err := filepath.Glob(filepath.Join(chart, "ci", "*-values.yaml"))
	if err != nil || len(files) < 3 {
		t.Fatalf("ci/*-values.yaml: %v %v, want at least 3", files, err)
	}
	files = append([]string{""}, files...)
	created := map[string]bool{}
	for _, file := range files {
		name := "default"
		if file != "" {
			name = strings.TrimSuffix(filepath.Base(file), "-values.yaml")
		}
		t.Run(name, func(t *testing.T) {
			ns := "chart-" + name
			args := []string{"-n", ns}
			if file != "" {
				args = append(args, "-f", file)
			}
			helmRun := func(sub string, more ...string) (string, string, int) {
				t.Helper()
				return runTool(ctx, t, env, helm, append(append([]string{sub}, more...), args...)...)
			}
			if _, errOut, code := helmRun("lint", "--strict", chart); code != 0 {
				t.Fatalf("helm lint: exit %d\n%s", code, errOut)
			}
			rendered, errOut, code := helmRun("template", "informerd", chart)
			if code != 0 {
				t.Fatalf("helm template: exit %d\n%s", code, errOut)
			}
			ms := parseManifests(t, "-", name, []byte(rendered))

			vals := chartValues(t, chart, file)
			fullname := value(vals, "fullnameOverride")
			if fullname == "" {
				fullname = "informerd"
			}
			var replicas, maxUnavailable int
			fmt.Sscan(value(vals, "replicaCount"), &replicas)
			fmt.Sscan(value(vals, "podDisruptionBudget.maxUnavailable"), &maxUnavailable)
			image := value(vals, "image.repository") + ":0.1.0"
			if d := value(vals, "image.digest"); d != "" {
				image += "@" + d
			}
			checkRelease(t, ms, release{namespace: ns, name: fullname, replicas: replicas, maxUnavailable: maxUnavailable,
				leaderElection: value(vals, "leaderElection.enabled") == "true", image: image, tlsSecret: value(vals, "tls.secretName")})
			kinds := map[string]int{}
			for _, m := range ms {
				kinds[m.obj.GetKind()]++
			}
			t.Logf("%s renders %d objects: %v", name, len(ms), kinds)
			monitoring := map[string]string{"ServiceMonitor": "monitoring.serviceMonitor.enabled",
				"PrometheusRule": "monitoring.prometheusRule.enabled"}
			for kind, v := range monitoring {
				if want := map[bool]int{true: 1}[value(vals, v) == "true"]; kinds[kind] != want {
					t.Errorf("%d %s objects with %s=%s, want %d", kinds[kind], kind, v, value(vals, v), want)
				}
			}
			if value(vals, "monitoring.dashboard.enabled") == "true" {
				dash := findObject(t, ms, "ConfigMap", ns, fullname+"-dashboard")
				text, _ := dash.Object["data"].(map[string]any)["informerd-dashboard.json"].(string)
				var d map[string]any
				if err := json.Unmarshal([]byte(text), &d); err != nil || d["uid"] != "informerd" {
					t.Errorf("the dashboard ConfigMap's JSON: %v (uid %v)", err, d["uid"])
				}
			}

			// The namespaces, for real (a dry run does not create them).
			for _, m := range ms {
				for _, n := range []string{ns, m.obj.GetNamespace()} {
					if n != "" && !created[n] {
						mustKube([]byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: "+n+"}\n"), "apply", "-f", "-")
						created[n] = true
					}
				}
			}
			out, errOut, code := kube([]byte(rendered), "apply", "--dry-run=server", "-f", "-")
			if code != 0 || errOut != "" {
				t.Fatalf("kubectl apply --dry-run=server of helm template's %d objects: exit %d, stderr:\n%s", len(ms), code, errOut)
			}
			var want []string
			for _, m := range ms {
				verb := "created"
				if m.obj.GetKind() == "CustomResourceDefinition" {
					verb = "configured" // applied for real above, without the chart's labels
				}
				want = append(want, kubectlName(m)+" "+verb+" (server dry run)")
			}
			got := strings.Split(strings.TrimSpace(out), "\n")
			sort.Strings(want)
			sort.Strings(got)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("kubectl apply --dry-run=server printed\n%s\nwant (in any order)\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}

	// Values the chart refuses, each named in the error, whether helm's schema
	// check (values.schema.json) or the chart's own rules catch it.
	for _, c := range []struct {
		name, values, want string
	}{
		{"a count that is not a number", "replicaCount: three", "at '/replicaCount': got string, want integer"},
		{"an unknown top-level value", "replicas: 3", "additional properties 'replicas' not allowed"},
		{"replicas without leader election", "leaderElection: {enabled: false}", "replicaCount: 3 replicas need leaderElection.enabled"},
		{"authentication on without TLS", "tls: {secretName: \"\"}", "tls.secretName: required while authentication is on"},
		{"a wildcard informer", "config: {informers: [{resource: {version: v1, resource: \"*\"}}]}", "config.informers[0].resource: \"*\" of group \"\": a wildcard"},
		{"a wildcard group", "config: {informers: [{resource: {group: \"*\", version: v1, resource: pods}}]}", "config.informers[0].resource: \"pods\" of group \"*\": a wildcard"},
		{"an informer without a version", "config: {informers: [{resource: {resource: pods}}]}", "at '/config/informers/0/resource': missing property 'version'"},
		{"an informer of another cluster", "config: {informers: [{cluster: prod, resource: {version: v1, resource: pods}}]}", "config.informers[0].cluster: \"prod\""},
		{"a key the chart sets", "config: {listen: [\"0.0.0.0:1\"]}", "config.listen: set by the chart"},
		{"a wildcard in the extra resources", "rbac: {extraInformerResources: [{group: apps, resources: [\"*\"]}]}", "rbac.extraInformerResources[0]: no wildcards"},
		{"a grace period that is not a duration", "shutdownGracePeriod: soon", "at '/shutdownGracePeriod': 'soon' does not match"},
		{"a port out of range", "service: {grpcPort: 70000}", "at '/service/grpcPort': maximum"},
		{"an image digest that is not one", "image: {digest: latest}", "at '/image/digest'"},
	} {
		f := filepath.Join(tmp, "refused.yaml")
		if err := os.WriteFile(f, []byte(c.values+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, errOut, code := runTool(ctx, t, env, helm, "template", "informerd", chart, "-n", "chart-refused", "-f", f)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%s (%s): helm template exit %d, want non-zero and %q in:\n%s", c.name, c.values, code, c.want, errOut)
		}
	}
}

// findObject is the object of this kind, namespace and name among ms.
func findObject(t *testing.T, ms []manifest, kind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	for _, m := range ms {
		if m.obj.GetKind() == kind && m.obj.GetNamespace() == ns && m.obj.GetName() == name {
			return m.obj
		}
	}
	t.Fatalf("no %s %s/%s", kind, ns, name)
	return nil
}
