#include "bench/pods.h"

#include "absl/strings/str_cat.h"

namespace informerd::bench {

namespace {

std::string Container(int i, int c, int envs) {
  std::string env;
  for (int e = 0; e < envs; ++e) {
    if (e) env += ",";
    env += absl::StrCat(R"({"name":"FEATURE_FLAG_)", e, R"(","value":"enabled-for-tenant-)", (i + e) % 97, R"("})");
  }
  return absl::StrCat(
      R"({"name":"app-)", c, R"(","image":"registry.example.com/shop/app-)", c,
      R"(:v1.)", i % 9, R"(.3","command":["/bin/server","--port=8080","--log-level=info"],)",
      R"("ports":[{"name":"http","containerPort":8080,"protocol":"TCP"},{"name":"metrics","containerPort":9090,"protocol":"TCP"}],)",
      R"("env":[)", env, R"(],"resources":{"limits":{"cpu":"1","memory":"512Mi"},"requests":{"cpu":"250m","memory":"256Mi"}},)",
      R"("volumeMounts":[{"name":"config","mountPath":"/etc/app"},{"name":"kube-api-access-x7k2p","readOnly":true,"mountPath":"/var/run/secrets/kubernetes.io/serviceaccount"}],)",
      R"("livenessProbe":{"httpGet":{"path":"/healthz","port":8080,"scheme":"HTTP"},"initialDelaySeconds":10,"timeoutSeconds":1,"periodSeconds":10,"successThreshold":1,"failureThreshold":3},)",
      R"("readinessProbe":{"httpGet":{"path":"/readyz","port":8080,"scheme":"HTTP"},"timeoutSeconds":1,"periodSeconds":5,"successThreshold":1,"failureThreshold":3},)",
      R"("terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"})");
}

std::string ContainerStatus(int i, int c) {
  return absl::StrCat(
      R"({"name":"app-)", c, R"(","state":{"running":{"startedAt":"2026-03-01T10:00:)", 10 + c,
      R"(Z"}},"lastState":{},"ready":true,"restartCount":)", i % 3,
      R"(,"image":"registry.example.com/shop/app-)", c, R"(:v1.)", i % 9,
      R"(.3","imageID":"registry.example.com/shop/app@sha256:4f3c2b1a0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b",)",
      R"("containerID":"containerd://9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b","started":true})");
}

}  // namespace

std::string Pod(int i, int rv, int containers, int envs) {
  std::string cs, statuses;
  for (int c = 0; c < containers; ++c) {
    if (c) cs += ",", statuses += ",";
    cs += Container(i, c, envs);
    statuses += ContainerStatus(i, c);
  }
  return absl::StrCat(
      R"({"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-7d9f8b6c5-)", i,
      R"(","generateName":"web-7d9f8b6c5-","namespace":"team-)", i % 7,
      R"(","uid":"0c2f4e6a-8b1d-4f3a-9c5e-)", 200000000000 + i, R"(","resourceVersion":")", rv,
      R"(","generation":1,"creationTimestamp":"2026-03-01T10:00:00Z",)",
      R"("labels":{"app":"web","pod-template-hash":"7d9f8b6c5","tier":"frontend","version":"v1"},)",
      R"("annotations":{"kubectl.kubernetes.io/restartedAt":"2026-02-28T09:00:00Z","prometheus.io/scrape":"true","prometheus.io/port":"9090"},)",
      R"("ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-7d9f8b6c5","uid":"5e1d3c2b-0a9f-4e8d-7c6b-5a4f3e2d1c0b","controller":true,"blockOwnerDeletion":true}],)",
      R"("managedFields":[{"manager":"kube-controller-manager","operation":"Update","apiVersion":"v1","time":"2026-03-01T10:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:generateName":{},"f:labels":{".":{},"f:app":{},"f:pod-template-hash":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"5e1d3c2b\"}":{}}},"f:spec":{"f:containers":{},"f:dnsPolicy":{},"f:restartPolicy":{}}}},)",
      R"({"manager":"kubelet","operation":"Update","apiVersion":"v1","time":"2026-03-01T10:00:20Z","fieldsType":"FieldsV1","fieldsV1":{"f:status":{"f:conditions":{},"f:containerStatuses":{},"f:hostIP":{},"f:phase":{},"f:podIP":{},"f:startTime":{}}},"subresource":"status"}]},)",
      R"("spec":{"volumes":[{"name":"config","configMap":{"name":"web-config","defaultMode":420}},{"name":"kube-api-access-x7k2p","projected":{"sources":[{"serviceAccountToken":{"expirationSeconds":3607,"path":"token"}},{"configMap":{"name":"kube-root-ca.crt","items":[{"key":"ca.crt","path":"ca.crt"}]}}],"defaultMode":420}}],)",
      R"("containers":[)", cs, R"(],"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","serviceAccountName":"web","serviceAccount":"web","nodeName":"node-)", i % 50,
      R"(","securityContext":{"runAsNonRoot":true,"fsGroup":2000},"schedulerName":"default-scheduler",)",
      R"("tolerations":[{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300},{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}],)",
      R"("priority":0,"enableServiceLinks":true,"preemptionPolicy":"PreemptLowerPriority"},)",
      R"("status":{"phase":"Running","conditions":[{"type":"Initialized","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-03-01T10:00:01Z"},{"type":"Ready","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-03-01T10:00:20Z"},{"type":"ContainersReady","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-03-01T10:00:20Z"},{"type":"PodScheduled","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-03-01T10:00:00Z"}],)",
      R"("hostIP":"10.0.)", i % 50, R"(.1","podIP":"10.244.)", i % 50, ".", i % 250,
      R"(","podIPs":[{"ip":"10.244.)", i % 50, ".", i % 250, R"("}],"startTime":"2026-03-01T10:00:00Z","containerStatuses":[)",
      statuses, R"(],"qosClass":"Burstable"}})");
}

std::string SmallPod(int i, int rv) {
  return absl::StrCat(
      R"({"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-7d9f8b6c5-)", i,
      R"(","namespace":"team-)", i % 7, R"(","uid":"0c2f4e6a-8b1d-4f3a-9c5e-)", 200000000000 + i,
      R"(","resourceVersion":")", rv, R"(","creationTimestamp":"2026-03-01T10:00:00Z",)",
      R"("labels":{"app":"web","pod-template-hash":"7d9f8b6c5"},)",
      R"("ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-7d9f8b6c5","uid":"5e1d3c2b-0a9f-4e8d-7c6b-5a4f3e2d1c0b","controller":true,"blockOwnerDeletion":true}]},)",
      R"("spec":{"containers":[{"name":"app","image":"registry.example.com/shop/app:v1.)", i % 9,
      R"(.3","ports":[{"containerPort":8080,"protocol":"TCP"}],"resources":{"requests":{"cpu":"250m","memory":"256Mi"}}}],)",
      R"("restartPolicy":"Always","nodeName":"node-)", i % 50, R"(","schedulerName":"default-scheduler"},)",
      R"("status":{"phase":"Running","hostIP":"10.0.)", i % 50, R"(.1","podIP":"10.244.)", i % 50, ".",
      i % 250, R"(","startTime":"2026-03-01T10:00:00Z","qosClass":"Burstable"}})");
}

std::string SizedPod(int i, int rv, size_t target) {
  if (target < 3000) return SmallPod(i, rv);
  int containers = target >= 50000 ? 8 : target >= 5000 ? 3 : 1;
  int envs = 0;
  std::string pod = Pod(i, rv, containers, envs);
  while (pod.size() < target * 95 / 100 && envs < 10000) {
    envs += 1 + static_cast<int>((target - pod.size()) / (containers * 70));
    pod = Pod(i, rv, containers, envs);
  }
  return pod;
}

}  // namespace informerd::bench
