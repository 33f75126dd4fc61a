package server

import (
	"encoding/json"
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Writes: create, update (PUT and the /status subresource), patch and delete,
// with the registry semantics of the real server: server-owned metadata,
// generation, resourceVersion preconditions, no-op updates that write nothing,
// finalizers and namespace termination.

// writeOpts are per-request knobs of a write.
type writeOpts struct {
	subresource string // "" or "status"
	dryRun      bool
	// manager, when set, records a metadata.managedFields entry for the write.
	manager string
}

func (s *Store) nsStoreLocked() *resourceStore { return s.byGVR[gvrKey("", "v1", "namespaces")] }

func (s *Store) checkNamespaceLocked(r *resourceStore, ns, name string) *apiError {
	if !r.def.Namespaced {
		return nil
	}
	nss := s.nsStoreLocked()
	if nss == nil {
		return nil
	}
	n := nss.objects[ns]
	if n == nil {
		return errNamespaceNotFound(ns)
	}
	if _, terminating := metaOf(n.dataMap())["deletionTimestamp"]; terminating {
		return errForbiddenTerminating(&r.def, name, ns)
	}
	return nil
}

func validateName(r *ResourceDef, name string) *apiError {
	var msgs []string
	if r.Resource == "namespaces" {
		msgs = validation.IsDNS1123Label(name)
	} else {
		msgs = validation.IsDNS1123Subdomain(name)
	}
	if len(msgs) == 0 {
		return nil
	}
	return errInvalid(r.Kind, r.Group, name, statusCause{Type: "FieldValueInvalid", Field: "metadata.name",
		Message: fmt.Sprintf("Invalid value: %q: %s", name, msgs[0])})
}

func checkTypeMeta(r *ResourceDef, data map[string]any) *apiError {
	if av, ok := data["apiVersion"].(string); ok && av != "" && av != r.GroupVersion() {
		return errBadRequest(fmt.Sprintf("the API version in the data (%s) does not match the expected API version (%s)", av, r.GroupVersion()))
	}
	if k, ok := data["kind"].(string); ok && k != "" && k != r.Kind {
		return errBadRequest(fmt.Sprintf("the kind in the data (%s) does not match the expected kind (%s)", k, r.Kind))
	}
	return nil
}

// Create stores a new object. data is owned by the call.
func (s *Store) Create(r *resourceStore, ns string, data map[string]any, o writeOpts) (*object, *apiError) {
	d := &r.def
	if e := checkTypeMeta(d, data); e != nil {
		return nil, e
	}
	meta := metaOf(data)
	if d.Namespaced {
		if bns := str(meta, "namespace"); bns != "" && bns != ns {
			return nil, errBadRequest("the namespace of the provided object does not match the namespace sent on the request")
		}
		meta["namespace"] = ns
	} else {
		delete(meta, "namespace")
	}
	name := str(meta, "name")
	if name == "" {
		if gn := str(meta, "generateName"); gn != "" {
			name = gn + randomSuffix(5)
			meta["name"] = name
		} else {
			return nil, errInvalid(d.Kind, d.Group, "", statusCause{Type: "FieldValueRequired", Field: "metadata.name", Message: "Required value: name or generateName is required"})
		}
	}
	if e := validateName(d, name); e != nil {
		return nil, e
	}
	for _, k := range []string{"uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation", "selfLink", "managedFields"} {
		delete(meta, k)
	}
	meta["uid"] = newUID()
	meta["creationTimestamp"] = timestamp(s.now())
	if d.Generation != GenerationNone {
		meta["generation"] = json.Number("1")
	}
	prepareCreateDefaults(d, data, meta, name)
	if o.manager != "" {
		recordManager(meta, nil, o.manager, d.GroupVersion(), o.subresource, timestamp(s.now()), data, d.CustomResource)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.checkNamespaceLocked(r, ns, name); e != nil {
		return nil, e
	}
	key := objectKey(ns, name)
	if r.objects[key] != nil {
		return nil, errAlreadyExists(d, name)
	}
	if o.dryRun {
		meta["resourceVersion"] = ""
		obj, err := r.finish(data, "")
		if err != nil {
			return nil, errInternal(err.Error())
		}
		return obj, nil
	}
	rv := s.rv + 1
	meta["resourceVersion"] = strconv.FormatUint(rv, 10)
	obj, err := r.finish(data, evAdded)
	if err != nil {
		return nil, errInternal(err.Error())
	}
	s.rv = rv
	s.commitLocked(r, evAdded, key, obj, obj, nil)
	return obj, nil
}

func prepareCreateDefaults(d *ResourceDef, data, meta map[string]any, name string) {
	switch {
	case d.Group == "" && d.Resource == "namespaces":
		lbl, _ := meta["labels"].(map[string]any)
		if lbl == nil {
			lbl = map[string]any{}
			meta["labels"] = lbl
		}
		lbl["kubernetes.io/metadata.name"] = name
		data["spec"] = map[string]any{"finalizers": []any{"kubernetes"}}
		data["status"] = map[string]any{"phase": "Active"}
	case d.Group == "" && d.Resource == "pods":
		data["status"] = map[string]any{"phase": "Pending"}
	case d.Group == "" && d.Resource == "services":
		data["status"] = map[string]any{"loadBalancer": map[string]any{}}
	case d.Group == "apps" && d.Resource == "deployments":
		data["status"] = map[string]any{}
	case d.Status:
		delete(data, "status")
	}
}

// systemMeta are metadata fields the server owns on update.
var systemMeta = []string{"uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation", "namespace", "name", "selfLink"}

// Update replaces an object (PUT). data is owned by the call.
func (s *Store) Update(r *resourceStore, ns, name string, data map[string]any, o writeOpts) (*object, *apiError) {
	d := &r.def
	if e := checkTypeMeta(d, data); e != nil {
		return nil, e
	}
	meta := metaOf(data)
	if bn := str(meta, "name"); bn != name {
		return nil, errBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", bn, name))
	}
	if d.Namespaced {
		if bns := str(meta, "namespace"); bns != "" && bns != ns {
			return nil, errBadRequest("the namespace of the provided object does not match the namespace sent on the request")
		}
	}
	wantRV := str(meta, "resourceVersion")
	if wantRV == "" && d.CustomResource {
		return nil, errInvalid(d.Kind, d.Group, name, statusCause{Type: "FieldValueInvalid", Field: "metadata.resourceVersion",
			Message: "Invalid value: 0x0: must be specified for an update"})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.updateLocked(r, objectKey(ns, name), name, wantRV, func(*object) (map[string]any, *apiError) { return data, nil }, o)
}

// updateLocked is the read-modify-write core of PUT and PATCH. mutate gets the
// current object (read-only) and returns the desired object, which it owns.
// REQUIRES: s.mu held for writing.
func (s *Store) updateLocked(r *resourceStore, key, name, wantRV string, mutate func(cur *object) (map[string]any, *apiError), o writeOpts) (*object, *apiError) {
	d := &r.def
	cur := r.objects[key]
	if cur == nil {
		return nil, errNotFound(d, name)
	}
	curRV := strconv.FormatUint(cur.rv, 10)
	if wantRV != "" && wantRV != curRV {
		return nil, errConflict(d, name, conflictModified)
	}
	want, aerr := mutate(cur)
	if aerr != nil {
		return nil, aerr
	}
	if e := checkTypeMeta(d, want); e != nil {
		return nil, e
	}
	delete(want, "kind")
	delete(want, "apiVersion")
	if v := str(metaOf(want), "resourceVersion"); v != "" && v != curRV {
		return nil, errConflict(d, name, conflictModified)
	}
	var next map[string]any
	if o.subresource == "status" {
		next = copyMap(cur.dataMap())
		if st, ok := want["status"]; ok {
			next["status"] = st
		} else {
			delete(next, "status")
		}
	} else {
		next = want
		nm := metaOf(next)
		cm := metaOf(cur.dataMap())
		for _, k := range systemMeta {
			if v, ok := cm[k]; ok {
				nm[k] = v
			} else {
				delete(nm, k)
			}
		}
		if _, sent := nm["managedFields"]; !sent { // unset in the request: keep
			if v, ok := cm["managedFields"]; ok {
				nm["managedFields"] = v
			}
		}
		// A deletion in progress cannot be undone and finalizers cannot be
		// added to it — the real server rejects that; keep it simple: keep
		// the old deletionTimestamp (done above).
		if d.Status {
			if st, ok := cur.dataMap()["status"]; ok {
				next["status"] = st
			} else {
				delete(next, "status")
			}
		}
		if d.Resource == "namespaces" && d.Group == "" {
			next["spec"] = cur.dataMap()["spec"]
		}
	}
	nm := metaOf(next)
	nm["resourceVersion"] = curRV
	if d.Generation != GenerationNone && o.subresource != "status" && generationChanged(d, cur.dataMap(), next) {
		g, _ := strconv.ParseInt(fmt.Sprint(metaOf(cur.dataMap())["generation"]), 10, 64)
		nm["generation"] = json.Number(strconv.FormatInt(g+1, 10))
	}
	if jsonEqual(next, cur.dataMap()) {
		return cur, nil // no-op update: nothing is written, no event
	}
	if o.manager != "" {
		prev, _ := nm["managedFields"].([]any)
		recordManager(nm, prev, o.manager, d.GroupVersion(), o.subresource, timestamp(s.now()), next, d.CustomResource)
	}
	if o.dryRun {
		obj, err := r.finish(next, "")
		if err != nil {
			return nil, errInternal(err.Error())
		}
		return obj, nil
	}
	rv := s.rv + 1
	nm["resourceVersion"] = strconv.FormatUint(rv, 10)
	obj, err := r.finish(next, evModified)
	if err != nil {
		return nil, errInternal(err.Error())
	}
	s.rv = rv
	s.commitLocked(r, evModified, key, obj, obj, cur)
	if _, deleting := nm["deletionTimestamp"]; deleting && !hasFinalizers(r, obj) {
		s.removeLocked(r, obj)
	}
	return obj, nil
}

func generationChanged(d *ResourceDef, old, next map[string]any) bool {
	if d.Generation == GenerationSpec {
		return !jsonEqual(old["spec"], next["spec"])
	}
	strip := func(m map[string]any) map[string]any {
		c := make(map[string]any, len(m))
		for k, v := range m {
			if k != "metadata" && k != "status" {
				c[k] = v
			}
		}
		return c
	}
	return !jsonEqual(strip(old), strip(next))
}

func hasFinalizers(r *resourceStore, o *object) bool {
	if f, _ := metaOf(o.dataMap())["finalizers"].([]any); len(f) > 0 {
		return true
	}
	if r.def.Group == "" && r.def.Resource == "namespaces" {
		if spec, _ := o.dataMap()["spec"].(map[string]any); spec != nil {
			if f, _ := spec["finalizers"].([]any); len(f) > 0 {
				return true
			}
		}
	}
	return false
}

// removeLocked deletes o for good: a DELETED event at a new revision.
// REQUIRES: s.mu held for writing.
func (s *Store) removeLocked(r *resourceStore, o *object) *object {
	s.rv++
	sent := r.withRV(o, s.rv, evDeleted)
	s.commitLocked(r, evDeleted, o.key, nil, sent, o)
	if r.def.Namespaced {
		s.maybeFinishNamespaceLocked(o.namespace)
	}
	return sent
}

type deletePreconditions struct {
	UID             *string `json:"uid,omitempty"`
	ResourceVersion *string `json:"resourceVersion,omitempty"`
}

// Delete removes an object, or marks it for deletion when it has finalizers.
// deleted reports whether the object is gone (the response is then a Status,
// except for resources that return the deleted object).
func (s *Store) Delete(r *resourceStore, ns, name string, pre deletePreconditions, o writeOpts) (obj *object, deleted bool, aerr *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deleteLocked(r, objectKey(ns, name), name, pre, o)
}

func (s *Store) deleteLocked(r *resourceStore, key, name string, pre deletePreconditions, o writeOpts) (*object, bool, *apiError) {
	d := &r.def
	cur := r.objects[key]
	if cur == nil {
		return nil, false, errNotFound(d, name)
	}
	if pre.UID != nil && *pre.UID != cur.uid {
		return nil, false, errPreconditionConflict(d, name, fmt.Sprintf("the UID in the precondition (%s) does not match the UID in record (%s). The object might have been deleted and then recreated", *pre.UID, cur.uid))
	}
	if pre.ResourceVersion != nil && *pre.ResourceVersion != strconv.FormatUint(cur.rv, 10) {
		return nil, false, errPreconditionConflict(d, name, fmt.Sprintf("the ResourceVersion in the precondition (%s) does not match the ResourceVersion in record (%d). The object might have been modified", *pre.ResourceVersion, cur.rv))
	}
	if o.dryRun {
		return cur, !hasFinalizers(r, cur), nil
	}
	if !hasFinalizers(r, cur) {
		return s.removeLocked(r, cur), true, nil
	}
	cm := metaOf(cur.dataMap())
	if _, already := cm["deletionTimestamp"]; already {
		return cur, false, nil
	}
	next := copyMap(cur.dataMap())
	nm := metaOf(next)
	nm["deletionTimestamp"] = timestamp(s.now())
	nm["deletionGracePeriodSeconds"] = json.Number("0")
	if d.Generation != GenerationNone {
		g, _ := strconv.ParseInt(fmt.Sprint(cm["generation"]), 10, 64)
		nm["generation"] = json.Number(strconv.FormatInt(g+1, 10))
	}
	isNS := d.Group == "" && d.Resource == "namespaces"
	if isNS {
		st, _ := next["status"].(map[string]any)
		if st == nil {
			st = map[string]any{}
			next["status"] = st
		}
		st["phase"] = "Terminating"
	}
	s.rv++
	nm["resourceVersion"] = strconv.FormatUint(s.rv, 10)
	obj, err := r.finish(next, evModified)
	if err != nil {
		return nil, false, errInternal(err.Error())
	}
	s.commitLocked(r, evModified, key, obj, obj, cur)
	if isNS {
		s.terminateNamespaceLocked(obj.name)
		if now := r.objects[key]; now == nil {
			return obj, true, nil
		}
	}
	return obj, false, nil
}

// terminateNamespaceLocked does the namespace controller's work at once:
// delete everything in the namespace, then the namespace when it is empty.
func (s *Store) terminateNamespaceLocked(ns string) {
	s.emptying = ns
	for _, r := range s.order {
		if !r.def.Namespaced {
			continue
		}
		for _, o := range r.stateAtLocked(s.rv, ns+"/") {
			_, _, _ = s.deleteLocked(r, o.key, o.name, deletePreconditions{}, writeOpts{})
		}
	}
	s.emptying = ""
	s.maybeFinishNamespaceLocked(ns)
}

func (s *Store) maybeFinishNamespaceLocked(ns string) {
	nss := s.nsStoreLocked()
	if nss == nil || ns == s.emptying {
		return
	}
	n := nss.objects[ns]
	if n == nil {
		return
	}
	if _, terminating := metaOf(n.dataMap())["deletionTimestamp"]; !terminating {
		return
	}
	for _, r := range s.order {
		if !r.def.Namespaced {
			continue
		}
		keys := r.sortedKeysLocked()
		i := searchPrefix(keys, ns+"/")
		if i < len(keys) && len(keys[i]) > len(ns) && keys[i][:len(ns)+1] == ns+"/" {
			return
		}
	}
	s.removeLocked(nss, n)
}

func searchPrefix(keys []string, prefix string) int {
	lo, hi := 0, len(keys)
	for lo < hi {
		m := (lo + hi) / 2
		if keys[m] < prefix {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}
