// Command watch-load measures how many watch events per second a fake API
// server delivers to one watcher over a real socket. It seeds objects and
// drives the server's change generator through the control endpoint, and
// reads the watch with a raw HTTP/1.1 client that only counts
// newline-delimited events.
//
//	fake-apiserver --addr 127.0.0.1:18080 &
//	watch-load --server http://127.0.0.1:18080 --events 500000
package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"time"
)

func main() {
	var (
		serverURL = flag.String("server", "http://127.0.0.1:8080", "fake API server base URL")
		caFile    = flag.String("ca", "", "CA certificate (PEM) for an https server")
		token     = flag.String("token", "", "bearer token")
		ns        = flag.String("namespace", "watch-load", "namespace of the objects")
		objects   = flag.Int("objects", 1000, "ConfigMaps to seed before measuring")
		size      = flag.Int("bytes", 1024, "approximate size of each ConfigMap")
		events    = flag.Int("events", 300000, "events to receive")
		mode      = flag.String("mode", "live", "live: measure while the change generator runs; replay: generate first, then watch from the old resourceVersion; initial: watch from resourceVersion 0 over --objects objects")
	)
	flag.Parse()
	u, err := url.Parse(*serverURL)
	if err != nil {
		log.Fatal(err)
	}
	var tlsConf *tls.Config
	if u.Scheme == "https" {
		tlsConf = &tls.Config{NextProtos: []string{"http/1.1"}, ServerName: u.Hostname()}
		if *caFile != "" {
			pem, err := os.ReadFile(*caFile)
			if err != nil {
				log.Fatal(err)
			}
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(pem)
			tlsConf.RootCAs = pool
		}
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf}}
	control := func(path string, body any, out any) {
		b, _ := json.Marshal(body)
		method := http.MethodPost
		if body == nil {
			method = http.MethodGet
		}
		req, _ := http.NewRequest(method, *serverURL+path, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		rb, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			log.Fatalf("%s: %d %s", path, resp.StatusCode, rb)
		}
		if out != nil {
			_ = json.Unmarshal(rb, out)
		}
	}
	seedCount := *objects
	if *mode == "initial" {
		seedCount = *events
	}
	var seed struct {
		ResourceVersion string `json:"resourceVersion"`
	}
	control("/_fake/seed", map[string]any{"resource": "configmaps", "namespace": *ns, "count": seedCount, "bytes": *size, "prefix": fmt.Sprintf("load-%d-", time.Now().UnixNano())}, &seed)
	rv := seed.ResourceVersion
	churn := map[string]any{"resource": "configmaps", "namespace": *ns, "ops": *events}
	switch *mode {
	case "replay":
		churn["wait"] = true
		control("/_fake/churn", churn, nil)
	case "initial":
		rv = "0"
	case "live":
	default:
		log.Fatalf("unknown mode %q", *mode)
	}
	path := fmt.Sprintf("/api/v1/namespaces/%s/configmaps?watch=true&resourceVersion=%s", *ns, rv)
	start := time.Now()
	body, conn := openWatch(u, tlsConf, *token, path)
	defer conn.Close()
	if *mode == "live" {
		go control("/_fake/churn", churn, nil)
	}
	buf := make([]byte, 1<<20)
	var got, bytesRead int64
	for got < int64(*events) {
		n, err := body.Read(buf)
		bytesRead += int64(n)
		got += int64(bytes.Count(buf[:n], []byte{'\n'}))
		if err != nil {
			log.Fatalf("after %d events: %v", got, err)
		}
	}
	el := time.Since(start)
	fmt.Printf("mode=%s events=%d bytes/event=%d elapsed=%v events/s=%.0f MB/s=%.1f\n", *mode, got, bytesRead/got, el.Round(time.Millisecond),
		float64(got)/el.Seconds(), float64(bytesRead)/el.Seconds()/1e6)
}

// openWatch sends a GET over a raw connection and returns the de-chunked body.
func openWatch(u *url.URL, tlsConf *tls.Config, token, path string) (io.Reader, net.Conn) {
	var conn net.Conn
	var err error
	if tlsConf != nil {
		conn, err = tls.Dial("tcp", u.Host, tlsConf)
	} else {
		conn, err = net.Dial("tcp", u.Host)
	}
	if err != nil {
		log.Fatal(err)
	}
	auth := ""
	if token != "" {
		auth = "Authorization: Bearer " + token + "\r\n"
	}
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: watch-load\r\n%s\r\n", path, u.Host, auth)
	br := bufio.NewReaderSize(conn, 1<<20)
	status, err := br.ReadString('\n')
	if err != nil || !strings.Contains(status, " 200 ") {
		log.Fatalf("watch: %q %v", status, err)
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			log.Fatal(err)
		}
		if line == "\r\n" {
			break
		}
	}
	return httputil.NewChunkedReader(br), conn
}
