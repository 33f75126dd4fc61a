// Command watch-baseline decodes recorded watch streams the way client-go's typed clients do
// (rest.Request.Watch: the JSON framer, the streaming decoder for watch events, and the
// clientset scheme's decoder for the embedded objects) and prints events/s and bytes/s per
// stream as JSON rows for tools/bench_table.py.
//
//	watch-baseline --dir DIR [--min-time 1s]
//
// DIR holds <kind>-<size>.jsonl files as written by bench/watch_decode_benchmark
// --write_streams=DIR.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	restclientwatch "k8s.io/client-go/rest/watch"
)

type row struct {
	Name  string  `json:"name"`
	Unit  string  `json:"unit"`
	Value float64 `json:"value"`
}

// decodeAll decodes every event of one stream, as a client-go watch would; returns the count.
func decodeAll(data []byte) (int, error) {
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok || info.StreamSerializer == nil {
		return 0, errors.New("no JSON stream serializer")
	}
	frames := info.StreamSerializer.Framer.NewFrameReader(io.NopCloser(bytes.NewReader(data)))
	events := streaming.NewDecoder(frames, info.StreamSerializer.Serializer)
	decoder := restclientwatch.NewDecoder(events, scheme.Codecs.UniversalDeserializer())
	defer decoder.Close()
	n := 0
	for {
		typ, obj, err := decoder.Decode()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return n, nil
			}
			return n, err
		}
		if typ == watch.Error || obj == nil {
			return n, fmt.Errorf("unexpected event %v", typ)
		}
		n++
	}
}

func main() {
	dir := flag.String("dir", "", "directory of <kind>-<size>.jsonl streams")
	minTime := flag.Duration("min-time", time.Second, "decode each stream for at least this long")
	flag.Parse()
	files, err := filepath.Glob(filepath.Join(*dir, "*.jsonl"))
	if err != nil || len(files) == 0 {
		fmt.Fprintf(os.Stderr, "watch-baseline: no streams in %q\n", *dir)
		os.Exit(2)
	}
	sort.Strings(files)
	var rows []row
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintf(os.Stderr, "watch-baseline: %v\n", err)
			os.Exit(1)
		}
		name := strings.TrimSuffix(filepath.Base(f), ".jsonl")
		events, passes := 0, 0
		start := time.Now()
		for passes == 0 || time.Since(start) < *minTime {
			n, err := decodeAll(data)
			if err != nil {
				fmt.Fprintf(os.Stderr, "watch-baseline: %s: %v\n", name, err)
				os.Exit(1)
			}
			events += n
			passes++
		}
		secs := time.Since(start).Seconds()
		rows = append(rows,
			row{Name: name, Unit: "events/s", Value: float64(events) / secs},
			row{Name: name + "-bytes", Unit: "bytes/s", Value: float64(len(data)*passes) / secs})
	}
	if err := json.NewEncoder(os.Stdout).Encode(map[string]any{"rows": rows}); err != nil {
		os.Exit(1)
	}
}
