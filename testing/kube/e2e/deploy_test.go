package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"informerd/testing/kube/kubetest"
)

// manifest is one object of a file under deploy/.
type manifest struct {
	where string // file:document
	path  string // the file
	obj   *unstructured.Unstructured
}

// notManifests are the directories of deploy/ that the tests of deploy/ do
// not apply: helm/ holds the chart (chart_test.go renders and applies it), and
// monitoring/ the Prometheus Operator's objects, whose CRDs only
// chart_test.go installs.
var notManifests = map[string]bool{"helm": true, "monitoring": true}

// manifestDirs are the directories of deploy/ with Kubernetes objects.
func manifestDirs(t *testing.T, root string) []string {
	t.Helper()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() && !notManifests[e.Name()] {
			dirs = append(dirs, filepath.Join(root, e.Name()))
		}
	}
	return dirs
}

// loadManifests reads every deploy/**/*.yaml (and .yml) outside notManifests,
// strictly: a duplicate key or a document that is not an object fails.
func loadManifests(t *testing.T, root string) []manifest {
	t.Helper()
	var out []manifest
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && path != root && notManifests[d.Name()] {
			return fs.SkipDir
		}
		if err != nil || d.IsDir() || (!strings.HasSuffix(path, ".yaml") && !strings.HasSuffix(path, ".yml")) {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out = append(out, parseManifests(t, path, filepath.Base(filepath.Dir(path))+"/"+filepath.Base(path), b)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("no manifests under %s", root)
	}
	return out
}

// parseManifests reads the objects of one YAML stream (path: the file it came
// from, for kubectl; where: how errors name it) strictly.
func parseManifests(t *testing.T, path, where string, b []byte) []manifest {
	t.Helper()
	var out []manifest
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		j, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			t.Errorf("%s document %d: %v", where, i, err)
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			t.Errorf("%s document %d: %v", where, i, err)
			continue
		}
		out = append(out, manifest{where: where + ":" + u.GetKind() + "/" + u.GetName(), path: path, obj: u})
	}
	return out
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			b.Write(l)
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

// TestDeployManifests creates every object under deploy/ on the real
// kube-apiserver with server-side dry run and strict field validation
// (unknown or duplicate fields fail), then creates them for real and checks
// with SubjectAccessReviews that the RBAC grants what deploy/README.md says,
// and no more, and that the admission policy keeps everyone but informerd
// from writing Queue objects.
func TestDeployManifests(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real kube-apiserver")
	}
	ms := loadManifests(t, filepath.Join("..", "..", "..", "deploy"))
	s := kubetest.Start(t)
	cfg := kubetest.RESTConfig(t, s.Kubeconfig)
	cfg.Timeout = 30 * time.Second
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	create := func(m manifest, dryRun bool) error {
		gvk := m.obj.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return err
		}
		opts := metav1.CreateOptions{FieldValidation: "Strict", FieldManager: "deploy-test"}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			if m.obj.GetNamespace() == "" {
				return errors.New("namespaced object without metadata.namespace")
			}
			ri = dyn.Resource(mapping.Resource).Namespace(m.obj.GetNamespace())
		} else if m.obj.GetNamespace() != "" {
			return errors.New("cluster-scoped object with metadata.namespace")
		}
		_, err = ri.Create(ctx, m.obj.DeepCopy(), opts)
		return err
	}

	// Namespaces first (a dry run does not create them, and the objects in
	// them would be refused without them), then everything else.
	for _, m := range ms {
		if m.obj.GetKind() != "Namespace" {
			continue
		}
		if err := create(m, true); err != nil {
			t.Fatalf("%s: dry run: %v", m.where, err)
		}
		if err := create(m, false); err != nil {
			t.Fatalf("%s: %v", m.where, err)
		}
	}
	for _, m := range ms {
		if m.obj.GetKind() == "Namespace" {
			continue
		}
		if err := create(m, true); err != nil {
			t.Errorf("%s: dry run: %v", m.where, err)
		} else {
			t.Logf("%s: ok", m.where)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	// The check does catch a field the API does not know.
	for _, m := range ms {
		if m.obj.GetKind() != "ClusterRole" {
			continue
		}
		bad := manifest{where: m.where, obj: m.obj.DeepCopy()}
		bad.obj.Object["rulez"] = []any{}
		if err := create(bad, true); err == nil || !strings.Contains(err.Error(), `unknown field "rulez"`) {
			t.Fatalf("an unknown field passed the dry run: %v", err)
		}
		break
	}

	// Create them for real and ask the API server what they grant.
	for _, m := range ms {
		if m.obj.GetKind() == "Namespace" {
			continue
		}
		if err := create(m, false); err != nil {
			t.Fatalf("%s: %v", m.where, err)
		}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sa := func(ns, name string) (string, []string) {
		return "system:serviceaccount:" + ns + ":" + name, []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	}
	type check struct {
		user     string
		groups   []string
		ns, verb string
		group    string
		resource string
		name     string
		allowed  bool
	}
	daemon, daemonGroups := sa("informerd", "informerd")
	ctrl, ctrlGroups := sa("team-a", "my-controller")
	checks := []check{
		// informerd itself.
		{daemon, daemonGroups, "", "create", "authentication.k8s.io", "tokenreviews", "", true},
		{daemon, daemonGroups, "", "create", "authorization.k8s.io", "subjectaccessreviews", "", true},
		{daemon, daemonGroups, "", "list", "", "configmaps", "", true},
		{daemon, daemonGroups, "", "watch", "", "configmaps", "", true},
		{daemon, daemonGroups, "", "watch", "", "secrets", "", false},
		{daemon, daemonGroups, "team-a", "watch", "", "configmaps", "", true},
		{daemon, daemonGroups, "team-a", "get", "", "secrets", "s", false},
		{daemon, daemonGroups, "team-a", "create", "", "configmaps", "", false},
		{daemon, daemonGroups, "", "list", "", "pods", "", false},
		{daemon, daemonGroups, "informerd", "create", "coordination.k8s.io", "leases", "", true},
		{daemon, daemonGroups, "informerd", "get", "coordination.k8s.io", "leases", "informerd", true},
		{daemon, daemonGroups, "informerd", "update", "coordination.k8s.io", "leases", "informerd", true},
		{daemon, daemonGroups, "informerd", "update", "coordination.k8s.io", "leases", "other", false},
		{daemon, daemonGroups, "kube-system", "get", "coordination.k8s.io", "leases", "informerd", false},
		{daemon, daemonGroups, "", "create", "coordination.k8s.io", "leases", "", false},
		// Its Queue objects (queues.informerd.io), in its namespace only.
		{daemon, daemonGroups, "informerd", "get", "informerd.io", "queues", "q", true},
		{daemon, daemonGroups, "informerd", "list", "informerd.io", "queues", "", true},
		{daemon, daemonGroups, "informerd", "watch", "informerd.io", "queues", "", true},
		{daemon, daemonGroups, "informerd", "create", "informerd.io", "queues", "", true},
		{daemon, daemonGroups, "informerd", "update", "informerd.io", "queues", "q", true},
		{daemon, daemonGroups, "informerd", "delete", "informerd.io", "queues", "q", true},
		{daemon, daemonGroups, "informerd", "patch", "informerd.io", "queues", "q", false},
		{daemon, daemonGroups, "informerd", "deletecollection", "informerd.io", "queues", "", false},
		{daemon, daemonGroups, "team-a", "list", "informerd.io", "queues", "", false},
		{daemon, daemonGroups, "", "list", "informerd.io", "queues", "", false},
		// A controller using informerd.
		{ctrl, ctrlGroups, "", "work", "informerd.io", "queues", "my-queue", true},
		{ctrl, ctrlGroups, "", "get", "informerd.io", "queues", "my-queue", true},
		{ctrl, ctrlGroups, "", "update", "informerd.io", "queues", "my-queue", true},
		{ctrl, ctrlGroups, "", "create", "informerd.io", "queues", "my-queue", true},
		{ctrl, ctrlGroups, "", "delete", "informerd.io", "queues", "my-queue", false},
		{ctrl, ctrlGroups, "", "work", "informerd.io", "queues", "other-queue", false},
		{ctrl, ctrlGroups, "team-a", "list", "", "configmaps", "", true},
		{ctrl, ctrlGroups, "team-a", "watch", "", "configmaps", "", true},
		{ctrl, ctrlGroups, "", "list", "", "configmaps", "", false},
		{ctrl, ctrlGroups, "team-b", "list", "", "configmaps", "", false},
		{ctrl, ctrlGroups, "team-a", "list", "", "secrets", "", false},
		{ctrl, ctrlGroups, "", "admin", "informerd.io", "daemon", "", false},
		// The same rule names the Queue objects of the CRD: RBAC lets the
		// controller update informerd/my-queue on the API server itself, which
		// crd/queues-write-policy.yaml refuses (checked below).
		{ctrl, ctrlGroups, "informerd", "update", "informerd.io", "queues", "my-queue", true},
		// Operators.
		{"op", []string{"informerd-admins", "system:authenticated"}, "", "admin", "informerd.io", "daemon", "", true},
		{"op", []string{"system:authenticated"}, "", "admin", "informerd.io", "daemon", "", false},
	}
	for _, c := range checks {
		r, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: c.user, Groups: c.groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: c.ns, Verb: c.verb, Group: c.group, Resource: c.resource, Name: c.name},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed != c.allowed {
			t.Errorf("%s %s %s.%s %q in %q: allowed=%v (%s), want %v", c.user, c.verb, c.resource, c.group, c.name, c.ns, r.Status.Allowed, r.Status.Reason, c.allowed)
		}
	}

	// Only informerd (and system:masters) writes Queue objects: the
	// admission policy refuses the controller's update that RBAC allows.
	queues := schema.GroupVersionResource{Group: "informerd.io", Version: "v1alpha1", Resource: "queues"}
	queue := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "informerd.io/v1alpha1", "kind": "Queue",
		"metadata": map[string]any{"name": "my-queue", "namespace": "informerd", "labels": map[string]any{"informerd.io/lease": "informerd"}},
		"spec":     map[string]any{"name": "my-queue", "sources": []any{map[string]any{"informerId": "configmaps"}}},
	}}
	as := func(user string, groups []string) dynamic.ResourceInterface {
		c := rest.CopyConfig(cfg)
		c.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
		d, err := dynamic.NewForConfig(c)
		if err != nil {
			t.Fatal(err)
		}
		return d.Resource(queues).Namespace("informerd")
	}
	// The CRD was just created: it serves once Established.
	var createErr error
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, createErr = dyn.Resource(queues).Namespace("informerd").Create(ctx, queue, metav1.CreateOptions{})
		return createErr == nil, nil
	}); err != nil {
		t.Fatalf("create Queue informerd/my-queue as admin: %v (%v)", err, createErr)
	}
	// The policy takes effect when the API server has loaded it.
	var denied error
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		cur, err := dyn.Resource(queues).Namespace("informerd").Get(ctx, "my-queue", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_ = unstructured.SetNestedField(cur.Object, "60000", "spec", "resyncPeriodMs")
		_, denied = as(ctrl, ctrlGroups).Update(ctx, cur, metav1.UpdateOptions{})
		return denied != nil, nil
	}); err != nil {
		t.Fatalf("the controller's update of its Queue object was never refused: %v", err)
	}
	if !apierrors.IsForbidden(denied) || !strings.Contains(denied.Error(), "ValidatingAdmissionPolicy 'informerd-queues-writers'") {
		t.Errorf("the controller's update of its Queue object: %v, want Forbidden by informerd-queues-writers", denied)
	}
	stored, err := dyn.Resource(queues).Namespace("informerd").Get(ctx, "my-queue", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(stored.Object, "30000", "spec", "resyncPeriodMs")
	if _, err := as(daemon, daemonGroups).Update(ctx, stored, metav1.UpdateOptions{}); err != nil {
		t.Errorf("informerd's update of a Queue object: %v", err)
	}
	other := queue.DeepCopy()
	other.SetName("other-queue")
	if _, err := as(daemon, daemonGroups).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Errorf("informerd's create of a Queue object: %v", err)
	}
	if err := as(daemon, daemonGroups).Delete(ctx, "other-queue", metav1.DeleteOptions{}); err != nil {
		t.Errorf("informerd's delete of a Queue object: %v", err)
	}
}
