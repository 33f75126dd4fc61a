package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Response bodies in the negotiated format. Objects are stored as JSON; the
// other encodings are derived from it with apimachinery's serializers: the
// JSON is decoded into the k8s.io/api struct and encoded by
// protobuf.Serializer ("k8s\x00" + runtime.Unknown). An object's protobuf
// message is built once and kept on the (immutable) object, a watch event's
// frame in each format once and kept on the event, so that many watchers or
// repeated lists do not encode again.

const metaAPIVersion = "meta.k8s.io/v1"

var (
	// protoRawSerializer encodes watch events without the envelope, as the
	// protobuf stream serializer of kube-apiserver's codec factory does.
	protoRawSerializer = protobuf.NewRawSerializer(protoScheme, protoScheme)
	// watchEventEncoder is that serializer behind the versioning codec (the
	// event is metav1.WatchEvent, registered in every group version).
	watchEventEncoder = serializer.NewCodecFactory(protoScheme).EncoderForVersion(protoRawSerializer, schema.GroupVersion{Version: "v1"})
)

func (r *resourceStore) gvk() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: r.def.Group, Version: r.def.Version, Kind: r.def.Kind}
}

// hasProtobuf: a built-in type of protoScheme (custom resources have none).
func hasProtobuf(d *ResourceDef) bool {
	return !d.CustomResource && protoScheme.Recognizes(schema.GroupVersionKind{Group: d.Group, Version: d.Version, Kind: d.Kind})
}

type protoMarshaler interface {
	Marshal() ([]byte, error)
}

// typedFromJSON decodes JSON into a new typed object of gvk.
func typedFromJSON(gvk schema.GroupVersionKind, b []byte) (runtime.Object, error) {
	obj, err := protoScheme.New(gvk)
	if err != nil {
		return nil, err
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(b, obj); err != nil {
		return nil, fmt.Errorf("%s %s: %w", gvk.Kind, "as protobuf", err)
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	return obj, nil
}

// envelope is protobuf.Serializer's encoding of a message: "k8s\x00" and a
// runtime.Unknown holding the type and the message.
func envelope(apiVersion, kind string, raw []byte) []byte {
	var buf bytes.Buffer
	buf.Grow(len(raw) + len(apiVersion) + len(kind) + 16)
	_ = protoSerializer.Encode(&runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: apiVersion, Kind: kind}, Raw: raw}, &buf)
	return buf.Bytes()
}

// encodeTyped encodes a typed object (its kind set) in the envelope.
func encodeTyped(obj runtime.Object) ([]byte, error) {
	var buf bytes.Buffer
	if err := protoSerializer.Encode(obj, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// cached returns *p, building and keeping it on first use (concurrent first
// uses may both build; either result is kept).
func cached(p *atomic.Pointer[[]byte], build func() ([]byte, error)) ([]byte, error) {
	if b := p.Load(); b != nil {
		return *b, nil
	}
	b, err := build()
	if err != nil {
		return nil, err
	}
	p.Store(&b)
	return b, nil
}

// rawProto is the object's protobuf message (no envelope), built once.
func (r *resourceStore) rawProto(o *object) ([]byte, error) {
	return cached(&o.pb, func() ([]byte, error) {
		obj, err := typedFromJSON(r.gvk(), o.full)
		if err != nil {
			return nil, err
		}
		m, ok := obj.(protoMarshaler)
		if !ok {
			return nil, fmt.Errorf("%T has no protobuf encoding", obj)
		}
		return m.Marshal()
	})
}

func (o *object) objectMeta() (metav1.ObjectMeta, error) {
	var v struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	err := sigsjson.UnmarshalCaseSensitivePreserveInts(o.full, &v)
	return v.Metadata, err
}

func partialObjectMetadata(om metav1.ObjectMeta) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: metaAPIVersion}, ObjectMeta: om}
}

// metaJSON is the object as a PartialObjectMetadata in JSON, built once.
func (o *object) metaJSON() ([]byte, error) {
	return cached(&o.metaJ, func() ([]byte, error) {
		om, err := o.objectMeta()
		if err != nil {
			return nil, err
		}
		return json.Marshal(partialObjectMetadata(om))
	})
}

// metaProto is the PartialObjectMetadata message of the object, built once.
func (o *object) metaProto() ([]byte, error) {
	return cached(&o.metaPB, func() ([]byte, error) {
		om, err := o.objectMeta()
		if err != nil {
			return nil, err
		}
		return partialObjectMetadata(om).Marshal()
	})
}

// encodeObject is a single object's response body (get, create, update,
// patch, a namespace's delete).
func (r *resourceStore) encodeObject(o *object, f outputFormat) ([]byte, error) {
	if f.media == mediaProtobuf {
		if f.meta() {
			raw, err := o.metaProto()
			if err != nil {
				return nil, err
			}
			return envelope(metaAPIVersion, "PartialObjectMetadata", raw), nil
		}
		raw, err := r.rawProto(o)
		if err != nil {
			return nil, err
		}
		return envelope(r.def.GroupVersion(), r.def.Kind, raw), nil
	}
	j := o.full
	if f.meta() {
		var err error
		if j, err = o.metaJSON(); err != nil {
			return nil, err
		}
	}
	if f.media == mediaYAML {
		return yaml.JSONToYAML(j)
	}
	return j, nil
}

// encodeListAs is a list's response body (list, deletecollection).
func (r *resourceStore) encodeListAs(res *listResult, f outputFormat) ([]byte, error) {
	if f.media == mediaProtobuf {
		return r.encodeListProto(res, f.meta())
	}
	var j []byte
	if f.meta() {
		items := make([][]byte, len(res.items))
		for i, o := range res.items {
			b, err := o.metaJSON()
			if err != nil {
				return nil, err
			}
			items[i] = b
		}
		j = encodeListJSON("PartialObjectMetadataList", metaAPIVersion, res, func(buf *bytes.Buffer, i int, _ *object) { buf.Write(items[i]) })
	} else {
		j = encodeList(r, res)
	}
	if f.media == mediaYAML {
		return yaml.JSONToYAML(j)
	}
	return j, nil
}

// encodeListProto builds the list message from the items' cached messages:
// every k8s.io/api list is `ListMeta metadata = 1; repeated T items = 2`
// (so is PartialObjectMetadataList), which is what the generated Marshal
// writes; the envelope is protobuf.Serializer's.
func (r *resourceStore) encodeListProto(res *listResult, meta bool) ([]byte, error) {
	lm := metav1.ListMeta{ResourceVersion: strconv.FormatUint(res.rv, 10), Continue: res.cont, RemainingItemCount: res.remaining}
	lmb, err := lm.Marshal()
	if err != nil {
		return nil, err
	}
	items := make([][]byte, len(res.items))
	size := len(lmb) + 16
	for i, o := range res.items {
		var b []byte
		if meta {
			b, err = o.metaProto()
		} else {
			b, err = r.rawProto(o)
		}
		if err != nil {
			return nil, err
		}
		items[i] = b
		size += len(b) + 8
	}
	raw := make([]byte, 0, size)
	raw = protowire.AppendTag(raw, 1, protowire.BytesType)
	raw = protowire.AppendBytes(raw, lmb)
	for _, b := range items {
		raw = protowire.AppendTag(raw, 2, protowire.BytesType)
		raw = protowire.AppendBytes(raw, b)
	}
	if meta {
		return envelope(metaAPIVersion, "PartialObjectMetadataList", raw), nil
	}
	return envelope(r.def.GroupVersion(), r.def.ListKind, raw), nil
}

// encodeJSONAs re-encodes a typed object's JSON body (a Status, a review)
// in the negotiated media type; conversions do not apply to them.
func encodeJSONAs(gvk schema.GroupVersionKind, body []byte, f outputFormat) ([]byte, error) {
	switch f.media {
	case mediaYAML:
		return yaml.JSONToYAML(body)
	case mediaProtobuf:
		obj, err := typedFromJSON(gvk, body)
		if err != nil {
			return nil, err
		}
		return encodeTyped(obj)
	}
	return body, nil
}

var statusGVK = schema.GroupVersionKind{Version: "v1", Kind: "Status"}

// wireFormat is a watch stream's encoding: JSON or protobuf, full objects
// or PartialObjectMetadata.
type wireFormat uint8

const (
	wireJSON wireFormat = iota
	wireJSONMeta
	wireProtobuf
	wireProtobufMeta
	numWireFormats
)

func wireOf(f outputFormat) wireFormat {
	w := wireJSON
	if f.media == mediaProtobuf {
		w = wireProtobuf
	}
	if f.meta() {
		w++
	}
	return w
}

func (w wireFormat) protobuf() bool { return w >= wireProtobuf }
func (w wireFormat) meta() bool     { return w == wireJSONMeta || w == wireProtobufMeta }

// protobufWatchFrame is one event of a protobuf watch: the length-delimited
// framer's 4-byte big-endian length, then metav1.WatchEvent whose object is
// the embedded envelope.
func protobufWatchFrame(typ eventType, embedded []byte) []byte {
	var buf bytes.Buffer
	buf.Grow(len(embedded) + len(typ) + 16)
	fw := protobuf.LengthDelimitedFramer.NewFrameWriter(&buf)
	if err := watchEventEncoder.Encode(&metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: embedded}}, fw); err != nil {
		panic(fmt.Sprintf("encoding a watch event: %v", err)) // WatchEvent is registered: cannot fail
	}
	return buf.Bytes()
}

// eventFrame is the frame of an event of type typ carrying o, in w.
func (r *resourceStore) eventFrame(typ eventType, o *object, w wireFormat) ([]byte, error) {
	switch w {
	case wireJSON:
		if o.frameType == typ && o.frame != nil {
			return o.frame, nil
		}
		return buildFrame(typ, o.full), nil
	case wireJSONMeta:
		j, err := o.metaJSON()
		if err != nil {
			return nil, err
		}
		return buildFrame(typ, j), nil
	}
	f := outputFormat{media: mediaProtobuf}
	if w == wireProtobufMeta {
		f.as = "PartialObjectMetadata"
	}
	emb, err := r.encodeObject(o, f)
	if err != nil {
		return nil, err
	}
	return protobufWatchFrame(typ, emb), nil
}

// errorFrameAs is an ERROR event carrying e's Status.
func errorFrameAs(e *apiError, w wireFormat) []byte {
	if !w.protobuf() {
		return errorFrame(e)
	}
	emb, err := encodeJSONAs(statusGVK, e.body(), outputFormat{media: mediaProtobuf})
	if err != nil {
		return errorFrame(e)
	}
	return protobufWatchFrame(evError, emb)
}

// bookmarkFrameAs is a BOOKMARK at rv: an object of the resource's kind (or
// a PartialObjectMetadata) with only its resourceVersion and, at the end of
// a streaming list's initial events, the initial-events-end annotation.
func bookmarkFrameAs(r *resourceStore, rv uint64, initialEnd bool, w wireFormat) []byte {
	if w == wireJSON {
		return bookmarkFrame(r, rv, initialEnd)
	}
	om := metav1.ObjectMeta{ResourceVersion: strconv.FormatUint(rv, 10)}
	if initialEnd {
		om.Annotations = map[string]string{"k8s.io/initial-events-end": "true"}
	}
	if w == wireJSONMeta {
		j, _ := json.Marshal(partialObjectMetadata(om))
		return buildFrame(evBookmark, j)
	}
	var obj runtime.Object = partialObjectMetadata(om)
	if w == wireProtobuf {
		typed, err := protoScheme.New(r.gvk())
		if err != nil {
			return bookmarkFrame(r, rv, initialEnd)
		}
		if a, ok := typed.(metav1.ObjectMetaAccessor); ok {
			*a.GetObjectMeta().(*metav1.ObjectMeta) = om
		}
		typed.GetObjectKind().SetGroupVersionKind(r.gvk())
		obj = typed
	}
	emb, err := encodeTyped(obj)
	if err != nil {
		return bookmarkFrame(r, rv, initialEnd)
	}
	return protobufWatchFrame(evBookmark, emb)
}

// Variants of an event for selector watchers.
const (
	variantAsIs    = iota // the event as it happened
	variantAdded          // the object entered the selector: ADDED
	variantDeleted        // it left: DELETED, the previous state at the event's RV
	numVariants
)

// frameSet is an event's frames in formats other than its own JSON, built
// on first use; replaced (never changed) under the event's variantMu.
type frameSet [numWireFormats * numVariants][]byte

// frameFor returns the event's frame in w for the variant, built once.
func (ev *event) frameFor(r *resourceStore, w wireFormat, variant int) ([]byte, error) {
	if w == wireJSON && variant == variantAsIs {
		return ev.frame, nil
	}
	i := int(w)*numVariants + variant
	if fs := ev.frames.Load(); fs != nil && fs[i] != nil {
		return fs[i], nil
	}
	ev.variantMu.Lock()
	defer ev.variantMu.Unlock()
	fs := ev.frames.Load()
	if fs != nil && fs[i] != nil {
		return fs[i], nil
	}
	typ, o := ev.typ, ev.obj
	switch variant {
	case variantAdded:
		typ = evAdded
	case variantDeleted:
		if ev.asDeleted == nil {
			ev.asDeleted = r.withRV(ev.prev, ev.rv, evDeleted)
		}
		typ, o = evDeleted, ev.asDeleted
	}
	frame, err := r.eventFrame(typ, o, w)
	if err != nil {
		return nil, err
	}
	next := &frameSet{}
	if fs != nil {
		*next = *fs
	}
	next[i] = frame
	ev.frames.Store(next)
	return frame, nil
}

type preencodeJob struct {
	r  *resourceStore
	ev *event
}

// wantFrames notes that a watch of r is served in w: from now on, r's new
// events are encoded in w as they are committed (by runPreencoder, off the
// write path), so that a watcher replaying them later does not wait for the
// encoding. JSON frames are built with the event anyway.
func (r *resourceStore) wantFrames(w wireFormat) {
	if w != wireJSON {
		r.wantWire.Or(1 << w)
	}
}

// runPreencoder encodes queued events in their resources' wanted formats
// until stop is closed.
func (s *Store) runPreencoder(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			close(s.stopped)
			return
		case j := <-s.preencode:
			want := j.r.wantWire.Load()
			for w := wireJSONMeta; w < numWireFormats; w++ {
				if want&(1<<w) != 0 {
					_, _ = j.ev.frameFor(j.r, w, variantAsIs)
				}
			}
			s.encoding.Add(-1)
		}
	}
}

// waitPreencoded returns once every queued event is encoded (or stop).
func (s *Store) waitPreencoded(stop <-chan struct{}) {
	for s.encoding.Load() > 0 {
		select {
		case <-stop:
			return
		case <-time.After(time.Millisecond):
		}
	}
}
