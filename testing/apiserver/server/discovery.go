package server

import (
	"net/http"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
)

// Discovery: the legacy documents (/api, /api/v1, /apis, /apis/G, /apis/G/V)
// and, when the client asks for it in Accept, aggregated discovery
// (apidiscovery.k8s.io/v2 APIGroupDiscoveryList) for /api and /apis.

const aggregatedContentType = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

func wantsAggregated(req *http.Request) bool {
	for _, part := range strings.Split(req.Header.Get("Accept"), ",") {
		p := strings.ReplaceAll(part, " ", "")
		if strings.Contains(p, "g=apidiscovery.k8s.io") && strings.Contains(p, "v=v2;") && strings.Contains(p, "as=APIGroupDiscoveryList") {
			return true
		}
		if strings.HasPrefix(p, "application/json") && !strings.Contains(p, "g=") {
			return false // plain JSON preferred first
		}
	}
	return false
}

func (srv *Server) groupsAndVersions() (map[string][]string, map[string][]*resourceStore) {
	versions := map[string][]string{}
	byGV := map[string][]*resourceStore{}
	for _, r := range srv.store.resources() {
		gv := r.def.GroupVersion()
		if _, ok := byGV[gv]; !ok {
			versions[r.def.Group] = append(versions[r.def.Group], r.def.Version)
		}
		byGV[gv] = append(byGV[gv], r)
	}
	return versions, byGV
}

func (srv *Server) serveDiscovery(w http.ResponseWriter, req *http.Request, parts []string) bool {
	versions, byGV := srv.groupsAndVersions()
	switch {
	case len(parts) == 1 && parts[0] == "api":
		if wantsAggregated(req) {
			writeJSON(w, 200, aggregatedContentType, srv.aggregated(true, versions, byGV))
			return true
		}
		writeJSON(w, 200, "", metav1.APIVersions{
			TypeMeta:                   metav1.TypeMeta{Kind: "APIVersions"},
			Versions:                   []string{"v1"},
			ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{{ClientCIDR: "0.0.0.0/0", ServerAddress: req.Host}},
		})
		return true
	case len(parts) == 2 && parts[0] == "api" && parts[1] == "v1":
		writeJSON(w, 200, "", resourceList("v1", byGV["v1"]))
		return true
	case len(parts) == 1 && parts[0] == "apis":
		if wantsAggregated(req) {
			writeJSON(w, 200, aggregatedContentType, srv.aggregated(false, versions, byGV))
			return true
		}
		list := metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{}}
		for _, g := range groupOrder(keysOf(versions)) {
			list.Groups = append(list.Groups, apiGroup(g, versions[g]))
		}
		writeJSON(w, 200, "", list)
		return true
	case len(parts) == 2 && parts[0] == "apis":
		vs, ok := versions[parts[1]]
		if !ok || parts[1] == "" {
			return false
		}
		g := apiGroup(parts[1], vs)
		g.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
		writeJSON(w, 200, "", g)
		return true
	case len(parts) == 3 && parts[0] == "apis":
		rs, ok := byGV[parts[1]+"/"+parts[2]]
		if !ok {
			return false
		}
		writeJSON(w, 200, "", resourceList(parts[1]+"/"+parts[2], rs))
		return true
	}
	return false
}

func keysOf(m map[string][]string) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

func apiGroup(g string, vs []string) metav1.APIGroup {
	out := metav1.APIGroup{Name: g}
	for _, v := range vs {
		out.Versions = append(out.Versions, metav1.GroupVersionForDiscovery{GroupVersion: g + "/" + v, Version: v})
	}
	out.PreferredVersion = out.Versions[0]
	return out
}

var statusVerbs = []string{"get", "patch", "update"}

func resourceList(gv string, rs []*resourceStore) metav1.APIResourceList {
	out := metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv, APIResources: []metav1.APIResource{}}
	for _, r := range rs {
		d := &r.def
		out.APIResources = append(out.APIResources, metav1.APIResource{
			Name: d.Resource, SingularName: d.Singular, Namespaced: d.Namespaced, Kind: d.Kind,
			Verbs: allVerbs, ShortNames: d.ShortNames, Categories: d.Categories,
		})
		if d.Status {
			out.APIResources = append(out.APIResources, metav1.APIResource{
				Name: d.Resource + "/status", Namespaced: d.Namespaced, Kind: d.Kind, Verbs: statusVerbs,
			})
		}
	}
	return out
}

func (srv *Server) aggregated(core bool, versions map[string][]string, byGV map[string][]*resourceStore) apidiscoveryv2.APIGroupDiscoveryList {
	out := apidiscoveryv2.APIGroupDiscoveryList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupDiscoveryList", APIVersion: "apidiscovery.k8s.io/v2"}}
	groups := []string{""}
	if !core {
		groups = groupOrder(keysOf(versions))
	}
	for _, g := range groups {
		gd := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: g}}
		for _, v := range versions[g] {
			gv := v
			if g != "" {
				gv = g + "/" + v
			}
			vd := apidiscoveryv2.APIVersionDiscovery{Version: v, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
			for _, r := range byGV[gv] {
				d := &r.def
				scope := apidiscoveryv2.ScopeCluster
				if d.Namespaced {
					scope = apidiscoveryv2.ScopeNamespace
				}
				kind := &metav1.GroupVersionKind{Group: d.Group, Version: d.Version, Kind: d.Kind}
				rd := apidiscoveryv2.APIResourceDiscovery{Resource: d.Resource, ResponseKind: kind, Scope: scope,
					SingularResource: d.Singular, Verbs: allVerbs, ShortNames: d.ShortNames, Categories: d.Categories}
				if d.Status {
					rd.Subresources = []apidiscoveryv2.APISubresourceDiscovery{{Subresource: "status", ResponseKind: kind, Verbs: statusVerbs}}
				}
				vd.Resources = append(vd.Resources, rd)
			}
			gd.Versions = append(gd.Versions, vd)
		}
		out.Items = append(out.Items, gd)
	}
	return out
}

func versionInfo() version.Info {
	return version.Info{Major: "1", Minor: "37", GitVersion: "v1.37.2-fake", GitCommit: "0000000000000000000000000000000000000000",
		GitTreeState: "clean", BuildDate: "2026-01-01T00:00:00Z", GoVersion: "go1.26", Compiler: "gc", Platform: "linux/amd64"}
}
