package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The control endpoint (/_fake/...): faults, load helpers, runtime resource
// registration and statistics. It is not authenticated.

type controlError struct {
	Error string `json:"error"`
}

func writeControl(w http.ResponseWriter, code int, v any) {
	writeJSON(w, code, "", v)
}

func (s *Server) serveControl(w http.ResponseWriter, req *http.Request) {
	parts := splitPath(strings.TrimPrefix(req.URL.Path, "/_fake"))
	if len(parts) == 0 {
		writeControl(w, 404, controlError{"unknown control path"})
		return
	}
	decode := func(v any) bool {
		d := json.NewDecoder(http.MaxBytesReader(w, req.Body, 1<<20))
		d.DisallowUnknownFields()
		if err := d.Decode(v); err != nil {
			writeControl(w, 400, controlError{"bad request body: " + err.Error()})
			return false
		}
		return true
	}
	switch {
	case parts[0] == "faults" && len(parts) == 1 && req.Method == http.MethodPost:
		var spec FaultSpec
		if !decode(&spec) {
			return
		}
		if spec.Type == FaultRefuse || spec.Type == FaultResetConnections {
			// These end the connection this request came on: answer first.
			if err := spec.validate(); err != nil {
				writeControl(w, 400, controlError{err.Error()})
				return
			}
			writeControl(w, 200, FaultResult{Affected: s.connCount()})
			_ = http.NewResponseController(w).Flush()
			time.AfterFunc(20*time.Millisecond, func() { _, _ = s.InjectFault(spec) })
			return
		}
		res, err := s.InjectFault(spec)
		if err != nil {
			writeControl(w, 400, controlError{err.Error()})
			return
		}
		writeControl(w, 200, res)
	case parts[0] == "faults" && len(parts) == 1 && req.Method == http.MethodGet:
		writeControl(w, 200, s.faults.list())
	case parts[0] == "faults" && len(parts) == 1 && req.Method == http.MethodDelete:
		n := s.faults.clear(req.URL.Query().Get("userAgent"))
		writeControl(w, 200, map[string]any{"cleared": n})
	case parts[0] == "faults" && len(parts) == 2 && req.Method == http.MethodDelete:
		id, _ := strconv.Atoi(parts[1])
		if !s.faults.remove(id) {
			writeControl(w, 404, controlError{"no such fault"})
			return
		}
		writeControl(w, 200, map[string]any{})
	case parts[0] == "seed" && req.Method == http.MethodPost:
		var spec SeedSpec
		if !decode(&spec) {
			return
		}
		res, err := s.Seed(spec)
		if err != nil {
			writeControl(w, 400, controlError{err.Error()})
			return
		}
		writeControl(w, 200, res)
	case parts[0] == "churn" && len(parts) == 1 && req.Method == http.MethodPost:
		var spec ChurnSpec
		if !decode(&spec) {
			return
		}
		c, err := s.StartChurn(spec)
		if err != nil {
			writeControl(w, 400, controlError{err.Error()})
			return
		}
		if spec.Wait {
			select {
			case <-c.done:
			case <-req.Context().Done():
				c.stop()
				return
			}
		}
		writeControl(w, 200, c.status())
	case parts[0] == "churn" && len(parts) == 1 && req.Method == http.MethodGet:
		writeControl(w, 200, s.churnStatuses())
	case parts[0] == "churn" && len(parts) == 2:
		id, _ := strconv.Atoi(parts[1])
		s.churnMu.Lock()
		c := s.churns[id]
		s.churnMu.Unlock()
		if c == nil {
			writeControl(w, 404, controlError{"no such churn"})
			return
		}
		if req.Method == http.MethodDelete {
			c.stop()
			<-c.done
		}
		writeControl(w, 200, c.status())
	case parts[0] == "resources" && req.Method == http.MethodPost:
		var def ResourceDef
		if !decode(&def) {
			return
		}
		if err := s.RegisterResource(def); err != nil {
			writeControl(w, 400, controlError{err.Error()})
			return
		}
		writeControl(w, 201, def)
	case parts[0] == "resources" && req.Method == http.MethodGet:
		var defs []ResourceDef
		for _, r := range s.store.resources() {
			defs = append(defs, r.def)
		}
		writeControl(w, 200, defs)
	case parts[0] == "tokens" && len(parts) == 1 && req.Method == http.MethodPost:
		var spec TokenSpec
		if !decode(&spec) {
			return
		}
		if err := s.SetToken(spec); err != nil {
			writeControl(w, 400, controlError{err.Error()})
			return
		}
		writeControl(w, 200, spec)
	case parts[0] == "tokens" && len(parts) == 1 && req.Method == http.MethodGet:
		writeControl(w, 200, s.Tokens())
	case parts[0] == "tokens" && len(parts) >= 2 && req.Method == http.MethodDelete:
		// The token is the rest of the path (it may contain "/").
		token := strings.TrimPrefix(req.URL.Path, "/_fake/tokens/")
		if !s.DeleteToken(token) {
			writeControl(w, 404, controlError{"no such token"})
			return
		}
		writeControl(w, 200, map[string]any{})
	case parts[0] == "authz" && len(parts) == 2 && parts[1] == "rules" && req.Method == http.MethodPut:
		var body AuthzRules
		if !decode(&body) {
			return
		}
		if err := s.SetAuthzRules(body.Rules); err != nil {
			writeControl(w, 400, controlError{err.Error()})
			return
		}
		writeControl(w, 200, AuthzRules{Rules: s.AuthzRulesSnapshot()})
	case parts[0] == "authz" && len(parts) == 2 && parts[1] == "rules" && req.Method == http.MethodGet:
		writeControl(w, 200, AuthzRules{Rules: s.AuthzRulesSnapshot()})
	case parts[0] == "stats" && req.Method == http.MethodGet:
		writeControl(w, 200, s.Stats())
	default:
		writeControl(w, 404, controlError{"unknown control path or method"})
	}
}

// FaultResult is the answer to an injected fault.
type FaultResult struct {
	// ID of the armed request fault (delete it with DELETE /_fake/faults/ID).
	ID int `json:"id,omitempty"`
	// Affected counts the watches or connections an immediate fault acted on.
	Affected int `json:"affected"`
}

// InjectFault arms a request fault or performs an immediate one.
func (s *Server) InjectFault(spec FaultSpec) (FaultResult, error) {
	if err := spec.validate(); err != nil {
		return FaultResult{}, err
	}
	var res *resourceStore
	review := reviewResource(spec.Resource)
	if review != "" {
		switch spec.Type {
		case FaultCloseWatches, FaultBookmark, FaultCompact:
			return FaultResult{}, fmt.Errorf("%s does not apply to %s", spec.Type, spec.Resource)
		}
	} else if spec.Resource != "" {
		if res = s.store.find(spec.Resource); res == nil {
			return FaultResult{}, fmt.Errorf("unknown resource %q", spec.Resource)
		}
	}
	s.logf("fault: %+v", spec)
	switch spec.Type {
	case FaultCloseWatches:
		return FaultResult{Affected: s.forWatches(res, spec, func(ws *watchState) {
			if spec.AfterEvents <= 0 {
				ws.end()
			} else {
				ws.closeAfter.Store(int64(spec.AfterEvents))
			}
		})}, nil
	case FaultBookmark:
		return FaultResult{Affected: s.forWatches(res, spec, func(ws *watchState) {
			select {
			case ws.bookmarkNow <- struct{}{}:
			default:
			}
		})}, nil
	case FaultCompact:
		if spec.Mode == "etcd" {
			s.store.compactStorage(res)
		} else {
			s.store.compact(res)
		}
		return FaultResult{}, nil
	case FaultRefuse:
		d := spec.duration()
		if d <= 0 {
			d = time.Second
		}
		n := s.connCount()
		if err := s.refuse(d); err != nil {
			return FaultResult{}, err
		}
		return FaultResult{Affected: n}, nil
	case FaultResetConnections:
		return FaultResult{Affected: s.resetConnections()}, nil
	}
	a := s.faults.arm(spec, res, review)
	return FaultResult{ID: a.ID}, nil
}

// ClearFaults disarms every request fault.
func (s *Server) ClearFaults() { s.faults.clear("") }

func (s *Server) connCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

func (s *Server) forWatches(res *resourceStore, spec FaultSpec, f func(*watchState)) int {
	n := 0
	for _, r := range s.store.resources() {
		if res != nil && r != res {
			continue
		}
		r.watchMu.Lock()
		for ws := range r.watchers {
			if spec.Namespace != "" && ws.namespace != spec.Namespace {
				continue
			}
			if spec.UserAgent != "" && !strings.Contains(ws.userAgent, spec.UserAgent) {
				continue
			}
			f(ws)
			n++
		}
		r.watchMu.Unlock()
	}
	return n
}

// RegisterResource serves a new resource type (like creating a CRD).
func (s *Server) RegisterResource(def ResourceDef) error {
	if def.Group == "" && !def.CustomResource {
		// only core built-ins live in the legacy group
		return fmt.Errorf("runtime resources need a group")
	}
	return s.store.Register(def)
}

// StatsSnapshot is GET /_fake/stats.
type StatsSnapshot struct {
	ResourceVersion string `json:"resourceVersion"`
	Requests        int64  `json:"requests"`
	WatchesOpen     int64  `json:"watchesOpen"`
	WatchesTotal    int64  `json:"watchesTotal"`
	EventsSent      int64  `json:"eventsSent"`
	FaultsHit       int64  `json:"faultsHit"`
	Lists           int64  `json:"lists"`
	WatchLists      int64  `json:"watchLists"` // streaming lists (sendInitialEvents=true)
	// Requests to the review endpoints (every authenticated POST, including
	// rejected and faulted ones).
	TokenReviews         int64                    `json:"tokenReviews"`
	SubjectAccessReviews int64                    `json:"subjectAccessReviews"`
	Connections          int                      `json:"connections"`
	Resources            map[string]ResourceStats `json:"resources"`
}

// ResourceStats describes one resource's store.
type ResourceStats struct {
	Objects      int    `json:"objects"`
	HistoryLen   int    `json:"historyLength"`
	OldestRV     string `json:"oldestWatchableResourceVersion"`
	EventsStored uint64 `json:"eventsTotal"`
}

// Stats reports counters and store sizes.
func (s *Server) Stats() StatsSnapshot {
	out := StatsSnapshot{
		Requests: s.stats.requests.Load(), WatchesOpen: s.stats.watchesOpen.Load(), WatchesTotal: s.stats.watchesTotal.Load(),
		EventsSent: s.stats.eventsSent.Load(), FaultsHit: s.stats.faultsHit.Load(), Connections: s.connCount(),
		Lists: s.stats.lists.Load(), WatchLists: s.stats.watchLists.Load(),
		TokenReviews: s.stats.tokenReviews.Load(), SubjectAccessReviews: s.stats.subjectAccessReviews.Load(),
		Resources: map[string]ResourceStats{},
	}
	st := s.store
	st.mu.RLock()
	defer st.mu.RUnlock()
	out.ResourceVersion = strconv.FormatUint(st.rv, 10)
	for _, r := range st.order {
		out.Resources[r.def.ID()] = ResourceStats{Objects: len(r.objects), HistoryLen: r.hist.n,
			OldestRV: strconv.FormatUint(r.floor, 10), EventsStored: r.hist.total}
	}
	return out
}

// ---- seeding ----

// SeedSpec is the body of POST /_fake/seed.
type SeedSpec struct {
	Resource  string            `json:"resource"`
	Namespace string            `json:"namespace,omitempty"`
	Count     int               `json:"count"`
	Bytes     int               `json:"bytes,omitempty"` // approximate JSON size of each object
	Prefix    string            `json:"prefix,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
}

// SeedResult is the answer to a seed.
type SeedResult struct {
	Created         int    `json:"created"`
	ResourceVersion string `json:"resourceVersion"`
	DurationMs      int64  `json:"durationMs"`
}

const seedOverhead = 300 // metadata bytes around the payload, roughly

func payloadFor(bytes int) string {
	n := bytes - seedOverhead
	if n < 8 {
		n = 8
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(rand.IntN(26))
	}
	return string(b)
}

func (s *Server) ensureNamespace(ns string) error {
	if ns == "" {
		return nil
	}
	nsr := s.store.find("namespaces")
	if _, aerr := s.store.Get(nsr, "", ns); aerr == nil {
		return nil
	}
	_, aerr := s.store.Create(nsr, "", map[string]any{"metadata": map[string]any{"name": ns}}, writeOpts{})
	if aerr != nil && aerr.Reason != "AlreadyExists" {
		return aerr
	}
	return nil
}

// seedObject builds the body of a synthetic object of resource r.
func seedObject(r *resourceStore, name string, lbl map[string]any, payload string) map[string]any {
	obj := map[string]any{"metadata": map[string]any{"name": name, "labels": lbl}}
	switch {
	case r.def.Group == "" && r.def.Resource == "configmaps":
		obj["data"] = map[string]any{"payload": payload}
	case r.def.Group == "" && r.def.Resource == "secrets":
		obj["type"] = "Opaque"
		obj["data"] = map[string]any{"payload": base64.StdEncoding.EncodeToString([]byte(payload[:len(payload)*3/4]))}
	default:
		obj["spec"] = map[string]any{"payload": payload}
	}
	return obj
}

// payloadSized returns a payload that makes a seeded object of r about
// bytes long: it measures the rest of a sample object with a dry-run create.
func (s *Server) payloadSized(r *resourceStore, ns, prefix string, bytes int) string {
	probe := payloadFor(seedOverhead + 64)
	wo := s.loadWriteOpts()
	wo.dryRun = true
	lbl := map[string]any{"fake.informerd.io/seed": "true", "fake.informerd.io/bucket": "0"}
	o, aerr := s.store.Create(r, ns, seedObject(r, "size-probe-"+randomSuffix(8), lbl, probe), wo)
	if aerr != nil {
		return payloadFor(bytes)
	}
	encoded := len(probe)
	if r.def.Group == "" && r.def.Resource == "secrets" {
		encoded = len(probe) / 4 * 4 // base64 of 3/4 of it
	}
	overhead := len(o.full) - encoded + len(strconv.FormatUint(s.store.CurrentRV(), 10)) + 1
	return payloadFor(bytes - overhead + seedOverhead)
}

// loadWriteOpts are the write options of the load helpers.
func (s *Server) loadWriteOpts() writeOpts {
	if s.opts.DisableManagedFields {
		return writeOpts{}
	}
	return writeOpts{manager: "fake-apiserver-load"}
}

// Seed creates Count synthetic objects quickly.
func (s *Server) Seed(spec SeedSpec) (SeedResult, error) {
	start := time.Now()
	r := s.store.find(spec.Resource)
	if r == nil {
		return SeedResult{}, fmt.Errorf("unknown resource %q", spec.Resource)
	}
	ns := spec.Namespace
	if r.def.Namespaced {
		if ns == "" {
			ns = "default"
		}
		if err := s.ensureNamespace(ns); err != nil {
			return SeedResult{}, err
		}
	} else {
		ns = ""
	}
	if spec.Count < 0 || spec.Count > 5_000_000 {
		return SeedResult{}, fmt.Errorf("count out of range")
	}
	prefix := spec.Prefix
	if prefix == "" {
		prefix = "seed-"
	}
	if spec.Bytes == 0 {
		spec.Bytes = 1024
	}
	base := s.payloadSized(r, ns, prefix, spec.Bytes)
	res := SeedResult{}
	for i := 0; i < spec.Count; i++ {
		lbl := map[string]any{"fake.informerd.io/seed": "true", "fake.informerd.io/bucket": strconv.Itoa(i % 10)}
		for k, v := range spec.Labels {
			lbl[k] = v
		}
		name := fmt.Sprintf("%s%07d", prefix, i)
		payload := fmt.Sprintf("%08d", i) + base[8:]
		if _, aerr := s.store.Create(r, ns, seedObject(r, name, lbl, payload), s.loadWriteOpts()); aerr != nil {
			if aerr.Reason == "AlreadyExists" {
				continue
			}
			return res, aerr
		}
		res.Created++
	}
	res.ResourceVersion = strconv.FormatUint(s.store.CurrentRV(), 10)
	res.DurationMs = time.Since(start).Milliseconds()
	return res, nil
}

// ---- change generator ----

// ChurnSpec is the body of POST /_fake/churn: apply changes to the objects of
// one resource in one namespace at Rate per second for DurationMs (or until Ops
// changes were made).
type ChurnSpec struct {
	Resource   string `json:"resource"`
	Namespace  string `json:"namespace,omitempty"`
	Rate       int    `json:"rate,omitempty"` // changes per second; 0: as fast as possible
	DurationMs int    `json:"durationMs,omitempty"`
	Ops        int    `json:"ops,omitempty"`
	Bytes      int    `json:"bytes,omitempty"` // size of created objects
	// Relative weights of creates, updates and deletes; all zero means updates only.
	Creates int  `json:"creates,omitempty"`
	Updates int  `json:"updates,omitempty"`
	Deletes int  `json:"deletes,omitempty"`
	Wait    bool `json:"wait,omitempty"` // answer when the churn has finished
	// What an update writes into the payload's first 8 characters: "" random hex digits; "time"
	// the wall clock's Unix time in microseconds modulo 2^32 as 8 hex digits, most significant
	// first, so that a watcher can time each change from the server's write to its own read
	// (unambiguous while that takes less than 71 minutes).
	Stamp string `json:"stamp,omitempty"`
}

// ChurnStatus reports a change generator.
type ChurnStatus struct {
	ID        int   `json:"id"`
	Running   bool  `json:"running"`
	Ops       int64 `json:"ops"`
	Creates   int64 `json:"creates"`
	Updates   int64 `json:"updates"`
	Deletes   int64 `json:"deletes"`
	ElapsedMs int64 `json:"elapsedMs"`
}

type churn struct {
	id      int
	spec    ChurnSpec
	quit    chan struct{}
	done    chan struct{}
	started time.Time
	st      ChurnStatus // GUARDED_BY(Server.churnMu)
	ended   time.Time
}

func (c *churn) stop() {
	select {
	case <-c.quit:
	default:
		close(c.quit)
	}
}

func (c *churn) status() ChurnStatus {
	select {
	case <-c.done:
	default:
	}
	return c.st
}

func (s *Server) churnStatuses() []ChurnStatus {
	s.churnMu.Lock()
	defer s.churnMu.Unlock()
	out := []ChurnStatus{}
	for _, c := range s.churns {
		out = append(out, c.st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (s *Server) stopAllChurn() {
	s.churnMu.Lock()
	cs := make([]*churn, 0, len(s.churns))
	for _, c := range s.churns {
		cs = append(cs, c)
	}
	s.churnMu.Unlock()
	for _, c := range cs {
		c.stop()
		<-c.done
	}
}

// StartChurn starts a change generator in the background.
func (s *Server) StartChurn(spec ChurnSpec) (*churn, error) {
	r := s.store.find(spec.Resource)
	if r == nil {
		return nil, fmt.Errorf("unknown resource %q", spec.Resource)
	}
	if spec.DurationMs <= 0 && spec.Ops <= 0 {
		return nil, fmt.Errorf("durationMs or ops is required")
	}
	if r.def.Namespaced {
		if spec.Namespace == "" {
			spec.Namespace = "default"
		}
		if err := s.ensureNamespace(spec.Namespace); err != nil {
			return nil, err
		}
	} else {
		spec.Namespace = ""
	}
	if spec.Creates == 0 && spec.Updates == 0 && spec.Deletes == 0 {
		spec.Updates = 1
	}
	if spec.Bytes == 0 {
		spec.Bytes = 1024
	}
	if spec.Stamp != "" && spec.Stamp != "time" {
		return nil, fmt.Errorf("stamp: %q is neither \"\" nor \"time\"", spec.Stamp)
	}
	s.churnMu.Lock()
	s.churnID++
	c := &churn{id: s.churnID, spec: spec, quit: make(chan struct{}), done: make(chan struct{}), started: time.Now()}
	c.st = ChurnStatus{ID: c.id, Running: true}
	s.churns[c.id] = c
	s.churnMu.Unlock()
	go s.runChurn(r, c)
	return c, nil
}

func (s *Server) runChurn(r *resourceStore, c *churn) {
	defer close(c.done)
	// Done means the events are ready to be served in every format asked
	// for: a watcher replaying them does not wait for their encoding.
	defer s.store.waitPreencoded(s.shutdown)
	spec := c.spec
	var deadline time.Time
	if spec.DurationMs > 0 {
		deadline = c.started.Add(time.Duration(spec.DurationMs) * time.Millisecond)
	}
	base := payloadFor(spec.Bytes)
	rng := rand.New(rand.NewPCG(uint64(c.id), uint64(time.Now().UnixNano())))
	var ops, creates, updates, deletes int64
	publish := func(running bool) {
		s.churnMu.Lock()
		c.st = ChurnStatus{ID: c.id, Running: running, Ops: ops, Creates: creates, Updates: updates, Deletes: deletes,
			ElapsedMs: time.Since(c.started).Milliseconds()}
		s.churnMu.Unlock()
	}
	defer publish(false)
	total := spec.Creates + spec.Updates + spec.Deletes
	scope := scopeOf(spec.Namespace)
	seq := 0
	lastPublish := time.Now()
	for {
		select {
		case <-c.quit:
			return
		case <-s.shutdown:
			return
		default:
		}
		now := time.Now()
		if !deadline.IsZero() && now.After(deadline) {
			return
		}
		if spec.Ops > 0 && ops >= int64(spec.Ops) {
			return
		}
		batch := 256
		if spec.Rate > 0 {
			due := int64(float64(now.Sub(c.started).Seconds()) * float64(spec.Rate))
			batch = int(due - ops)
			if batch <= 0 {
				time.Sleep(time.Millisecond)
				continue
			}
			if batch > 1024 {
				batch = 1024
			}
		}
		if spec.Ops > 0 && int64(batch) > int64(spec.Ops)-ops {
			batch = int(int64(spec.Ops) - ops)
		}
		st := s.store
		st.mu.Lock()
		for i := 0; i < batch; i++ {
			pick := rng.IntN(total)
			keys := r.sortedKeysLocked()
			from := searchPrefix(keys, scope)
			to := from + sortPrefixEnd(keys[from:], scope)
			n := to - from
			switch {
			case pick < spec.Creates || n == 0:
				seq++
				name := fmt.Sprintf("churn-%d-%08d-%s", c.id, seq, randomSuffix(4))
				payload := fmt.Sprintf("%08d", seq) + base[8:]
				obj := seedObject(r, name, map[string]any{"fake.informerd.io/churn": strconv.Itoa(c.id)}, payload)
				st.mu.Unlock()
				_, aerr := st.Create(r, spec.Namespace, obj, s.loadWriteOpts())
				st.mu.Lock()
				if aerr == nil {
					creates++
				}
			case pick < spec.Creates+spec.Updates:
				cur := r.objects[keys[from+rng.IntN(n)]]
				st.churnUpdateLocked(r, cur, rng, spec.Stamp == "time")
				updates++
			default:
				cur := r.objects[keys[from+rng.IntN(n)]]
				st.removeLocked(r, cur)
				deletes++
			}
			ops++
		}
		st.mu.Unlock()
		if time.Since(lastPublish) > 50*time.Millisecond {
			publish(true)
			lastPublish = time.Now()
		}
	}
}

func sortPrefixEnd(keys []string, prefix string) int {
	return sort.Search(len(keys), func(i int) bool { return !strings.HasPrefix(keys[i], prefix) })
}

// churnUpdateLocked rewrites 8 characters of the object's payload (or adds
// a churn annotation when it has none): a MODIFIED event of the same size.
// They are random, or with stampTime the time (ChurnSpec.Stamp).
// REQUIRES: s.mu held for writing.
func (s *Store) churnUpdateLocked(r *resourceStore, cur *object, rng *rand.Rand, stampTime bool) {
	var sb [8]byte
	if stampTime {
		x := uint32(time.Now().UnixMicro())
		for i := range sb {
			sb[i] = hexDigits[(x>>(4*(7-i)))&0xf]
		}
	} else {
		x := rng.Uint32()
		for i := range sb {
			sb[i] = hexDigits[(x>>(4*i))&0xf]
		}
	}
	if r.def.Generation == GenerationNone && s.churnSpliceLocked(r, cur, sb) {
		return
	}
	next := shallowWithMeta(cur.dataMap())
	stamp := string(sb[:])
	field := "data"
	if _, ok := next["data"].(map[string]any); !ok {
		field = "spec"
	}
	if m, ok := next[field].(map[string]any); ok {
		if p, ok := m["payload"].(string); ok && len(p) >= 8 {
			nm := make(map[string]any, len(m))
			for k, v := range m {
				nm[k] = v
			}
			if r.def.Resource == "secrets" && r.def.Group == "" {
				nm["payload"] = base64.StdEncoding.EncodeToString([]byte(stamp)) + p[12:]
			} else {
				nm["payload"] = stamp + p[8:]
			}
			next[field] = nm
			goto write
		}
	}
	{
		meta := metaOf(next)
		ann := map[string]any{}
		if a, ok := meta["annotations"].(map[string]any); ok {
			for k, v := range a {
				ann[k] = v
			}
		}
		ann["fake.informerd.io/churn"] = stamp
		meta["annotations"] = ann
	}
write:
	meta := metaOf(next)
	if r.def.Generation != GenerationNone && field == "spec" {
		g, _ := strconv.ParseInt(fmt.Sprint(meta["generation"]), 10, 64)
		meta["generation"] = json.Number(strconv.FormatInt(g+1, 10))
	}
	s.rv++
	meta["resourceVersion"] = strconv.FormatUint(s.rv, 10)
	obj, err := r.finish(next, evModified)
	if err != nil {
		s.rv--
		return
	}
	s.commitLocked(r, evModified, cur.key, obj, obj, cur)
}

// churnSpliceLocked is the fast path of churnUpdateLocked: it rewrites the
// JSON of cur directly (8 payload characters and the resourceVersion), and
// leaves the new object's decoded form to be built on demand. It reports
// false when the object does not have the expected shape.
// REQUIRES: s.mu held for writing.
func (s *Store) churnSpliceLocked(r *resourceStore, cur *object, stamp [8]byte) bool {
	full := cur.full
	p := bytes.Index(full, []byte(`"payload":"`))
	if p < 0 {
		return false
	}
	p += len(`"payload":"`)
	if p+8 > len(full) || bytes.IndexByte(full[p:p+8], '"') >= 0 || bytes.IndexByte(full[p:p+8], '\\') >= 0 {
		return false
	}
	m := bytes.Index(full, []byte(`"metadata":{`))
	if m < 0 {
		return false
	}
	q := bytes.Index(full[m:], []byte(`"resourceVersion":"`))
	if q < 0 {
		return false
	}
	rvStart := m + q + len(`"resourceVersion":"`)
	rvEnd := rvStart + bytes.IndexByte(full[rvStart:], '"')
	if rvEnd < rvStart {
		return false
	}
	s.rv++
	rv := strconv.AppendUint(nil, s.rv, 10)
	const head = `{"type":"MODIFIED","object":`
	buf := make([]byte, 0, len(head)+len(full)+len(rv)+4)
	buf = append(buf, head...)
	fullStart := len(buf)
	buf = append(buf, full...)
	copy(buf[fullStart+p:], stamp[:])
	buf = append(append(buf[:fullStart+rvStart], rv...), full[rvEnd:]...)
	// The payload may come after metadata: write the stamp again at its shifted place.
	if p > rvEnd {
		copy(buf[fullStart+p+len(rv)-(rvEnd-rvStart):], stamp[:])
	}
	fullEnd := len(buf)
	buf = append(buf, "}\n"...)
	o := &object{key: cur.key, namespace: cur.namespace, name: cur.name, uid: cur.uid, rv: s.rv, labels: cur.labels,
		full: buf[fullStart:fullEnd:fullEnd], bodyOff: cur.bodyOff, frame: buf, frameType: evModified}
	s.commitLocked(r, evModified, cur.key, o, o, cur)
	return true
}
