// Command fake-apiserver runs the fake Kubernetes API server of
// informerd/testing/apiserver/server on a real socket.
//
//	fake-apiserver --addr 127.0.0.1:0 --tls --kubeconfig-out /tmp/fake/kubeconfig
//
// It prints "listening on https://127.0.0.1:PORT" once it accepts
// connections, and runs until SIGINT or SIGTERM.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"informerd/testing/apiserver/server"
)

type resourceFlags []server.ResourceDef

func (r *resourceFlags) String() string { return fmt.Sprint(len(*r)) }
func (r *resourceFlags) Set(v string) error {
	var d server.ResourceDef
	if err := json.Unmarshal([]byte(v), &d); err != nil {
		return err
	}
	*r = append(*r, d)
	return nil
}

// jsonFlags is a repeatable flag whose values are JSON objects of type T,
// decoded strictly (unknown fields are errors, as on the control endpoint).
type jsonFlags[T any] []T

func (f *jsonFlags[T]) String() string { return fmt.Sprint(len(*f)) }
func (f *jsonFlags[T]) Set(v string) error {
	var x T
	d := json.NewDecoder(strings.NewReader(v))
	d.DisallowUnknownFields()
	if err := d.Decode(&x); err != nil {
		return err
	}
	*f = append(*f, x)
	return nil
}

func main() {
	var (
		addr       = flag.String("addr", "127.0.0.1:0", "listen address HOST:PORT; port 0 picks a free port")
		useTLS     = flag.Bool("tls", false, "serve HTTPS (HTTP/1.1 and HTTP/2) with an in-memory CA; the CA is written as ca.crt next to --kubeconfig-out")
		token      = flag.String("token", "", "accepted bearer token; with --tls and no token a random one is generated; without either, no authentication")
		kubeconfig = flag.String("kubeconfig-out", "", "write a kubeconfig (server, CA data, token) to this path")
		h2c        = flag.Bool("h2c", false, "also accept cleartext HTTP/2 with prior knowledge (without --tls)")
		history    = flag.Int("history", 100000, "watch events kept per resource; older resourceVersions get 410 Gone")
		bookmark   = flag.Duration("bookmark-interval", time.Minute, "interval of BOOKMARK events for watches that allow them (negative: never)")
		tooLarge   = flag.Duration("too-large-rv-wait", 3*time.Second, "how long a request for a future resourceVersion waits before 'Too large resource version'")
		managed    = flag.Bool("managed-fields", true, "record metadata.managedFields on writes (simplified: one Update entry per manager)")
		lean       = flag.Bool("drop-decoded", false, "keep only the JSON of stored objects, decoding it again when a write needs it (for stores of 100k+ large objects)")
		verbose    = flag.Bool("v", false, "log faults and listener changes to stderr")
		resources  resourceFlags
		tokens     jsonFlags[server.TokenSpec]
		rules      jsonFlags[server.AuthzRule]
	)
	flag.Var(&resources, "resource", `register an extra resource at startup, as JSON, e.g. '{"group":"example.com","version":"v1","resource":"widgets","kind":"Widget","namespaced":true,"customResource":true}' (repeatable)`)
	flag.Var(&tokens, "auth-token", `register a token for TokenReview at startup, as JSON, e.g. '{"token":"t1","user":{"username":"alice","groups":["dev"]},"audiences":["informerd"]}' (repeatable; same as POST /_fake/tokens)`)
	flag.Var(&rules, "authz-rule", `add a SubjectAccessReview allow rule at startup, as JSON, e.g. '{"users":["alice"],"verbs":["list","watch"],"apiGroups":[""],"resources":["configmaps"],"namespaces":["ns1"]}' (repeatable, in order; same as an element of PUT /_fake/authz/rules)`)
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: fake-apiserver [flags]\n\nA fake Kubernetes API server with fault injection (see testing/apiserver/README.md).\nControl endpoint: /_fake/faults, /_fake/seed, /_fake/churn, /_fake/resources, /_fake/tokens, /_fake/authz/rules, /_fake/stats.\n\nFlags:\n")
		flag.PrintDefaults()
	}
	flag.Parse()

	opts := server.Options{Addr: *addr, TLS: *useTLS, Token: *token, H2C: *h2c, HistorySize: *history,
		BookmarkInterval: *bookmark, TooLargeRVWait: *tooLarge, Resources: resources, DisableManagedFields: !*managed, DropDecoded: *lean,
		Tokens: tokens, AuthzRules: rules}
	if *verbose {
		logger := log.New(os.Stderr, "fake-apiserver: ", log.LstdFlags|log.Lmicroseconds)
		opts.Logf = logger.Printf
	}
	srv, err := server.New(opts)
	if err != nil {
		log.Fatalf("fake-apiserver: %v", err)
	}
	if err := srv.Start(); err != nil {
		log.Fatalf("fake-apiserver: %v", err)
	}
	if *kubeconfig != "" {
		if err := srv.WriteKubeconfig(*kubeconfig); err != nil {
			log.Fatalf("fake-apiserver: %v", err)
		}
	}
	fmt.Printf("listening on %s\n", strings.TrimSuffix(srv.URL(), "/"))
	if *useTLS && *kubeconfig == "" {
		fmt.Printf("token %s\n", srv.Token())
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	_ = srv.Close()
}
