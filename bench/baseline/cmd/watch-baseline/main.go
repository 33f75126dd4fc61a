// Command watch-baseline decodes recorded watch streams the way client-go does and prints
// events/s and bytes/s per stream and per client-go variant as JSON rows for tools/bench_watch.
//
//	watch-baseline --dir DIR [--min-time 1s] [--variants protobuf,metadata-protobuf,json]
//
// DIR holds <kind>-<size>.jsonl files as written by bench/watch_decode_benchmark
// --write_streams=DIR. The protobuf streams are the same events, re-encoded once at startup with
// client-go's own protobuf serializer (as kube-apiserver writes them). Every case gets an untimed
// warm-up pass first. The variants, each a row's reference_name:
//
//   - "client-go (protobuf)": the typed clients' default for built-in types since v0.37
//     (Accept: application/vnd.kubernetes.protobuf,application/json): rest.Request.Watch's path —
//     the client negotiator's stream decoder for application/vnd.kubernetes.protobuf (the
//     length-delimited framer, the raw protobuf serializer for metav1.WatchEvent) and the
//     clientset scheme's protobuf decoder for the embedded objects, into typed objects;
//   - "client-go (metadata-only protobuf)": the same frames, each object decoded into a
//     metav1.PartialObjectMetadata (what a metadata informer holds; ObjectMeta is field 1 of every
//     object, the other fields are skipped) by apimachinery's protobuf serializer;
//   - "client-go (JSON)": the JSON framer and serializer for the events, the same decoder for the
//     objects, into typed objects.
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

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	restclientwatch "k8s.io/client-go/rest/watch"
)

type row struct {
	Name          string  `json:"name"`
	Unit          string  `json:"unit"`
	Value         float64 `json:"value"`
	ReferenceName string  `json:"reference_name"`
	Variant       string  `json:"variant"`
}

// negotiator is what rest.RESTClientFor gives a typed core/v1 client.
var negotiator = runtime.NewClientNegotiator(scheme.Codecs.WithoutConversion(), corev1.SchemeGroupVersion)

// metadataDecoder decodes an enveloped object into a PartialObjectMetadata. Its serializer's
// scheme is empty, so that protobuf.Serializer unmarshals the message into the given object.
type metadataDecoder struct{ s *protobuf.Serializer }

func (d metadataDecoder) Decode(data []byte, gvk *schema.GroupVersionKind, _ runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	return d.s.Decode(data, gvk, &metav1.PartialObjectMetadata{})
}

var emptyScheme = runtime.NewScheme()

// variant is one way of decoding, with the stream it decodes.
type variant struct {
	name, reference string
	mediaType       string
	metadataOnly    bool
}

var variants = []variant{
	{"protobuf", "client-go (protobuf)", runtime.ContentTypeProtobuf, false},
	{"metadata-protobuf", "client-go (metadata-only protobuf)", runtime.ContentTypeProtobuf, true},
	{"json", "client-go (JSON)", runtime.ContentTypeJSON, false},
}

// decodeAll decodes every event of one stream, as a client-go watch would; returns the count.
func decodeAll(v variant, data []byte) (int, error) {
	objectDecoder, streamSerializer, framer, err := negotiator.StreamDecoder(v.mediaType, nil)
	if err != nil {
		return 0, err
	}
	if v.metadataOnly {
		objectDecoder = metadataDecoder{protobuf.NewSerializer(emptyScheme, emptyScheme)}
	}
	frames := framer.NewFrameReader(io.NopCloser(bytes.NewReader(data)))
	decoder := restclientwatch.NewDecoder(streaming.NewDecoder(frames, streamSerializer), objectDecoder)
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
		if v.metadataOnly {
			if m, ok := obj.(*metav1.PartialObjectMetadata); !ok || m.Name == "" {
				return n, fmt.Errorf("not a PartialObjectMetadata with a name: %T", obj)
			}
		}
		n++
	}
}

// toProtobuf re-encodes a JSON watch stream as kube-apiserver writes it for a protobuf client:
// each object with the protobuf serializer (the "k8s\x00" envelope), each event as a
// metav1.WatchEvent with the stream serializer, framed by the length-delimited framer.
func toProtobuf(data []byte) ([]byte, error) {
	jsonInfo, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	pbInfo, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	if !ok || pbInfo.StreamSerializer == nil {
		return nil, errors.New("no protobuf stream serializer")
	}
	frames := jsonInfo.StreamSerializer.Framer.NewFrameReader(io.NopCloser(bytes.NewReader(data)))
	decoder := restclientwatch.NewDecoder(streaming.NewDecoder(frames, jsonInfo.StreamSerializer.Serializer), scheme.Codecs.UniversalDeserializer())
	defer decoder.Close()
	var out bytes.Buffer
	writer := pbInfo.StreamSerializer.Framer.NewFrameWriter(&out)
	for {
		typ, obj, err := decoder.Decode()
		if errors.Is(err, io.EOF) {
			return out.Bytes(), nil
		}
		if err != nil {
			return nil, err
		}
		gv := obj.GetObjectKind().GroupVersionKind().GroupVersion()
		var embedded bytes.Buffer
		if err := scheme.Codecs.EncoderForVersion(pbInfo.Serializer, gv).Encode(obj, &embedded); err != nil {
			return nil, err
		}
		event := &metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: embedded.Bytes()}}
		if err := scheme.Codecs.EncoderForVersion(pbInfo.StreamSerializer.Serializer, gv).Encode(event, writer); err != nil {
			return nil, err
		}
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "watch-baseline: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	dir := flag.String("dir", "", "directory of <kind>-<size>.jsonl streams")
	minTime := flag.Duration("min-time", time.Second, "decode each stream for at least this long (after a warm-up pass)")
	only := flag.String("variants", "protobuf,metadata-protobuf,json", "comma-separated: protobuf, metadata-protobuf, json")
	flag.Parse()
	files, err := filepath.Glob(filepath.Join(*dir, "*.jsonl"))
	if err != nil || len(files) == 0 {
		fmt.Fprintf(os.Stderr, "watch-baseline: no streams in %q\n", *dir)
		os.Exit(2)
	}
	var chosen []variant
	for _, name := range strings.Split(*only, ",") {
		found := false
		for _, v := range variants {
			if v.name == strings.TrimSpace(name) {
				chosen, found = append(chosen, v), true
			}
		}
		if !found {
			fail("unknown variant %q", name)
		}
	}
	sort.Strings(files)
	var rows []row
	for _, f := range files {
		jsonData, err := os.ReadFile(f)
		if err != nil {
			fail("%v", err)
		}
		name := strings.TrimSuffix(filepath.Base(f), ".jsonl")
		var pbData []byte
		for _, v := range chosen {
			data := jsonData
			if v.mediaType == runtime.ContentTypeProtobuf {
				if pbData == nil {
					if pbData, err = toProtobuf(jsonData); err != nil {
						fail("%s: re-encoding as protobuf: %v", name, err)
					}
				}
				data = pbData
			}
			if _, err := decodeAll(v, data); err != nil { // warm-up
				fail("%s (%s): %v", name, v.name, err)
			}
			events, passes := 0, 0
			start := time.Now()
			for passes == 0 || time.Since(start) < *minTime {
				n, err := decodeAll(v, data)
				if err != nil {
					fail("%s (%s): %v", name, v.name, err)
				}
				events += n
				passes++
			}
			secs := time.Since(start).Seconds()
			rows = append(rows,
				row{Name: name, Unit: "events/s", Value: float64(events) / secs, ReferenceName: v.reference, Variant: v.name},
				row{Name: name + "-bytes", Unit: "bytes/s", Value: float64(len(data)*passes) / secs, ReferenceName: v.reference, Variant: v.name},
				row{Name: name + "-event-bytes", Unit: "bytes", Value: float64(len(data)) / float64(events/passes), ReferenceName: v.reference, Variant: v.name})
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(map[string]any{"rows": rows}); err != nil {
		os.Exit(1)
	}
}
