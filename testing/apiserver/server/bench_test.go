package server

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http/httputil"
	"strings"
	"testing"
	"time"
)

// rawWatch opens a watch over a plain TCP connection and returns a reader of
// the de-chunked body: no net/http client, so the reader costs little.
func rawWatch(tb testing.TB, addr, path string) (io.Reader, net.Conn) {
	return rawWatchAccept(tb, addr, path, "application/json")
}

func rawWatchAccept(tb testing.TB, addr, path, accept string) (io.Reader, net.Conn) {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: bench\r\nAccept: %s\r\n\r\n", path, addr, accept)
	br := bufio.NewReaderSize(c, 1<<20)
	status, err := br.ReadString('\n')
	if err != nil || !strings.Contains(status, " 200 ") {
		tb.Fatalf("watch: %q %v", status, err)
	}
	chunked := false
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			tb.Fatal(err)
		}
		if strings.EqualFold(strings.TrimSpace(line), "Transfer-Encoding: chunked") {
			chunked = true
		}
		if line == "\r\n" {
			break
		}
	}
	if !chunked {
		tb.Fatal("watch response is not chunked")
	}
	return httputil.NewChunkedReader(br), c
}

// countEvents reads until n newline-terminated events arrived.
func countEvents(tb testing.TB, r io.Reader, n int) int64 {
	buf := make([]byte, 1<<20)
	var got, bytesRead int64
	for got < int64(n) {
		k, err := r.Read(buf)
		bytesRead += int64(k)
		got += int64(bytes.Count(buf[:k], []byte{'\n'}))
		if err != nil {
			tb.Fatalf("after %d events: %v", got, err)
		}
	}
	return bytesRead
}

// countFrames reads n length-delimited protobuf frames.
func countFrames(tb testing.TB, r io.Reader, n int) int64 {
	br := bufio.NewReaderSize(r, 1<<20)
	var hdr [4]byte
	var bytesRead int64
	for i := 0; i < n; i++ {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			tb.Fatalf("after %d frames: %v", i, err)
		}
		size := int64(binary.BigEndian.Uint32(hdr[:]))
		if _, err := br.Discard(int(size)); err != nil {
			tb.Fatalf("after %d frames: %v", i, err)
		}
		bytesRead += 4 + size
	}
	return bytesRead
}

func benchServer(b *testing.B, history int) *Server {
	srv, err := New(Options{Addr: "127.0.0.1:0", HistorySize: history, BookmarkInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Close() })
	return srv
}

// BenchmarkWatchLive1KiB: one watcher on a real socket receives MODIFIED
// events of 1 KiB ConfigMaps while the change generator writes them as fast
// as it can. Reports events/s end to end (write path + fan-out + socket).
func BenchmarkWatchLive1KiB(b *testing.B) {
	srv := benchServer(b, 1<<16)
	if _, err := srv.Seed(SeedSpec{Resource: "configmaps", Namespace: "bench", Count: 1000, Bytes: 1024}); err != nil {
		b.Fatal(err)
	}
	rv := srv.store.CurrentRV()
	r, c := rawWatch(b, srv.Addr(), fmt.Sprintf("/api/v1/namespaces/bench/configmaps?watch=true&resourceVersion=%d", rv))
	defer c.Close()
	b.ResetTimer()
	start := time.Now()
	ch, err := srv.StartChurn(ChurnSpec{Resource: "configmaps", Namespace: "bench", Ops: b.N})
	if err != nil {
		b.Fatal(err)
	}
	n := countEvents(b, r, b.N)
	el := time.Since(start)
	b.StopTimer()
	<-ch.done
	b.ReportMetric(float64(b.N)/el.Seconds(), "events/s")
	b.ReportMetric(float64(n)/float64(b.N), "bytes/event")
}

// BenchmarkWatchReplay1KiB: the history already holds the events; one watcher
// from an old resourceVersion receives them all. Reports the emit rate alone.
func BenchmarkWatchReplay1KiB(b *testing.B) {
	srv := benchServer(b, b.N+16)
	if _, err := srv.Seed(SeedSpec{Resource: "configmaps", Namespace: "bench", Count: 1000, Bytes: 1024}); err != nil {
		b.Fatal(err)
	}
	rv := srv.store.CurrentRV()
	ch, _ := srv.StartChurn(ChurnSpec{Resource: "configmaps", Namespace: "bench", Ops: b.N})
	<-ch.done
	b.ResetTimer()
	start := time.Now()
	r, c := rawWatch(b, srv.Addr(), fmt.Sprintf("/api/v1/namespaces/bench/configmaps?watch=true&resourceVersion=%d", rv))
	defer c.Close()
	n := countEvents(b, r, b.N)
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "events/s")
	b.ReportMetric(float64(n)/float64(b.N), "bytes/event")
}

// BenchmarkWatchInitialState1KiB: a watch from resourceVersion 0 receives the
// synthetic ADDED events of every stored object.
func BenchmarkWatchInitialState1KiB(b *testing.B) {
	srv := benchServer(b, 16)
	if _, err := srv.Seed(SeedSpec{Resource: "configmaps", Namespace: "bench", Count: b.N, Bytes: 1024}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	r, c := rawWatch(b, srv.Addr(), "/api/v1/namespaces/bench/configmaps?watch=true&resourceVersion=0")
	defer c.Close()
	n := countEvents(b, r, b.N)
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "events/s")
	b.ReportMetric(float64(n)/float64(b.N), "bytes/event")
}

// BenchmarkWatchReplayProtobuf1KiB: as WatchReplay1KiB, with protobuf
// (client-go's default for built-in types). A protobuf watch was served
// before the changes, so the server encoded each event as it was committed
// (off the write path); the first replay finds the frames built, as does
// the second.
func BenchmarkWatchReplayProtobuf1KiB(b *testing.B) {
	srv := benchServer(b, b.N+16)
	if _, err := srv.Seed(SeedSpec{Resource: "configmaps", Namespace: "bench", Count: 1000, Bytes: 1024}); err != nil {
		b.Fatal(err)
	}
	rv := srv.store.CurrentRV()
	path := fmt.Sprintf("/api/v1/namespaces/bench/configmaps?watch=true&resourceVersion=%d", rv)
	_, c := rawWatchAccept(b, srv.Addr(), path, protobufContentType)
	c.Close()
	churnStart := time.Now()
	ch, _ := srv.StartChurn(ChurnSpec{Resource: "configmaps", Namespace: "bench", Ops: b.N})
	<-ch.done // after the encoding of its events
	churnRate := float64(b.N) / time.Since(churnStart).Seconds()
	b.ResetTimer()
	for _, pass := range []string{"first", "second"} {
		start := time.Now()
		r, c := rawWatchAccept(b, srv.Addr(), path, protobufContentType)
		n := countFrames(b, r, b.N)
		el := time.Since(start)
		c.Close()
		b.ReportMetric(float64(b.N)/el.Seconds(), pass+"-events/s")
		b.ReportMetric(float64(n)/float64(b.N), "bytes/event")
	}
	b.ReportMetric(churnRate, "churn+encode-events/s")
}
