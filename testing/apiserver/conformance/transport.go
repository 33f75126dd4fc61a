package conformance

import (
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/features"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

type httpRoundTripper = http.RoundTripper

// idleTimeoutTransport ends watch responses on which no byte arrived for
// idle, with an error that client-go treats as a timeout (a clean end of the
// watch, followed by a new watch from the last resourceVersion).
type idleTimeoutTransport struct {
	next http.RoundTripper
	idle time.Duration
}

func (t *idleTimeoutTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || req.URL.Query().Get("watch") == "" {
		return resp, err
	}
	resp.Body = newIdleBody(resp.Body, t.idle)
	return resp, nil
}

type idleTimeoutError struct{}

func (idleTimeoutError) Error() string   { return "watch stream idle for too long" }
func (idleTimeoutError) Timeout() bool   { return true }
func (idleTimeoutError) Temporary() bool { return true }

type idleBody struct {
	body  io.ReadCloser
	timer *time.Timer
	fired atomic.Bool
	idle  time.Duration
}

func newIdleBody(b io.ReadCloser, idle time.Duration) *idleBody {
	ib := &idleBody{body: b, idle: idle}
	ib.timer = time.AfterFunc(idle, func() {
		ib.fired.Store(true)
		_ = b.Close()
	})
	return ib
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if b.fired.Load() {
		return n, idleTimeoutError{}
	}
	if n > 0 {
		b.timer.Reset(b.idle)
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	return b.body.Close()
}

// gateOverride wraps client-go's feature gates so that the WatchListClient
// gate can be chosen per informer start.
type gateOverride struct {
	base features.Gates
	// watchList: 0 default, 1 on, 2 off.
	watchList atomic.Int32
}

func (g *gateOverride) Enabled(key features.Feature) bool {
	if key == features.WatchListClient {
		switch g.watchList.Load() {
		case 1:
			return true
		case 2:
			return false
		}
	}
	return g.base.Enabled(key)
}

var (
	gateOnce sync.Once
	gates    *gateOverride
	// gateMu is held from setting the gate until the informer's reflector
	// has read it (the informer has synced).
	gateMu sync.Mutex
)

// startWithGate starts the informer with the WatchListClient gate set as
// asked, and waits for it to sync.
func startWithGate(ctx context.Context, watchList *bool, factory informers.SharedInformerFactory, inf cache.SharedIndexInformer) error {
	if watchList == nil {
		factory.Start(ctx.Done())
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			return context.Canceled
		}
		return nil
	}
	gateOnce.Do(func() {
		gates = &gateOverride{base: features.FeatureGates()}
		features.ReplaceFeatureGates(gates)
	})
	gateMu.Lock()
	defer gateMu.Unlock()
	v := int32(2)
	if *watchList {
		v = 1
	}
	gates.watchList.Store(v)
	defer gates.watchList.Store(0)
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return context.Canceled
	}
	return nil
}

func timeAfter100ms() <-chan time.Time { return time.After(100 * time.Millisecond) }
