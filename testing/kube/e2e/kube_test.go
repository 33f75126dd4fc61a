// Package e2e starts the real kube-apiserver through testing/kube/start
// (building out/kube-testserver when needed; see package kubetest) and
// checks with client-go that kubectl-style requests work against it.
package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"informerd/testing/kube/kubetest"
)

func clientFor(t *testing.T, kubeconfig string) *kubernetes.Clientset {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("load %s: %v", kubeconfig, err)
	}
	cfg.Timeout = 30 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func TestRealAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real kube-apiserver")
	}
	s := kubetest.Start(t)
	admin := clientFor(t, s.Kubeconfig)
	unprivileged := clientFor(t, s.UnprivilegedKubeconfig)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	t.Run("readyz", func(t *testing.T) {
		body, err := admin.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(string(body)) != "ok" {
			t.Fatalf("/readyz = %q", body)
		}
		// Every individual check, as `kubectl get --raw /readyz?verbose`.
		body, err = admin.Discovery().RESTClient().Get().AbsPath("/readyz").Param("verbose", "true").DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(body), "[+]etcd ok") || !strings.Contains(string(body), "readyz check passed") {
			t.Fatalf("/readyz?verbose:\n%s", body)
		}
	})

	t.Run("discovery", func(t *testing.T) {
		v, err := admin.Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		if v.Major != "1" || v.Minor != "37" || !strings.HasPrefix(v.GitVersion, "v1.37.") {
			t.Errorf("server version %+v, want v1.37.x", v)
		}
		groups, resources, err := admin.Discovery().ServerGroupsAndResources()
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, g := range groups {
			names[g.Name] = true
		}
		for _, want := range []string{"", "apps", "rbac.authorization.k8s.io", "apiextensions.k8s.io", "coordination.k8s.io"} {
			if !names[want] {
				t.Errorf("group %q missing from discovery", want)
			}
		}
		found := false
		for _, list := range resources {
			if list.GroupVersion != "v1" {
				continue
			}
			for _, r := range list.APIResources {
				if r.Name == "configmaps" && r.Namespaced && hasVerbs(r.Verbs, "create", "get", "list", "watch", "update", "patch", "delete") {
					found = true
				}
			}
		}
		if !found {
			t.Error("v1 configmaps (namespaced, with all verbs) missing from discovery")
		}
	})

	t.Run("identity", func(t *testing.T) {
		for _, c := range []struct {
			cs       *kubernetes.Clientset
			user     string
			inGroups []string
		}{
			{admin, "admin", []string{"system:masters", "system:authenticated"}},
			{unprivileged, "unprivileged", []string{"informerd:unprivileged", "system:authenticated"}},
		} {
			r, err := c.cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("%s: SelfSubjectReview: %v", c.user, err)
			}
			if r.Status.UserInfo.Username != c.user {
				t.Errorf("authenticated as %q, want %q", r.Status.UserInfo.Username, c.user)
			}
			for _, g := range c.inGroups {
				if !contains(r.Status.UserInfo.Groups, g) {
					t.Errorf("%s: groups %v lack %q", c.user, r.Status.UserInfo.Groups, g)
				}
			}
		}
	})

	t.Run("configmaps", func(t *testing.T) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "informerd-e2e-"}}
		ns, err := admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create namespace: %v", err)
		}
		cms := admin.CoreV1().ConfigMaps(ns.Name)
		labels := map[string]string{"app": "informerd-e2e"}

		// Watch from the (empty) list's resourceVersion, as an informer does.
		list, err := cms.List(ctx, metav1.ListOptions{LabelSelector: "app=informerd-e2e"})
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		if len(list.Items) != 0 {
			t.Fatalf("fresh namespace has %d configmaps", len(list.Items))
		}
		w, err := cms.Watch(ctx, metav1.ListOptions{
			LabelSelector:       "app=informerd-e2e",
			ResourceVersion:     list.ResourceVersion,
			AllowWatchBookmarks: true,
		})
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		defer w.Stop()

		created, err := cms.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "one", Labels: labels},
			Data:       map[string]string{"k": "v1"},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		dup := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "one"}}
		if _, err := cms.Create(ctx, dup, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
			t.Errorf("second create: %v, want AlreadyExists", err)
		}

		got, err := cms.Get(ctx, "one", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		if got.Data["k"] != "v1" || got.UID != created.UID {
			t.Errorf("get returned %+v", got)
		}

		got.Data["k"] = "v2"
		updated, err := cms.Update(ctx, got, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("update: %v", err)
		}
		if updated.ResourceVersion == got.ResourceVersion {
			t.Errorf("update kept resourceVersion %s", got.ResourceVersion)
		}
		// A stale resourceVersion conflicts, as optimistic concurrency requires.
		got.Data["k"] = "stale"
		if _, err := cms.Update(ctx, got, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			t.Errorf("stale update: %v, want Conflict", err)
		}

		list, err = cms.List(ctx, metav1.ListOptions{LabelSelector: "app=informerd-e2e"})
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		if len(list.Items) != 1 || list.Items[0].Data["k"] != "v2" {
			t.Errorf("list after update: %+v", list.Items)
		}

		if err := cms.Delete(ctx, "one", metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if _, err := cms.Get(ctx, "one", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("get after delete: %v, want NotFound", err)
		}

		want := []struct {
			typ  watch.EventType
			data string
		}{{watch.Added, "v1"}, {watch.Modified, "v2"}, {watch.Deleted, "v2"}}
		timeout := time.After(30 * time.Second)
		for i := 0; i < len(want); {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					t.Fatalf("watch closed after %d of %d events", i, len(want))
				}
				if ev.Type == watch.Bookmark {
					continue
				}
				cm, isCM := ev.Object.(*corev1.ConfigMap)
				if !isCM || ev.Type != want[i].typ || cm.Name != "one" || cm.Data["k"] != want[i].data {
					t.Fatalf("watch event %d: %s %#v, want %s with k=%s", i, ev.Type, ev.Object, want[i].typ, want[i].data)
				}
				i++
			case <-timeout:
				t.Fatalf("timed out waiting for watch event %d (%s)", i, want[i].typ)
			}
		}

		// Without a controller-manager the namespace stays Terminating; the
		// request itself must still be accepted.
		if err := admin.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete namespace: %v", err)
		}
	})

	t.Run("pods-without-controllers", func(t *testing.T) {
		// ServiceAccount admission is off, so a pod is accepted although no
		// controller created the "default" service account.
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "informerd-e2e-"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/none"}}},
		}
		created, err := admin.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create pod: %v", err)
		}
		if err := admin.CoreV1().Pods("default").Delete(ctx, created.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete pod: %v", err)
		}
	})

	t.Run("unprivileged-forbidden", func(t *testing.T) {
		_, err := unprivileged.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("unprivileged list secrets cluster-wide: %v, want Forbidden", err)
		}
		// Authenticated (not 401) and allowed what every user is allowed.
		if _, err := unprivileged.Discovery().ServerVersion(); err != nil {
			t.Errorf("unprivileged discovery: %v", err)
		}
		// The admin may do the same.
		if _, err := admin.CoreV1().Secrets("").List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("admin list secrets: %v", err)
		}
	})
}

func hasVerbs(have []string, want ...string) bool {
	for _, v := range want {
		if !contains(have, v) {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
