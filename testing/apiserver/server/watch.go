package server

import (
	"bufio"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

// WATCH: newline-delimited JSON events, or length-delimited protobuf
// WatchEvents, over a chunked (HTTP/1.1) or streamed (HTTP/2) response.
// Stored events carry their frame in each format serialized once; watchers
// copy it to a 64 KiB buffer and flush when they have caught up.

type watchQuery struct {
	namespace         string
	rv                string
	sendInitialEvents *bool
	allowBookmarks    bool
	timeout           time.Duration
	label             labels.Selector
	field             fields.Selector
	wire              wireFormat
}

// watchState is one open watch, reachable by the control endpoint.
type watchState struct {
	namespace   string
	userAgent   string
	closeNow    chan struct{} // closed to end the watch
	closed      atomic.Bool
	closeAfter  atomic.Int64  // >0: end after that many more events; 0: no limit
	bookmarkNow chan struct{} // buffered(1): send a bookmark when caught up
}

func (w *watchState) end() {
	if w.closed.CompareAndSwap(false, true) {
		close(w.closeNow)
	}
}

const watchBatch = 1024

// flushWriter is the watch's view of the response: bytes, then Flush.
type flushWriter interface {
	io.Writer
	Flush() error
}

type httpFlushWriter struct {
	w  io.Writer
	rc *http.ResponseController
}

func (h *httpFlushWriter) Write(p []byte) (int, error) { return h.w.Write(p) }
func (h *httpFlushWriter) Flush() error                { return h.rc.Flush() }

// slowWriter paces writes to bytesPerSecond, flushing each slice.
type slowWriter struct {
	inner flushWriter
	bps   int
	ctx   context.Context
}

func (s *slowWriter) Write(p []byte) (int, error) {
	const tick = 20 * time.Millisecond
	step := s.bps / 50
	if step < 1 {
		step = 1
	}
	n := 0
	for n < len(p) {
		end := n + step
		if end > len(p) {
			end = len(p)
		}
		k, err := s.inner.Write(p[n:end])
		n += k
		if err != nil {
			return n, err
		}
		if err := s.inner.Flush(); err != nil {
			return n, err
		}
		select {
		case <-time.After(tick):
		case <-s.ctx.Done():
			return n, s.ctx.Err()
		}
	}
	return n, nil
}
func (s *slowWriter) Flush() error { return s.inner.Flush() }

func bookmarkFrame(r *resourceStore, rv uint64, initialEnd bool) []byte {
	b := make([]byte, 0, 160)
	b = append(b, `{"type":"BOOKMARK","object":`...)
	b = append(b, r.typePrefix...)
	b = append(b, `"metadata":{"resourceVersion":"`...)
	b = strconv.AppendUint(b, rv, 10)
	b = append(b, '"')
	if initialEnd {
		b = append(b, `,"annotations":{"k8s.io/initial-events-end":"true"}`...)
	}
	b = append(b, "}}}\n"...)
	return b
}

func errorFrame(e *apiError) []byte {
	return buildFrame(evError, e.body())
}

func (srv *Server) serveWatch(w http.ResponseWriter, req *http.Request, r *resourceStore, q watchQuery, fault *FaultSpec) {
	ctx := req.Context()
	st := srv.store
	sie := q.sendInitialEvents != nil && *q.sendInitialEvents
	if sie {
		srv.stats.watchLists.Add(1)
	}

	var startErr *apiError
	if fault != nil {
		switch fault.Type {
		case FaultGone:
			if fault.Mode == "status" {
				writeError(w, req, errTooOldWatch(parseRVOrZero(q.rv), st.floorOf(r)))
				return
			}
			if fault.AfterEvents <= 0 {
				startErr = errTooOldWatch(parseRVOrZero(q.rv), st.floorOf(r))
			}
		case FaultTooManyRequests:
			writeError(w, req, errTooManyRequests(fault.RetryAfterSeconds))
			return
		case FaultInternalError:
			if fault.AfterEvents == 0 {
				writeError(w, req, errInternal(faultMessage(fault, "injected fault")))
				return
			}
		case FaultStall:
			if fault.AfterEvents < 0 { // stall before the response headers
				srv.stall(ctx, fault.duration())
				return
			}
		}
	}

	// The watch cache parses the resourceVersion first and returns the
	// storage layer's error as it is, which the apiserver answers with a 500
	// of no reason (it is not a Status).
	if q.rv != "" {
		if _, err := strconv.ParseUint(q.rv, 10, 64); err != nil {
			writeError(w, req, &apiError{Code: 500, Message: invalidRVMessage(q.rv, err)})
			return
		}
	}

	// Decide the starting point, like the watch cache does.
	var initial []*object
	var initialEndRV uint64
	var nextSeq uint64
	match := selectorMatcher(r, q.label, q.field)
	scope := scopeOf(q.namespace)

	if startErr == nil && sie && q.rv != "" && q.rv != "0" {
		if n, aerr := parseRV(q.rv); aerr != nil {
			startErr = aerr
		} else if cur, ok := st.waitForRV(ctx, n, st.tooLargeWait); !ok {
			startErr = errTooLargeRV(n, cur)
		}
	}
	if startErr == nil {
		st.mu.RLock()
		switch {
		case sie || (q.sendInitialEvents == nil && (q.rv == "" || q.rv == "0")):
			nextSeq = r.hist.total
			initialEndRV = st.rv
			st.mu.RUnlock()
			initial = st.snapshot(r, initialEndRV, scope)
			st.mu.RLock()
			// Events committed between the two locks are after initialEndRV:
			// skip to the first of them that is newer than the snapshot.
			nextSeq = r.hist.firstSeq() + uint64(r.hist.after(initialEndRV))
		case q.rv == "" || q.rv == "0": // sendInitialEvents=false: from now, no initial state
			nextSeq = r.hist.total
		default:
			n, aerr := parseRV(q.rv)
			switch {
			case aerr != nil:
				startErr = aerr
			case n < r.floor:
				startErr = errTooOldWatch(n, r.floor)
			default:
				nextSeq = r.hist.firstSeq() + uint64(r.hist.after(n))
			}
		}
		st.mu.RUnlock()
	}

	h := w.Header()
	wf := q.wire
	r.wantFrames(wf)
	if wf.protobuf() {
		h.Set("Content-Type", protobufContentType+";stream=watch")
	} else {
		h.Set("Content-Type", "application/json")
	}
	h.Set("Cache-Control", "no-cache, private")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	var out flushWriter = &httpFlushWriter{w: w, rc: rc}
	if fault != nil && fault.Type == FaultSlow {
		out = &slowWriter{inner: out, bps: fault.BytesPerSecond, ctx: ctx}
	}
	bw := bufio.NewWriterSize(out, 64<<10)
	flush := func() bool {
		if bw.Flush() != nil {
			return false
		}
		return out.Flush() == nil
	}
	if startErr != nil {
		_, _ = bw.Write(errorFrameAs(startErr, wf))
		flush()
		return
	}

	ws := &watchState{namespace: q.namespace, userAgent: req.UserAgent(), closeNow: make(chan struct{}), bookmarkNow: make(chan struct{}, 1)}
	r.watchMu.Lock()
	r.watchers[ws] = struct{}{}
	r.watchMu.Unlock()
	srv.stats.watchesOpen.Add(1)
	srv.stats.watchesTotal.Add(1)
	defer func() {
		r.watchMu.Lock()
		delete(r.watchers, ws)
		r.watchMu.Unlock()
		srv.stats.watchesOpen.Add(-1)
	}()

	timeout := q.timeout
	if timeout <= 0 { // --min-request-timeout default 1800s, randomized up to 2x
		timeout = 30*time.Minute + time.Duration(rand.Int64N(int64(30*time.Minute)))
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var bookmarkC <-chan time.Time
	if q.allowBookmarks && srv.opts.BookmarkInterval > 0 {
		t := time.NewTicker(srv.opts.BookmarkInterval)
		defer t.Stop()
		bookmarkC = t.C
	}

	sent := 0 // events written, bookmarks excluded
	// onEvent applies stream faults; it returns false when the watch must end.
	onEvent := func() bool {
		sent++
		srv.stats.eventsSent.Add(1)
		if n := ws.closeAfter.Load(); n > 0 {
			if ws.closeAfter.Add(-1) == 0 {
				return false
			}
		}
		return fault == nil || fault.AfterEvents <= 0 || sent < fault.AfterEvents || !isStreamFault(fault.Type)
	}

	if fault != nil && isStreamFault(fault.Type) && fault.AfterEvents <= 0 {
		srv.endStream(ctx, bw, flush, r, fault, wf, nil)
		return
	}

	// Initial state (synthetic ADDED), in key order.
	for _, o := range initial {
		if match != nil && !match(o) {
			continue
		}
		if wf == wireJSON {
			_, _ = bw.WriteString(`{"type":"ADDED","object":`)
			_, _ = bw.Write(o.full)
			if _, err := bw.WriteString("}\n"); err != nil {
				return
			}
		} else {
			frame, err := r.eventFrame(evAdded, o, wf)
			if err != nil {
				srv.encodeFailed(bw, flush, wf, err)
				return
			}
			if _, err := bw.Write(frame); err != nil {
				return
			}
		}
		if !onEvent() {
			srv.endStream(ctx, bw, flush, r, fault, wf, nil)
			return
		}
	}
	initial = nil
	if sie && q.allowBookmarks {
		_, _ = bw.Write(bookmarkFrameAs(r, initialEndRV, true, wf))
	}

	batch := make([]*event, 0, watchBatch)
	var lastFrame []byte // the last event frame written, for truncation
	for {
		st.mu.RLock()
		first := r.hist.firstSeq()
		if nextSeq < first { // this watcher fell behind the history: end it like a blocked cache watcher
			st.mu.RUnlock()
			flush()
			return
		}
		batch = batch[:0]
		for i := int(nextSeq - first); i < r.hist.n && len(batch) < watchBatch; i++ {
			batch = append(batch, r.hist.at(i))
		}
		notify := r.notify
		curRV := st.rv
		st.mu.RUnlock()

		if len(batch) == 0 {
			if !flush() {
				return
			}
			select {
			case <-notify:
				continue
			case <-bookmarkC:
				_, _ = bw.Write(bookmarkFrameAs(r, curRV, false, wf))
			case <-ws.bookmarkNow:
				if q.allowBookmarks {
					_, _ = bw.Write(bookmarkFrameAs(r, curRV, false, wf))
				}
			case <-deadline.C:
				flush()
				return
			case <-ws.closeNow:
				flush()
				return
			case <-ctx.Done():
				return
			case <-srv.shutdown:
				return
			}
			continue
		}
		for _, ev := range batch {
			nextSeq++
			if q.namespace != "" && ev.obj.namespace != q.namespace {
				continue
			}
			variant := variantAsIs
			if match != nil {
				switch ev.typ {
				case evModified:
					now, before := match(ev.obj), match(ev.prev)
					switch {
					case now && before:
					case now:
						variant = variantAdded
					case before:
						variant = variantDeleted
					default:
						continue
					}
				default:
					if !match(ev.obj) {
						continue
					}
				}
			}
			frame, err := ev.frameFor(r, wf, variant)
			if err != nil {
				srv.encodeFailed(bw, flush, wf, err)
				return
			}
			lastFrame = frame
			if _, err := bw.Write(frame); err != nil {
				return
			}
			if !onEvent() {
				srv.endStream(ctx, bw, flush, r, fault, wf, lastFrame)
				return
			}
		}
		select {
		case <-ws.closeNow:
			flush()
			return
		case <-deadline.C:
			flush()
			return
		default:
		}
	}
}

func isStreamFault(t string) bool {
	switch t {
	case FaultGone, FaultInternalError, FaultClose, FaultGarbage, FaultTruncate, FaultStall:
		return true
	}
	return false
}

func faultMessage(f *FaultSpec, def string) string {
	if f.Message != "" {
		return f.Message
	}
	return def
}

func parseRVOrZero(s string) uint64 {
	v, _ := strconv.ParseUint(s, 10, 64)
	return v
}

func (st *Store) floorOf(r *resourceStore) uint64 {
	st.mu.RLock()
	defer st.mu.RUnlock()
	return r.floor
}

// endStream ends a watch because of a stream fault (or a close request).
// last is the frame of the last event written (nil: none), for truncation.
func (srv *Server) endStream(ctx context.Context, bw *bufio.Writer, flush func() bool, r *resourceStore, fault *FaultSpec, wf wireFormat, last []byte) {
	if fault == nil {
		flush()
		return
	}
	switch fault.Type {
	case FaultGone:
		_, _ = bw.Write(errorFrameAs(errTooOldWatch(srv.store.floorOf(r)-1, srv.store.floorOf(r)), wf))
		flush()
	case FaultInternalError:
		_, _ = bw.Write(errorFrameAs(errInternal(faultMessage(fault, "injected fault")), wf))
		flush()
	case FaultGarbage:
		if wf.protobuf() { // a frame whose WatchEvent does not decode
			_, _ = bw.WriteString("\x00\x00\x00\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x00\xfe gar")
		} else {
			_, _ = bw.WriteString("{\"type\":\"MODIFIED\",\"object\":{\"kind\":\x00\xff\xfe garbage ]]}}\n")
		}
		flush()
		panic(http.ErrAbortHandler)
	case FaultTruncate:
		frame := last
		if frame == nil {
			frame = bookmarkFrameAs(r, srv.store.CurrentRV(), false, wf)
		}
		_, _ = bw.Write(frame[:len(frame)/2])
		flush()
		panic(http.ErrAbortHandler)
	case FaultStall:
		flush()
		srv.stall(ctx, fault.duration())
	default:
		flush()
	}
}

// encodeFailed ends a watch whose next event could not be encoded (a stored
// object that does not fit its type's protobuf message) with an ERROR event.
func (srv *Server) encodeFailed(bw *bufio.Writer, flush func() bool, wf wireFormat, err error) {
	srv.logf("watch: encoding an event: %v", err)
	_, _ = bw.Write(errorFrameAs(errInternal(err.Error()), wf))
	flush()
}

// stall waits until the client leaves, d elapses (d > 0) or shutdown.
func (srv *Server) stall(ctx context.Context, d time.Duration) {
	var t <-chan time.Time
	if d > 0 {
		tm := time.NewTimer(d)
		defer tm.Stop()
		t = tm.C
	}
	select {
	case <-ctx.Done():
	case <-t:
	case <-srv.shutdown:
	}
}
