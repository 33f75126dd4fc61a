package server

import (
	"sort"
	"strings"
)

// managedFields: like the real server, every write records which manager
// (the User-Agent's first word, or ?fieldManager=) last set which fields, as
// metadata.managedFields entries of operation "Update" in FieldsV1 form.
// Simplified: an entry lists every field of the object the manager wrote
// (lists are atomic leaves), and other managers' entries are kept as they are.
// Free-form string maps (labels, annotations, data, binaryData, stringData)
// carry the "." member for the map itself, as structured-merge-diff records
// a map field that the write added; struct fields (spec, …) do not.

// managerOf is the apiserver's prefixFromUserAgent, overridden by fieldManager.
func managerOf(userAgent, fieldManager string) string {
	if fieldManager != "" {
		return fieldManager
	}
	m := strings.SplitN(userAgent, "/", 2)[0]
	if m == "" {
		m = "unknown"
	}
	if len(m) > 128 {
		m = m[:128]
	}
	return m
}

// fieldsV1 builds the FieldsV1 set of a JSON value: maps become {"f:key": ...},
// anything else a leaf {}.
func fieldsV1(v any) map[string]any {
	m, ok := v.(map[string]any)
	if !ok {
		return map[string]any{}
	}
	out := make(map[string]any, len(m))
	for k, e := range m {
		out["f:"+k] = fieldsV1(e)
	}
	return out
}

// mapFieldsV1 is fieldsV1 of a non-empty free-form map, with its "." member.
func mapFieldsV1(v any) map[string]any {
	out := fieldsV1(v)
	if len(out) > 0 {
		out["."] = map[string]any{}
	}
	return out
}

// freeFormMaps are the top-level fields of built-in kinds that are maps
// rather than structs.
var freeFormMaps = map[string]bool{"data": true, "binaryData": true, "stringData": true}

// ownedFields is the field set a write of data by the main resource (or the
// status subresource) sets.
func ownedFields(data map[string]any, subresource string, custom bool) map[string]any {
	if subresource == "status" {
		if st, ok := data["status"]; ok {
			return map[string]any{"f:status": fieldsV1(st)}
		}
		return map[string]any{}
	}
	out := map[string]any{}
	for k, v := range data {
		if k == "metadata" || k == "status" || k == "kind" || k == "apiVersion" {
			continue
		}
		if freeFormMaps[k] && !custom {
			out["f:"+k] = mapFieldsV1(v)
		} else {
			out["f:"+k] = fieldsV1(v)
		}
	}
	meta, _ := data["metadata"].(map[string]any)
	fm := map[string]any{}
	for _, k := range []string{"labels", "annotations"} {
		if v, ok := meta[k].(map[string]any); ok && len(v) > 0 {
			fm["f:"+k] = mapFieldsV1(v)
		}
	}
	for _, k := range []string{"finalizers", "ownerReferences", "generateName"} {
		if _, ok := meta[k]; ok {
			fm["f:"+k] = map[string]any{}
		}
	}
	if len(fm) > 0 {
		out["f:metadata"] = fm
	}
	return out
}

// recordManager sets the writer's entry in meta["managedFields"], keeping
// the others, in the real server's order (by time of write, newest last).
func recordManager(meta map[string]any, prev []any, manager, apiVersion, subresource, now string, data map[string]any, custom bool) {
	entries := make([]any, 0, len(prev)+1)
	for _, e := range prev {
		m, ok := e.(map[string]any)
		if !ok {
			continue
		}
		if m["manager"] == manager && m["operation"] == "Update" && str(m, "subresource") == subresource {
			continue
		}
		entries = append(entries, m)
	}
	fields := ownedFields(data, subresource, custom)
	if len(fields) > 0 {
		e := map[string]any{"manager": manager, "operation": "Update", "apiVersion": apiVersion, "time": now,
			"fieldsType": "FieldsV1", "fieldsV1": fields}
		if subresource != "" {
			e["subresource"] = subresource
		}
		entries = append(entries, e)
	}
	sort.SliceStable(entries, func(i, j int) bool {
		return str(entries[i].(map[string]any), "time") < str(entries[j].(map[string]any), "time")
	})
	if len(entries) == 0 {
		delete(meta, "managedFields")
		return
	}
	meta["managedFields"] = entries
}
