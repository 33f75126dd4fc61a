package server

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// Fault types. Request faults (gone, too-many-requests, internal-error,
// close, garbage, truncate, stall, slow) are armed by the control endpoint and
// consumed by the next Count matching requests; the others act at once.
const (
	FaultCloseWatches     = "close-watches"     // now: end matching open watches (after AfterEvents more events)
	FaultGone             = "gone"              // request: 410 Expired (watch: ERROR event, or HTTP 410 with mode=status)
	FaultTooManyRequests  = "too-many-requests" // request: 429 with Retry-After
	FaultInternalError    = "internal-error"    // request: 500 (watch with AfterEvents>0: ERROR event mid-stream)
	FaultClose            = "close"             // request (watch): end the stream cleanly after AfterEvents events
	FaultGarbage          = "garbage"           // request: after AfterEvents events write bytes that are not JSON, then drop the connection
	FaultTruncate         = "truncate"          // request: cut the response in the middle of a JSON value, then drop the connection
	FaultStall            = "stall"             // request: after AfterEvents events send nothing more for DurationMs (0: until the client leaves)
	FaultSlow             = "slow"              // request: write the response at BytesPerSecond
	FaultCompact          = "compact"           // now: drop event history (410 for older watches, exact lists, continue tokens); mode "etcd": only exact lists and continue tokens
	FaultRefuse           = "refuse"            // now: close the listener and reset all connections for DurationMs
	FaultResetConnections = "reset-connections" // now: reset all open connections (TCP RST)
	FaultBookmark         = "bookmark"          // now: send a BOOKMARK to every matching watch that allows them
)

// FaultSpec is the JSON body of POST /_fake/faults.
type FaultSpec struct {
	Type string `json:"type"`
	// Resource limits the fault to one resource: "configmaps", "v1/configmaps",
	// "apps/v1/deployments" or "deployments.apps". Empty: every resource.
	Resource string `json:"resource,omitempty"`
	// Namespace limits the fault to requests in (or watches of) one namespace.
	Namespace string `json:"namespace,omitempty"`
	// Verb limits a request fault: get, list, watch, create, update, patch,
	// delete. Empty: any verb.
	Verb string `json:"verb,omitempty"`
	// UserAgent limits the fault to requests whose User-Agent contains it.
	UserAgent string `json:"userAgent,omitempty"`
	// Count is how many requests a request fault hits; 0 means 1, -1 means
	// every matching request until the fault is deleted.
	Count int `json:"count,omitempty"`
	// AfterEvents delays stream faults until that many watch events were sent.
	AfterEvents int `json:"afterEvents,omitempty"`
	// Mode: for gone on watch, "event" (default; 200 then an ERROR event, as
	// the real server does) or "status" (HTTP 410). For compact, "etcd":
	// compact the storage only, as kube-apiserver's periodic etcd compaction
	// does (exact lists and continue tokens older than now get 410; watches
	// are served from the watch cache's history, which compaction leaves
	// alone); default: drop the history too.
	Mode              string `json:"mode,omitempty"`
	RetryAfterSeconds int    `json:"retryAfterSeconds,omitempty"`
	BytesPerSecond    int    `json:"bytesPerSecond,omitempty"`
	DurationMs        int    `json:"durationMs,omitempty"`
	Message           string `json:"message,omitempty"`
}

func (f *FaultSpec) duration() time.Duration { return time.Duration(f.DurationMs) * time.Millisecond }

func (f *FaultSpec) validate() error {
	switch f.Type {
	case FaultGone, FaultTooManyRequests, FaultInternalError, FaultClose, FaultGarbage, FaultTruncate, FaultStall, FaultSlow:
		if f.Verb != "" && !isVerb(f.Verb) {
			return fmt.Errorf("unknown verb %q", f.Verb)
		}
		if f.Type == FaultSlow && f.BytesPerSecond <= 0 {
			return fmt.Errorf("slow needs bytesPerSecond > 0")
		}
		if f.Type == FaultGone && f.Mode != "" && f.Mode != "event" && f.Mode != "status" {
			return fmt.Errorf("gone mode must be event or status")
		}
	case FaultCompact:
		if f.Mode != "" && f.Mode != "etcd" {
			return fmt.Errorf("compact mode must be empty or etcd")
		}
	case FaultCloseWatches, FaultRefuse, FaultResetConnections, FaultBookmark:
	default:
		return fmt.Errorf("unknown fault type %q", f.Type)
	}
	return nil
}

func isVerb(v string) bool {
	switch v {
	case "get", "list", "watch", "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// armedFault is a request fault waiting for matching requests.
type armedFault struct {
	ID        int       `json:"id"`
	Spec      FaultSpec `json:"spec"`
	Remaining int       `json:"remaining"` // -1: unlimited
	Hits      int       `json:"hits"`
	res       *resourceStore
	review    string // reviewTokenReviews or reviewSARs: the fault hits that review endpoint only
}

// faultSet is the list of armed request faults, matched in arming order.
type faultSet struct {
	mu     sync.Mutex
	nextID int
	armed  []*armedFault // GUARDED_BY(mu)
}

func (fs *faultSet) arm(spec FaultSpec, res *resourceStore, review string) *armedFault {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.nextID++
	n := spec.Count
	if n == 0 {
		n = 1
	}
	a := &armedFault{ID: fs.nextID, Spec: spec, Remaining: n, res: res, review: review}
	fs.armed = append(fs.armed, a)
	return a
}

// take consumes the first armed fault matching a request.
func (fs *faultSet) take(res *resourceStore, ns, verb, ua string) *FaultSpec {
	return fs.takeMatching(func(a *armedFault) bool { return a.review == "" && (a.res == nil || a.res == res) }, ns, verb, ua)
}

// takeReview consumes the first armed fault matching a request to a review
// endpoint (verb create, no namespace). Only faults that name the review's
// resource match: a fault for "every resource" leaves reviews alone, so that
// arming one for an informer's requests does not hit an authenticating
// client's reviews instead.
func (fs *faultSet) takeReview(review, ua string) *FaultSpec {
	return fs.takeMatching(func(a *armedFault) bool { return a.review == review }, "", "create", ua)
}

func (fs *faultSet) takeMatching(target func(*armedFault) bool, ns, verb, ua string) *FaultSpec {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for i, a := range fs.armed {
		if !target(a) {
			continue
		}
		if a.Spec.Namespace != "" && a.Spec.Namespace != ns {
			continue
		}
		if a.Spec.Verb != "" && a.Spec.Verb != verb {
			continue
		}
		if a.Spec.UserAgent != "" && !strings.Contains(ua, a.Spec.UserAgent) {
			continue
		}
		a.Hits++
		if a.Remaining > 0 {
			a.Remaining--
			if a.Remaining == 0 {
				fs.armed = append(fs.armed[:i:i], fs.armed[i+1:]...)
			}
		}
		spec := a.Spec
		return &spec
	}
	return nil
}

func (fs *faultSet) list() []armedFault {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := make([]armedFault, 0, len(fs.armed))
	for _, a := range fs.armed {
		out = append(out, *a)
	}
	return out
}

func (fs *faultSet) remove(id int) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for i, a := range fs.armed {
		if a.ID == id {
			fs.armed = append(fs.armed[:i:i], fs.armed[i+1:]...)
			return true
		}
	}
	return false
}

// clear disarms the faults whose user-agent filter contains ua ("" : all).
func (fs *faultSet) clear(ua string) int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if ua == "" {
		n := len(fs.armed)
		fs.armed = nil
		return n
	}
	kept := fs.armed[:0]
	n := 0
	for _, a := range fs.armed {
		if a.Spec.UserAgent != "" && strings.Contains(a.Spec.UserAgent, ua) {
			n++
			continue
		}
		kept = append(kept, a)
	}
	fs.armed = kept
	return n
}
