package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

// Store holds every resource's objects and event history under one lock, with
// one global resourceVersion counter like etcd's revision.
//
// Thread safety: all methods may be called from any goroutine. Stored *object
// values are immutable and may be used after the lock is released.
type Store struct {
	mu           sync.RWMutex
	rv           uint64                    // GUARDED_BY(mu): the last revision written
	byGVR        map[string]*resourceStore // GUARDED_BY(mu): "group/version/resource"
	order        []*resourceStore          // GUARDED_BY(mu): registration order
	historyCap   int
	dropDecoded  bool // Options.DropDecoded
	now          func() time.Time
	anyChange    chan struct{} // GUARDED_BY(mu): closed and replaced on every commit
	tooLargeWait time.Duration
	// emptying is the namespace terminateNamespaceLocked is deleting the
	// content of (GUARDED_BY(mu)): it checks once at the end whether the
	// namespace can go, not after every deletion (each check sorts the keys).
	emptying string
	// preencode takes events to encode in the formats their resource's
	// watchers asked for (respond.go), off the write path.
	preencode chan preencodeJob
	encoding  atomic.Int64  // events queued or being encoded
	stopped   chan struct{} // closed when the server shuts down
}

// resourceStore is one resource's current state and its bounded event history.
type resourceStore struct {
	def        ResourceDef
	protobuf   bool          // a built-in type with a protobuf encoding
	wantWire   atomic.Uint32 // bit w: a watch in wireFormat w was served; new events are encoded in it ahead
	typePrefix []byte        // `{"kind":"ConfigMap","apiVersion":"v1",`
	sizeHint   atomic.Int64  // the largest frame built so far, to size buffers

	// The fields below are GUARDED_BY(Store.mu).
	objects map[string]*object
	sorted  []string // the keys of objects in order, valid iff !dirty
	dirty   bool
	hist    ring
	// floor is the oldest resourceVersion a watch may start from (and a list
	// may be served at): every event of this resource after floor is in hist.
	floor uint64
	// compacted is the storage's compaction revision: exact lists and
	// continue tokens need a resourceVersion >= max(floor, compacted).
	compacted uint64
	notify    chan struct{} // closed and replaced when an event is appended

	watchMu  sync.Mutex
	watchers map[*watchState]struct{} // GUARDED_BY(watchMu)
}

type eventType string

const (
	evAdded    eventType = "ADDED"
	evModified eventType = "MODIFIED"
	evDeleted  eventType = "DELETED"
	evBookmark eventType = "BOOKMARK"
	evError    eventType = "ERROR"
)

// event is one change of one resource. frame is the serialized watch event,
// built once and written unchanged to every watcher that sees it.
type event struct {
	rv    uint64
	typ   eventType
	obj   *object // the object as sent (for DELETED: last state at the deletion's RV)
	prev  *object // the stored object before this event; nil for ADDED
	frame []byte

	variantMu sync.Mutex
	asDeleted *object                  // GUARDED_BY(variantMu): the previous state at rv, for selector watchers the object left
	frames    atomic.Pointer[frameSet] // frames in other formats and variants (respond.go), written under variantMu
}

func buildFrame(typ eventType, objJSON []byte) []byte {
	b := make([]byte, 0, len(objJSON)+32)
	b = append(b, `{"type":"`...)
	b = append(b, typ...)
	b = append(b, `","object":`...)
	b = append(b, objJSON...)
	b = append(b, "}\n"...)
	return b
}

// ring is a bounded FIFO of events in resourceVersion order.
type ring struct {
	buf   []*event
	start int
	n     int
	total uint64 // events ever pushed; the ring holds seqs [total-n, total)
}

// firstSeq is the sequence number of at(0).
func (h *ring) firstSeq() uint64 { return h.total - uint64(h.n) }

func (h *ring) push(e *event) (evicted *event) {
	h.total++
	if h.n == len(h.buf) {
		evicted = h.buf[h.start]
		h.buf[h.start] = e
		h.start = (h.start + 1) % len(h.buf)
		return evicted
	}
	h.buf[(h.start+h.n)%len(h.buf)] = e
	h.n++
	return nil
}

func (h *ring) at(i int) *event { return h.buf[(h.start+i)%len(h.buf)] }

// after returns the index of the first event with rv > rv.
func (h *ring) after(rv uint64) int {
	return sort.Search(h.n, func(i int) bool { return h.at(i).rv > rv })
}

func (h *ring) clear() {
	for i := range h.buf {
		h.buf[i] = nil
	}
	h.start, h.n = 0, 0
}

func newStore(historyCap int, now func() time.Time) *Store {
	if historyCap < 1 {
		historyCap = 1
	}
	return &Store{
		rv:           1,
		byGVR:        map[string]*resourceStore{},
		historyCap:   historyCap,
		now:          now,
		anyChange:    make(chan struct{}),
		tooLargeWait: 3 * time.Second,
		preencode:    make(chan preencodeJob, 1<<16),
		stopped:      make(chan struct{}),
	}
}

func gvrKey(group, version, resource string) string { return group + "/" + version + "/" + resource }

// Register adds a resource type; registering an existing GVR again fails.
func (s *Store) Register(def ResourceDef) error {
	if err := def.complete(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := gvrKey(def.Group, def.Version, def.Resource)
	if _, ok := s.byGVR[k]; ok {
		return fmt.Errorf("resource %s already registered", def.ID())
	}
	r := &resourceStore{
		def:        def,
		protobuf:   hasProtobuf(&def),
		typePrefix: []byte(fmt.Sprintf(`{"kind":%q,"apiVersion":%q,`, def.Kind, def.GroupVersion())),
		objects:    map[string]*object{},
		hist:       ring{buf: make([]*event, s.historyCap)},
		floor:      s.rv,
		notify:     make(chan struct{}),
		watchers:   map[*watchState]struct{}{},
	}
	s.byGVR[k] = r
	s.order = append(s.order, r)
	return nil
}

func (s *Store) lookup(group, version, resource string) *resourceStore {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.byGVR[gvrKey(group, version, resource)]
}

// find resolves a control-API resource name: "configmaps", "v1/configmaps",
// "apps/v1/deployments", "deployments.apps" or "deployments".
func (s *Store) find(name string) *resourceStore {
	s.mu.RLock()
	defer s.mu.RUnlock()
	parts := strings.Split(name, "/")
	for _, r := range s.order {
		d := &r.def
		switch len(parts) {
		case 1:
			if parts[0] == d.Resource || parts[0] == qualified(d) {
				return r
			}
		case 2:
			if parts[0] == d.GroupVersion() && parts[1] == d.Resource && d.Group == "" {
				return r
			}
		case 3:
			if parts[0] == d.Group && parts[1] == d.Version && parts[2] == d.Resource {
				return r
			}
		}
	}
	return nil
}

func (s *Store) resources() []*resourceStore {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]*resourceStore(nil), s.order...)
}

// CurrentRV is the last revision written.
func (s *Store) CurrentRV() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rv
}

// commitLocked stores obj (nil to remove key) and appends the event.
// REQUIRES: s.mu held for writing; obj.rv == ev rv == s.rv.
func (s *Store) commitLocked(r *resourceStore, typ eventType, key string, stored, sent, prev *object) {
	if stored == nil {
		delete(r.objects, key)
		r.dirty = true
	} else {
		if _, ok := r.objects[key]; !ok {
			r.dirty = true
		}
		r.objects[key] = stored
	}
	if prev != nil {
		prev.dropDecoded()
	}
	if stored != nil && s.dropDecoded {
		stored.dropDecoded()
	}
	frame := sent.frame
	if sent.frameType != typ {
		frame = buildFrame(typ, sent.full)
	}
	ev := &event{rv: sent.rv, typ: typ, obj: sent, prev: prev, frame: frame}
	if r.hist.push(ev) != nil {
		r.floor = r.hist.at(0).rv - 1
	}
	if r.wantWire.Load() != 0 {
		// Blocks (under the lock) only when the encoder is 64k events
		// behind: writers then go at its pace.
		s.encoding.Add(1)
		select {
		case s.preencode <- preencodeJob{r, ev}:
		case <-s.stopped:
			s.encoding.Add(-1)
		}
	}
	close(r.notify)
	r.notify = make(chan struct{})
	close(s.anyChange)
	s.anyChange = make(chan struct{})
}

// compact drops the history of r (all resources if nil): watches, exact lists
// and continue tokens older than the current revision then get 410 Gone.
func (s *Store) compact(r *resourceStore) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.order {
		if r == nil || x == r {
			x.hist.clear()
			x.floor = s.rv
		}
	}
}

// compactStorage compacts r's storage (all resources if nil) at the current
// revision, keeping the watch history: exact lists and continue tokens
// older than now get 410 Gone, watches do not.
func (s *Store) compactStorage(r *resourceStore) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.order {
		if r == nil || x == r {
			x.compacted = s.rv
		}
	}
}

// listFloorLocked is the oldest resourceVersion r can serve a list at.
func (r *resourceStore) listFloorLocked() uint64 { return max(r.floor, r.compacted) }

func (r *resourceStore) sortedKeysLocked() []string {
	if r.dirty || r.sorted == nil {
		keys := make([]string, 0, len(r.objects))
		for k := range r.objects {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		r.sorted = keys
		r.dirty = false
	}
	return r.sorted
}

// stateAtLocked returns r's objects at revision at, in key order, limited to
// keys with prefix scope. at must be >= r.floor.
// REQUIRES: s.mu held (read or write) — writers call sortedKeysLocked, so
// callers holding only the read lock must go through Store.snapshot.
func (r *resourceStore) stateAtLocked(at uint64, scope string) []*object {
	keys := r.sortedKeysLocked()
	from := sort.SearchStrings(keys, scope)
	var overlay map[string]*object // key -> state at `at` (nil: absent)
	if r.hist.n > 0 && r.hist.at(r.hist.n-1).rv > at {
		overlay = map[string]*object{}
		first := r.hist.after(at)
		for i := r.hist.n - 1; i >= first; i-- {
			ev := r.hist.at(i)
			if !strings.HasPrefix(ev.obj.key, scope) {
				continue
			}
			if ev.typ == evAdded {
				overlay[ev.obj.key] = nil
			} else {
				overlay[ev.obj.key] = ev.prev
			}
		}
	}
	out := make([]*object, 0, len(keys)-from)
	for _, k := range keys[from:] {
		if !strings.HasPrefix(k, scope) {
			break
		}
		if overlay != nil {
			if o, ok := overlay[k]; ok {
				if o != nil {
					out = append(out, o)
				}
				delete(overlay, k)
				continue
			}
		}
		out = append(out, r.objects[k])
	}
	if len(overlay) > 0 { // objects deleted since `at`
		for _, o := range overlay {
			if o != nil {
				out = append(out, o)
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	}
	return out
}

// snapshot takes the lock needed by stateAtLocked (sorting the key cache
// mutates it, so it needs the write lock when the cache is stale).
func (s *Store) snapshot(r *resourceStore, at uint64, scope string) []*object {
	s.mu.RLock()
	if !r.dirty && r.sorted != nil {
		defer s.mu.RUnlock()
		return r.stateAtLocked(at, scope)
	}
	s.mu.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	return r.stateAtLocked(at, scope)
}

// waitForRV blocks until the store reached rv or wait elapsed.
func (s *Store) waitForRV(ctx context.Context, rv uint64, wait time.Duration) (uint64, bool) {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		s.mu.RLock()
		cur, ch := s.rv, s.anyChange
		s.mu.RUnlock()
		if cur >= rv {
			return cur, true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return cur, false
		case <-ctx.Done():
			return cur, false
		}
	}
}

// ---- LIST ----

type listQuery struct {
	namespace string
	rv        string
	rvMatch   string
	limit     int64
	cont      string
	label     labels.Selector
	field     fields.Selector
}

type listResult struct {
	items     []*object
	rv        uint64
	cont      string
	remaining *int64
}

type continueToken struct {
	APIVersion      string `json:"v"`
	ResourceVersion int64  `json:"rv"`
	StartKey        string `json:"start"`
}

func encodeContinue(startKey string, rv int64) string {
	b, _ := json.Marshal(continueToken{APIVersion: "meta.k8s.io/v1", ResourceVersion: rv, StartKey: startKey})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeContinue(tok string) (string, int64, *apiError) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return "", 0, errBadRequest("invalid continue token: continue key is not valid: " + err.Error())
	}
	var c continueToken
	if err := json.Unmarshal(b, &c); err != nil {
		return "", 0, errBadRequest("invalid continue token: continue key is not valid: " + err.Error())
	}
	if c.APIVersion != "meta.k8s.io/v1" {
		return "", 0, errBadRequest("invalid continue token: continue key is not valid: server does not recognize this encoded version " + c.APIVersion)
	}
	if c.ResourceVersion == 0 {
		return "", 0, errBadRequest("invalid continue token: continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
	}
	if c.StartKey == "" {
		return "", 0, errBadRequest("invalid continue token: continue key is not valid: encoded start key empty (version meta.k8s.io/v1)")
	}
	k := c.StartKey
	if !strings.HasPrefix(k, "/") {
		k = "/" + k
	}
	// path.Clean would drop the trailing NUL's meaning; check traversal only.
	if cleaned := path.Clean(strings.TrimSuffix(k, "\x00")); cleaned != strings.TrimSuffix(k, "\x00") {
		return "", 0, errBadRequest("invalid continue token: continue key is not valid: " + c.StartKey)
	}
	return k[1:], c.ResourceVersion, nil
}

func parseRV(s string) (uint64, *apiError) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, errBadRequest("invalid resource version: " + invalidRVMessage(s, err))
	}
	return v, nil
}

// invalidRVMessage is the field.Invalid error of storage.APIObjectVersioner.
func invalidRVMessage(rv string, err error) string {
	return fmt.Sprintf("resourceVersion: Invalid value: %q: %v", rv, err)
}

func scopeOf(ns string) string {
	if ns == "" {
		return ""
	}
	return ns + "/"
}

// List serves a LIST with the real server's resourceVersion semantics.
func (s *Store) List(ctx context.Context, r *resourceStore, q listQuery) (*listResult, *apiError) {
	scope := scopeOf(q.namespace)
	limit := q.limit
	var at uint64
	startKey := scope

	switch {
	case q.cont != "":
		if q.rv != "" && q.rv != "0" {
			return nil, errBadRequest("specifying resource version is not allowed when using continue")
		}
		rel, tokRV, aerr := decodeContinue(q.cont)
		if aerr != nil {
			return nil, aerr
		}
		startKey = scope + rel
		s.mu.RLock()
		floor, cur := r.listFloorLocked(), s.rv
		s.mu.RUnlock()
		switch {
		case tokRV == -1:
			at = cur
		case uint64(tokRV) < floor:
			e := errExpired(msgInconsistentCont)
			e.Continue = encodeContinue(rel, -1)
			return nil, e
		default:
			at = uint64(tokRV)
		}
	case q.rvMatch == "Exact" || (q.rvMatch == "" && limit > 0 && q.rv != "" && q.rv != "0"):
		n, aerr := parseRV(q.rv)
		if aerr != nil {
			return nil, aerr
		}
		if cur, ok := s.waitForRV(ctx, n, s.tooLargeWait); !ok {
			return nil, errTooLargeRV(n, cur)
		}
		s.mu.RLock()
		floor := r.listFloorLocked()
		s.mu.RUnlock()
		if n < floor {
			return nil, errExpired(msgListTooOld)
		}
		at = n
	default:
		if q.rv == "0" {
			limit = 0 // served from the watch cache, which ignores limit for RV=0
		}
		if q.rv != "" && q.rv != "0" {
			n, aerr := parseRV(q.rv)
			if aerr != nil {
				return nil, aerr
			}
			if cur, ok := s.waitForRV(ctx, n, s.tooLargeWait); !ok {
				return nil, errTooLargeRV(n, cur)
			}
		}
		at = s.CurrentRV()
	}

	all := s.snapshot(r, at, scope)
	from := sort.Search(len(all), func(i int) bool { return all[i].key >= startKey })
	rest := all[from:]
	res := &listResult{rv: at}
	match := selectorMatcher(r, q.label, q.field)
	hasMore := false
	for i, o := range rest {
		if match != nil && !match(o) {
			continue
		}
		res.items = append(res.items, o)
		if limit > 0 && int64(len(res.items)) >= limit {
			hasMore = i < len(rest)-1
			if hasMore {
				last := o.key
				res.cont = encodeContinue(strings.TrimPrefix(last, scope)+"\x00", int64(at))
				if match == nil {
					rem := int64(len(rest)) - limit
					res.remaining = &rem
				}
			}
			break
		}
	}
	return res, nil
}

// Get returns the current object.
func (s *Store) Get(r *resourceStore, ns, name string) (*object, *apiError) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	o := r.objects[objectKey(ns, name)]
	if o == nil {
		return nil, errNotFound(&r.def, name)
	}
	return o, nil
}

func selectorMatcher(r *resourceStore, ls labels.Selector, fs fields.Selector) func(*object) bool {
	if (ls == nil || ls.Empty()) && (fs == nil || fs.Empty()) {
		return nil
	}
	return func(o *object) bool {
		if ls != nil && !ls.Empty() && !ls.Matches(labels.Set(o.labels)) {
			return false
		}
		if fs != nil && !fs.Empty() && !fs.Matches(objectFields(r, o)) {
			return false
		}
		return true
	}
}

func objectFields(r *resourceStore, o *object) fields.Set {
	set := fields.Set{"metadata.name": o.name}
	if r.def.Namespaced {
		set["metadata.namespace"] = o.namespace
	}
	for _, f := range r.def.ExtraFieldSelectors {
		if v, ok := fieldValue(o.dataMap(), f); ok {
			set[f] = v
		}
	}
	return set
}
