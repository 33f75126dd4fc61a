package server

import (
	"fmt"
	"sort"
	"strings"
)

// GenerationPolicy says when metadata.generation is set and bumped.
type GenerationPolicy string

const (
	// GenerationNone: the resource has no generation (ConfigMaps, Secrets, ...).
	GenerationNone GenerationPolicy = ""
	// GenerationSpec: generation starts at 1 and is bumped when .spec changes
	// (Deployments, Pods).
	GenerationSpec GenerationPolicy = "spec"
	// GenerationNonMetadata: generation starts at 1 and is bumped when anything but
	// .metadata and .status changes (custom resources).
	GenerationNonMetadata GenerationPolicy = "nonmetadata"
)

// ResourceDef describes one served resource (a GVR and its Kind).
type ResourceDef struct {
	Group      string   `json:"group"`
	Version    string   `json:"version"`
	Resource   string   `json:"resource"`
	Kind       string   `json:"kind"`
	ListKind   string   `json:"listKind,omitempty"`
	Singular   string   `json:"singularName,omitempty"`
	Namespaced bool     `json:"namespaced"`
	ShortNames []string `json:"shortNames,omitempty"`
	Categories []string `json:"categories,omitempty"`
	// Status: the resource has a /status subresource; the main endpoint then
	// ignores changes to .status and /status changes nothing else.
	Status     bool             `json:"status,omitempty"`
	Generation GenerationPolicy `json:"generation,omitempty"`
	// CustomResource: list items carry kind/apiVersion, updates need a
	// resourceVersion, strategic merge patch is refused — as for CRDs.
	CustomResource bool `json:"customResource,omitempty"`
	// ExtraFieldSelectors are field labels accepted besides metadata.name and
	// metadata.namespace; each is a dotted path into the object.
	ExtraFieldSelectors []string `json:"fieldSelectors,omitempty"`
}

// GroupVersion is "v1" for the core group, "group/version" otherwise.
func (r *ResourceDef) GroupVersion() string {
	if r.Group == "" {
		return r.Version
	}
	return r.Group + "/" + r.Version
}

// ID names the resource in the control API: "configmaps" (core) or
// "apps/v1/deployments".
func (r *ResourceDef) ID() string {
	if r.Group == "" {
		return r.Version + "/" + r.Resource
	}
	return r.Group + "/" + r.Version + "/" + r.Resource
}

func (r *ResourceDef) complete() error {
	if r.Version == "" || r.Resource == "" || r.Kind == "" {
		return fmt.Errorf("version, resource and kind are required")
	}
	if strings.ContainsAny(r.Resource, "/ ") || strings.ContainsAny(r.Group, "/ ") {
		return fmt.Errorf("invalid group or resource name")
	}
	if r.ListKind == "" {
		r.ListKind = r.Kind + "List"
	}
	if r.Singular == "" {
		r.Singular = strings.ToLower(r.Kind)
	}
	return nil
}

var allVerbs = []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}

// BuiltinResources are served from startup.
func BuiltinResources() []ResourceDef {
	return []ResourceDef{
		{Version: "v1", Resource: "namespaces", Kind: "Namespace", ShortNames: []string{"ns"}, Status: true, ExtraFieldSelectors: []string{"status.phase"}},
		{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true, ShortNames: []string{"cm"}},
		{Version: "v1", Resource: "secrets", Kind: "Secret", Namespaced: true, ExtraFieldSelectors: []string{"type"}},
		{Version: "v1", Resource: "pods", Kind: "Pod", Namespaced: true, ShortNames: []string{"po"}, Categories: []string{"all"}, Status: true, Generation: GenerationSpec,
			ExtraFieldSelectors: []string{"spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"}},
		{Version: "v1", Resource: "services", Kind: "Service", Namespaced: true, ShortNames: []string{"svc"}, Categories: []string{"all"}, Status: true,
			ExtraFieldSelectors: []string{"spec.clusterIP", "spec.type"}},
		{Group: "apps", Version: "v1", Resource: "deployments", Kind: "Deployment", Namespaced: true, ShortNames: []string{"deploy"}, Categories: []string{"all"}, Status: true, Generation: GenerationSpec},
		{Group: "coordination.k8s.io", Version: "v1", Resource: "leases", Kind: "Lease", Namespaced: true},
	}
}

// preferredGroupOrder keeps /apis in the order the real server lists groups
// (legacy groups first, then the rest, then custom groups by name).
func groupOrder(groups map[string]bool) []string {
	var out []string
	for g := range groups {
		if g != "" {
			out = append(out, g)
		}
	}
	rank := func(g string) int {
		switch g {
		case "apps":
			return 0
		case "coordination.k8s.io":
			return 1
		}
		return 2
	}
	sort.Slice(out, func(i, j int) bool {
		ri, rj := rank(out[i]), rank(out[j])
		if ri != rj {
			return ri < rj
		}
		return out[i] < out[j]
	})
	return out
}
