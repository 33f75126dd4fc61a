// Package server is a fake Kubernetes API server for tests and benchmarks:
// the subset of the API that informers use (discovery, CRUD, LIST, WATCH),
// with the real server's resourceVersion semantics, plus fault injection and
// load helpers on a control endpoint (/_fake/...).
//
// Start one in-process with New + Start; it listens on a real socket.
//
//	srv, _ := server.New(server.Options{Addr: "127.0.0.1:0", TLS: true})
//	_ = srv.Start()
//	defer srv.Close()
//	fmt.Println(srv.URL(), srv.Token())
package server

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Server.
type Options struct {
	// Addr is the listen address; port 0 picks a free port.
	Addr string
	// TLS serves HTTPS (HTTP/1.1 and HTTP/2 by ALPN) with an in-memory CA.
	TLS bool
	// Token is the accepted bearer token. When empty and TLS is on, a random
	// token is generated; when empty without TLS, requests are not authenticated.
	Token string
	// H2C also accepts cleartext HTTP/2 (prior knowledge) when TLS is off.
	H2C bool
	// HistorySize is the number of events kept per resource for watches from
	// an older resourceVersion (the watch cache's capacity). Default 100000.
	HistorySize int
	// BookmarkInterval is how often watches that allow bookmarks get one
	// (the real server: about a minute). Default 60s; negative disables.
	BookmarkInterval time.Duration
	// TooLargeRVWait is how long a request for a future resourceVersion waits
	// before "Too large resource version" (the real server: 3s).
	TooLargeRVWait time.Duration
	// DisableManagedFields stops recording metadata.managedFields on writes
	// (by default they are recorded, as the real server does; simplified, see
	// managedfields.go).
	DisableManagedFields bool
	// DropDecoded keeps only the JSON of current objects, not their decoded
	// form as well; a write that needs it (a patch, a field selector) decodes
	// it again. It takes large stores (150k Pods) to a fraction of the memory,
	// for some CPU per write.
	DropDecoded bool
	// Resources are registered besides the built-in ones.
	Resources []ResourceDef
	// Tokens are registered for TokenReview (see POST /_fake/tokens).
	Tokens []TokenSpec
	// AuthzRules are the SubjectAccessReview authorizer's rules (see
	// PUT /_fake/authz/rules).
	AuthzRules []AuthzRule
	// Logf, when set, receives one line per notable server event.
	Logf func(format string, args ...any)
}

type stats struct {
	requests     atomic.Int64
	watchesOpen  atomic.Int64
	watchesTotal atomic.Int64
	eventsSent   atomic.Int64
	faultsHit    atomic.Int64
	lists        atomic.Int64
	watchLists   atomic.Int64 // watches with sendInitialEvents=true

	tokenReviews         atomic.Int64
	subjectAccessReviews atomic.Int64
}

// Server is the fake API server. Its methods are safe for concurrent use.
type Server struct {
	opts     Options
	store    *Store
	faults   faultSet
	auth     authState
	stats    stats
	shutdown chan struct{}
	token    string
	tlsConf  *tls.Config
	caPEM    []byte
	httpSrv  *http.Server

	mu        sync.Mutex
	ln        net.Listener // nil while refusing connections
	addr      string
	conns     map[net.Conn]struct{}
	refusing  bool
	closed    bool
	serveErrs chan error

	churnMu sync.Mutex
	churns  map[int]*churn
	churnID int
}

// New builds a server with the built-in resources registered.
func New(opts Options) (*Server, error) {
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	if opts.HistorySize == 0 {
		opts.HistorySize = 100000
	}
	if opts.BookmarkInterval == 0 {
		opts.BookmarkInterval = time.Minute
	}
	s := &Server{
		opts:     opts,
		store:    newStore(opts.HistorySize, time.Now),
		shutdown: make(chan struct{}),
		token:    opts.Token,
		conns:    map[net.Conn]struct{}{},
		churns:   map[int]*churn{},
	}
	go s.store.runPreencoder(s.shutdown)
	if opts.TooLargeRVWait > 0 {
		s.store.tooLargeWait = opts.TooLargeRVWait
	}
	s.store.dropDecoded = opts.DropDecoded
	for _, d := range append(BuiltinResources(), opts.Resources...) {
		if err := s.store.Register(d); err != nil {
			return nil, err
		}
	}
	for _, ns := range []string{"default", "kube-system", "kube-public", "kube-node-lease"} {
		if _, aerr := s.store.Create(s.store.find("namespaces"), "", map[string]any{"metadata": map[string]any{"name": ns}}, writeOpts{}); aerr != nil {
			return nil, aerr
		}
	}
	for _, t := range opts.Tokens {
		if err := s.SetToken(t); err != nil {
			return nil, fmt.Errorf("token: %w", err)
		}
	}
	if err := s.SetAuthzRules(opts.AuthzRules); err != nil {
		return nil, err
	}
	if opts.TLS {
		if s.token == "" {
			var b [16]byte
			_, _ = rand.Read(b[:])
			s.token = hex.EncodeToString(b[:])
		}
		caPEM, cert, err := generateCerts()
		if err != nil {
			return nil, err
		}
		s.caPEM = caPEM
		s.tlsConf = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12}
	}
	s.httpSrv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       90 * time.Second,
		TLSConfig:         s.tlsConf,
		ConnState:         s.trackConn,
		ErrorLog:          nil,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: 100, // kube-apiserver's default
		},
	}
	if !opts.TLS && opts.H2C {
		var p http.Protocols
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		s.httpSrv.Protocols = &p
	}
	return s, nil
}

func (s *Server) logf(format string, args ...any) {
	if s.opts.Logf != nil {
		s.opts.Logf(format, args...)
	}
}

// Start listens and serves in the background.
func (s *Server) Start() error {
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.addr = ln.Addr().String()
	s.serveErrs = make(chan error, 16)
	s.mu.Unlock()
	s.serve(ln)
	return nil
}

func (s *Server) serve(ln net.Listener) {
	s.mu.Lock()
	s.ln = ln
	s.mu.Unlock()
	go func() {
		var err error
		if s.tlsConf != nil {
			err = s.httpSrv.ServeTLS(ln, "", "")
		} else {
			err = s.httpSrv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			s.logf("serve: %v", err)
		}
	}()
}

// Addr is the bound host:port.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// URL is the server's base URL.
func (s *Server) URL() string {
	if s.tlsConf != nil {
		return "https://" + s.Addr()
	}
	return "http://" + s.Addr()
}

// Token is the bearer token clients must send ("" when auth is off).
func (s *Server) Token() string { return s.token }

// CAPEM is the PEM of the CA that signed the serving certificate (TLS only).
func (s *Server) CAPEM() []byte { return s.caPEM }

// Close stops the server and ends every connection.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.shutdown)
	s.mu.Unlock()
	s.stopAllChurn()
	return s.httpSrv.Close()
}

func (s *Server) trackConn(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch st {
	case http.StateNew:
		s.conns[c] = struct{}{}
	case http.StateClosed, http.StateHijacked:
		delete(s.conns, c)
	}
}

// resetConnections aborts every open connection with a TCP RST.
func (s *Server) resetConnections() int {
	s.mu.Lock()
	conns := make([]net.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		raw := c
		if tc, ok := c.(*tls.Conn); ok {
			raw = tc.NetConn()
		}
		if tcp, ok := raw.(*net.TCPConn); ok {
			_ = tcp.SetLinger(0)
		}
		_ = raw.Close()
	}
	return len(conns)
}

// refuse closes the listener (new connections are refused) and resets open
// connections; after d it listens again on the same address.
func (s *Server) refuse(d time.Duration) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("server closed")
	}
	if s.refusing || s.ln == nil { // already refusing: nothing more to do
		s.mu.Unlock()
		return nil
	}
	s.refusing = true
	ln := s.ln
	s.ln = nil
	addr := s.addr
	s.mu.Unlock()
	_ = ln.Close()
	s.resetConnections()
	s.logf("refusing connections for %v", d)
	time.AfterFunc(d, func() {
		var nl net.Listener
		var err error
		for i := 0; i < 50; i++ {
			if nl, err = net.Listen("tcp", addr); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		s.mu.Lock()
		s.refusing = false
		closed := s.closed
		s.mu.Unlock()
		if err != nil {
			s.logf("relisten on %s: %v", addr, err)
			return
		}
		if closed {
			_ = nl.Close()
			return
		}
		s.serve(nl)
		s.logf("accepting connections again")
	})
	return nil
}

func isExempt(path string) bool {
	return strings.HasPrefix(path, "/_fake/") || path == "/healthz" || path == "/livez" || path == "/readyz"
}

// ServeHTTP routes a request.
func (s *Server) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	s.stats.requests.Add(1)
	path := req.URL.Path
	if strings.HasPrefix(path, "/_fake/") {
		s.serveControl(w, req)
		return
	}
	switch path {
	case "/healthz", "/livez", "/readyz":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok"))
		return
	}
	if s.token != "" && !isExempt(path) && req.Header.Get("Authorization") != "Bearer "+s.token {
		writeError(w, req, errUnauthorized())
		return
	}
	if s.serveReview(w, req) {
		return
	}
	parts := splitPath(path)
	switch {
	case len(parts) == 1 && parts[0] == "version":
		writeJSON(w, 200, "", versionInfo())
		return
	case len(parts) >= 1 && parts[0] == "api":
		if len(parts) >= 3 && parts[1] == "v1" {
			s.serveResource(w, req, "", "v1", parts[2:])
			return
		}
	case len(parts) >= 1 && parts[0] == "apis":
		if len(parts) >= 4 {
			s.serveResource(w, req, parts[1], parts[2], parts[3:])
			return
		}
	}
	if req.Method == http.MethodGet && s.serveDiscovery(w, req, parts) {
		return
	}
	writeError(w, req, errNoResource())
}
