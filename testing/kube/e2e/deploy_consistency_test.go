package e2e

import (
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// release is what one rendering of the chart was asked for: where checkRelease
// looks for its objects and what it expects of them.
type release struct {
	namespace, name string // the release's namespace and full name
	replicas        int
	maxUnavailable  int    // the PodDisruptionBudget's (with more than one replica)
	leaderElection  bool   // a Lease, its Roles and the identity flag
	image           string // "": not checked
	tlsSecret       string // "": no TLS
}

// TestDeployConsistency checks that the files of deploy/ agree with each
// other where the API server cannot tell: the daemon's config (in the
// ConfigMap) against the Deployment, the Service, the RBAC and the admission
// policy. No server; runs with -short too.
func TestDeployConsistency(t *testing.T) {
	version, err := os.ReadFile(filepath.Join("..", "..", "..", "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	ms := loadManifests(t, filepath.Join("..", "..", "..", "deploy"))
	// The image is the one make image builds (tools/image): informerd:<VERSION>.
	checkRelease(t, ms, release{namespace: "informerd", name: "informerd", replicas: 3, maxUnavailable: 1, leaderElection: true,
		image: "informerd:" + strings.TrimSpace(string(version)), tlsSecret: "informerd-tls"})
}

// checkRelease checks one installation's objects (deploy/'s, or one helm
// template of the chart) against each other and against what the chart
// promises: the config's ports, paths, Lease and informers against the
// Deployment, Service, PodDisruptionBudget and RBAC; the pod's security.
func checkRelease(t *testing.T, ms []manifest, r release) {
	t.Helper()
	find := func(kind, ns, name string) *unstructured.Unstructured {
		t.Helper()
		return findObject(t, ms, kind, ns, name)
	}
	count := func(kind string) int {
		n := 0
		for _, m := range ms {
			if m.obj.GetKind() == kind {
				n++
			}
		}
		return n
	}
	str := func(o map[string]any, fields ...string) string {
		v, ok, _ := unstructured.NestedFieldNoCopy(o, fields...)
		if !ok || v == nil {
			return ""
		}
		return fmt.Sprint(v)
	}
	list := func(o map[string]any, fields ...string) []map[string]any {
		v, _, _ := unstructured.NestedSlice(o, fields...)
		var out []map[string]any
		for _, e := range v {
			if m, ok := e.(map[string]any); ok {
				out = append(out, m)
			}
		}
		return out
	}
	byName := func(items []map[string]any, name string) map[string]any {
		for _, e := range items {
			if e["name"] == name {
				return e
			}
		}
		return nil
	}
	hasAll := func(have []any, want ...string) bool {
		for _, w := range want {
			if !slices.Contains(have, any(w)) {
				return false
			}
		}
		return true
	}

	// The daemon's config, as strictly as the manifests.
	cm := find("ConfigMap", r.namespace, r.name)
	cfgText, _, _ := unstructured.NestedString(cm.Object, "data", "config.yaml")
	j, err := yaml.YAMLToJSONStrict([]byte(cfgText))
	if err != nil {
		t.Fatalf("ConfigMap %s/%s config.yaml: %v", r.namespace, r.name, err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(j, &cfg); err != nil {
		t.Fatal(err)
	}
	if got := str(cfg, "leaderElection", "enabled") == "true"; got != r.leaderElection {
		t.Errorf("config.yaml: leaderElection.enabled is %v, want %v", got, r.leaderElection)
	}
	leaseNS, leaseName := str(cfg, "leaderElection", "lease", "namespace"), str(cfg, "leaderElection", "lease", "name")
	if c := list(cfg, "clusters"); len(c) != 1 || c[0]["inCluster"] != true {
		t.Errorf("config.yaml: clusters %v, want one with inCluster: true", c)
	}

	// The pod.
	dep := find("Deployment", r.namespace, r.name)
	pod, _, _ := unstructured.NestedMap(dep.Object, "spec", "template", "spec")
	podLabels, _, _ := unstructured.NestedStringMap(dep.Object, "spec", "template", "metadata", "labels")
	if n := str(dep.Object, "spec", "replicas"); n != fmt.Sprint(r.replicas) {
		t.Errorf("Deployment: replicas %s, want %d", n, r.replicas)
	}
	sa := find("ServiceAccount", r.namespace, str(pod, "serviceAccountName"))
	ctrs := list(pod, "containers")
	if len(ctrs) != 1 {
		t.Fatalf("Deployment: %d containers, want 1", len(ctrs))
	}
	ctr := ctrs[0]
	if r.image != "" && str(ctr, "image") != r.image {
		t.Errorf("Deployment: image %q, want %q", str(ctr, "image"), r.image)
	}
	if u := str(pod, "securityContext", "runAsUser"); u != "65532" {
		t.Errorf("Deployment: runAsUser %s, want 65532 (the image's user, tools/image)", u)
	}
	volumes := list(pod, "volumes")
	// mountOf is the directory where the pod mounts the volume whose source
	// (configMap or secret) has this name.
	mountOf := func(source, nameField, name string) string {
		for _, v := range volumes {
			if str(v, source, nameField) != name {
				continue
			}
			for _, vm := range list(ctr, "volumeMounts") {
				if vm["name"] == v["name"] {
					return str(vm, "mountPath")
				}
			}
		}
		t.Errorf("Deployment: no mounted %s volume of %q", source, name)
		return "?"
	}
	args, _, _ := unstructured.NestedStringSlice(ctr, "args")
	env := map[string]string{}
	for _, e := range list(ctr, "env") {
		env[str(e, "name")] = str(e, "valueFrom", "fieldRef", "fieldPath")
	}
	ports := map[string]string{}
	for _, p := range list(ctr, "ports") {
		ports[str(p, "name")] = str(p, "containerPort")
	}
	wantArgs := []string{
		"--config=" + path.Join(mountOf("configMap", "name", cm.GetName()), "config.yaml"),
		"--advertise-address=$(POD_IP):" + ports["grpc"],
	}
	if r.leaderElection {
		wantArgs = append(wantArgs, "--leader-elect-identity=$(POD_NAME)")
	}
	if !slices.Equal(args, wantArgs) {
		t.Errorf("Deployment: args %q, want %q", args, wantArgs)
	}
	if env["POD_IP"] != "status.podIP" || env["POD_NAME"] != "metadata.name" {
		t.Errorf("Deployment: POD_IP from %q, POD_NAME from %q; want status.podIP and metadata.name", env["POD_IP"], env["POD_NAME"])
	}
	if l, _, _ := unstructured.NestedStringSlice(cfg, "listen"); !slices.Equal(l, []string{net.JoinHostPort("0.0.0.0", ports["grpc"])}) {
		t.Errorf("config.yaml: listen %q, want the grpc port %s on 0.0.0.0", l, ports["grpc"])
	}
	if m := str(cfg, "metricsListen"); m != net.JoinHostPort("0.0.0.0", ports["metrics"]) {
		t.Errorf("config.yaml: metricsListen %q, want the metrics port %s on 0.0.0.0", m, ports["metrics"])
	}
	for probe, p := range map[string]string{"startupProbe": "/healthz", "livenessProbe": "/healthz", "readinessProbe": "/readyz"} {
		if got := str(ctr, probe, "httpGet", "path") + " " + str(ctr, probe, "httpGet", "port"); got != p+" metrics" {
			t.Errorf("Deployment: %s on %q, want %q", probe, got, p+" metrics")
		}
	}
	if r.tlsSecret != "" {
		tlsDir := mountOf("secret", "secretName", r.tlsSecret)
		if c, k := str(cfg, "tls", "cert"), str(cfg, "tls", "key"); c != path.Join(tlsDir, "tls.crt") || k != path.Join(tlsDir, "tls.key") {
			t.Errorf("config.yaml: tls {cert: %s, key: %s}, want tls.crt and tls.key of the Secret mounted at %s", c, k, tlsDir)
		}
	} else if str(cfg, "tls") != "" || str(cfg, "insecureAllowUnauthenticated") != "true" {
		t.Errorf("config.yaml: tls %q and insecureAllowUnauthenticated %q, want no TLS only with authentication off", str(cfg, "tls"), str(cfg, "insecureAllowUnauthenticated"))
	}
	grace, err := time.ParseDuration(str(cfg, "shutdownGracePeriod"))
	if err != nil {
		t.Errorf("config.yaml: shutdownGracePeriod: %v", err)
	}
	if kill, _, _ := unstructured.NestedInt64(pod, "terminationGracePeriodSeconds"); time.Duration(kill)*time.Second <= grace {
		t.Errorf("Deployment: terminationGracePeriodSeconds %d, want more than shutdownGracePeriod %v", kill, grace)
	}
	if str(pod, "securityContext", "runAsNonRoot") != "true" {
		t.Errorf("Deployment: pod securityContext.runAsNonRoot is not true")
	}
	if p := str(pod, "securityContext", "seccompProfile", "type"); p != "RuntimeDefault" {
		t.Errorf("Deployment: pod seccompProfile %q, want RuntimeDefault", p)
	}
	if d, _, _ := unstructured.NestedStringSlice(ctr, "securityContext", "capabilities", "drop"); !slices.Equal(d, []string{"ALL"}) {
		t.Errorf("Deployment: container drops capabilities %q, want [ALL]", d)
	}
	for f, want := range map[string]string{"readOnlyRootFilesystem": "true", "allowPrivilegeEscalation": "false"} {
		if got := str(ctr, "securityContext", f); got != want {
			t.Errorf("Deployment: container securityContext.%s is %s, want %s", f, got, want)
		}
	}
	if str(ctr, "resources", "requests", "cpu") == "" || str(ctr, "resources", "requests", "memory") == "" {
		t.Errorf("Deployment: no cpu and memory requests")
	}
	if a := list(pod, "affinity", "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution"); len(a) != 1 ||
		str(a[0], "podAffinityTerm", "topologyKey") != "kubernetes.io/hostname" {
		t.Errorf("Deployment: podAntiAffinity %v, want one preferred term on kubernetes.io/hostname", a)
	}

	// What selects the pods.
	matches := func(what string, sel map[string]string) {
		t.Helper()
		if len(sel) == 0 {
			t.Errorf("%s: empty selector", what)
		}
		for k, v := range sel {
			if podLabels[k] != v {
				t.Errorf("%s: selector %v does not select the Deployment's pods %v", what, sel, podLabels)
			}
		}
	}
	svc := find("Service", r.namespace, r.name)
	sel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
	matches("Service", sel)
	for _, name := range []string{"grpc", "metrics"} {
		p := byName(list(svc.Object, "spec", "ports"), name)
		if p == nil || str(p, "port") != ports[name] || str(p, "targetPort") != name {
			t.Errorf("Service: port %s is %v, want port %s to targetPort %s", name, p, ports[name], name)
		}
	}
	if r.replicas > 1 {
		pdb := find("PodDisruptionBudget", r.namespace, r.name)
		sel, _, _ = unstructured.NestedStringMap(pdb.Object, "spec", "selector", "matchLabels")
		matches("PodDisruptionBudget", sel)
		if m := str(pdb.Object, "spec", "maxUnavailable"); m != fmt.Sprint(r.maxUnavailable) {
			t.Errorf("PodDisruptionBudget: maxUnavailable %s, want %d", m, r.maxUnavailable)
		}
	} else if n := count("PodDisruptionBudget"); n != 0 {
		t.Errorf("%d PodDisruptionBudgets for one replica (it would block every drain)", n)
	}

	// The RBAC the config needs: the Lease and the Queue objects in the
	// Lease's namespace, the informers' resources.
	bound := func(kind, ns, name string) []map[string]any {
		t.Helper()
		role := find(kind, ns, name)
		b := find(kind+"Binding", ns, name)
		subj := list(b.Object, "subjects")
		if str(b.Object, "roleRef", "name") != name || len(subj) != 1 || subj[0]["name"] != sa.GetName() || subj[0]["namespace"] != sa.GetNamespace() {
			t.Errorf("%sBinding %s/%s does not bind %s to service account %s/%s", kind, ns, name, name, sa.GetNamespace(), sa.GetName())
		}
		return list(role.Object, "rules")
	}
	grants := func(rules []map[string]any, group, resource, name string, verbs ...string) bool {
		for _, r := range rules {
			g, _, _ := unstructured.NestedSlice(r, "apiGroups")
			res, _, _ := unstructured.NestedSlice(r, "resources")
			names, _, _ := unstructured.NestedSlice(r, "resourceNames")
			v, _, _ := unstructured.NestedSlice(r, "verbs")
			if hasAll(g, group) && hasAll(res, resource) && (len(names) == 0 || (name != "" && hasAll(names, name))) && hasAll(v, verbs...) {
				return true
			}
		}
		return false
	}
	if r.leaderElection {
		le := bound("Role", leaseNS, r.name+"-leader-election")
		if !grants(le, "coordination.k8s.io", "leases", leaseName, "get", "update") || !grants(le, "coordination.k8s.io", "leases", "", "create") {
			t.Errorf("Role %s/%s-leader-election does not grant get, update on Lease %s and create on leases", leaseNS, r.name, leaseName)
		}
		if !grants(bound("Role", leaseNS, r.name+"-queues"), "informerd.io", "queues", "", "get", "list", "watch", "create", "update", "delete") {
			t.Errorf("Role %s/%s-queues does not grant get, list, watch, create, update, delete on queues.informerd.io", leaseNS, r.name)
		}
	}
	// Each informer's resource, cluster-wide or in its namespace only.
	clusterWide := bound("ClusterRole", "", r.name)
	for _, inf := range list(cfg, "informers") {
		g, res, ns := str(inf, "resource", "group"), str(inf, "resource", "resource"), str(inf, "namespace")
		if ns == "" && !grants(clusterWide, g, res, "", "list", "watch") {
			t.Errorf("ClusterRole %s does not grant list, watch on %q of group %q (informer %s of config.yaml)", r.name, res, g, str(inf, "name"))
		}
		if ns != "" && !grants(bound("Role", ns, r.name+"-informers"), g, res, "", "list", "watch") {
			t.Errorf("Role %s/%s-informers does not grant list, watch on %q of group %q (informer %s of config.yaml)", ns, r.name, res, g, str(inf, "name"))
		}
	}
	// No rule anywhere with a wildcard, and informerd never writes what it caches.
	for _, m := range ms {
		if k := m.obj.GetKind(); k != "ClusterRole" && k != "Role" {
			continue
		}
		for _, rule := range list(m.obj.Object, "rules") {
			for _, f := range []string{"apiGroups", "resources", "verbs"} {
				v, _, _ := unstructured.NestedStringSlice(rule, f)
				if slices.Contains(v, "*") {
					t.Errorf("%s: a rule with %s \"*\": %v", m.where, f, rule)
				}
			}
		}
	}

	// The CRD as design and daemon expect it.
	if count("CustomResourceDefinition") == 0 {
		return
	}
	crd := find("CustomResourceDefinition", "", "queues.informerd.io")
	for f, want := range map[string]string{"group": "informerd.io", "scope": "Namespaced", "names.kind": "Queue", "names.plural": "queues"} {
		if got := str(crd.Object, append([]string{"spec"}, strings.Split(f, ".")...)...); got != want {
			t.Errorf("CRD: spec.%s %s, want %s", f, got, want)
		}
	}
	vs := list(crd.Object, "spec", "versions")
	if len(vs) != 1 || vs[0]["name"] != "v1alpha1" || vs[0]["served"] != true || vs[0]["storage"] != true ||
		str(vs[0], "schema", "openAPIV3Schema", "properties", "spec", "x-kubernetes-preserve-unknown-fields") != "true" {
		t.Errorf("CRD: versions %v, want v1alpha1 served and stored, spec with x-kubernetes-preserve-unknown-fields", vs)
	}

	// The admission policy lets informerd's service account write Queues.
	if count("ValidatingAdmissionPolicy") == 0 {
		return
	}
	vap := find("ValidatingAdmissionPolicy", "", r.name+"-queues-writers")
	if v := list(vap.Object, "spec", "validations"); len(v) != 1 || !strings.Contains(str(v[0], "expression"), `"system:serviceaccount:`+sa.GetNamespace()+":"+sa.GetName()+`"`) {
		t.Errorf("ValidatingAdmissionPolicy %s-queues-writers does not let service account %s/%s write: %v", r.name, sa.GetNamespace(), sa.GetName(), v)
	}
	find("ValidatingAdmissionPolicyBinding", "", r.name+"-queues-writers")
}
