package server

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
)

// object is one stored version of a resource instance. It is immutable once
// stored: an update stores a new *object. Every field is derived from data.
type object struct {
	key       string // "namespace/name", or "name" when cluster-scoped
	namespace string
	name      string
	uid       string
	rv        uint64
	labels    map[string]string
	// data is the decoded object without kind/apiVersion. It is dropped when
	// the object is superseded (history keeps only the JSON, which the
	// garbage collector need not scan), or at once with Options.DropDecoded,
	// and decoded again on demand.
	data atomic.Pointer[map[string]any]
	// full is the JSON of the object with kind and apiVersion first; full[bodyOff:]
	// is the JSON of data without its opening brace, so that "{"+full[bodyOff:]
	// is the typeless form used for items of built-in lists.
	full    []byte
	bodyOff int
	// frame is the watch event of type frameType that full is a part of
	// (nil when frameType is "").
	frame     []byte
	frameType eventType
	// Other encodings, built on first use (respond.go): the protobuf
	// message, and the object as a PartialObjectMetadata in protobuf and JSON.
	pb, metaPB, metaJ atomic.Pointer[[]byte]
}

func metaOf(data map[string]any) map[string]any {
	m, _ := data["metadata"].(map[string]any)
	if m == nil {
		m = map[string]any{}
		data["metadata"] = m
	}
	return m
}

func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

func labelsOf(meta map[string]any) map[string]string {
	raw, _ := meta["labels"].(map[string]any)
	if len(raw) == 0 {
		return nil
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

// deepCopy copies a decoded JSON value.
func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		s := make([]any, len(t))
		for i, e := range t {
			s[i] = deepCopy(e)
		}
		return s
	default:
		return v
	}
}

func copyMap(m map[string]any) map[string]any {
	return deepCopy(m).(map[string]any)
}

// decodeJSON decodes an object, keeping numbers exact.
func decodeJSON(b []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, fmt.Errorf("unexpected data after the object")
	}
	if m == nil {
		return nil, fmt.Errorf("body is not a JSON object")
	}
	return m, nil
}

func jsonEqual(a, b any) bool {
	if a == nil && b == nil {
		return true
	}
	ab, err1 := json.Marshal(a)
	bb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ab, bb)
}

// finish builds the immutable object from data (which it takes ownership of).
// The JSON is written once into a buffer laid out as a watch event of type
// typ — `{"type":"ADDED","object":` + full + "}\n" — so that the event frame
// and the object share one allocation. typ "" builds no frame.
func (r *resourceStore) finish(data map[string]any, typ eventType) (*object, error) {
	meta := metaOf(data)
	delete(data, "kind")
	delete(data, "apiVersion")
	o := &object{
		namespace: str(meta, "namespace"),
		name:      str(meta, "name"),
		uid:       str(meta, "uid"),
		labels:    labelsOf(meta),
		frameType: typ,
	}
	o.data.Store(&data)
	o.key = objectKey(o.namespace, o.name)
	o.rv, _ = strconv.ParseUint(str(meta, "resourceVersion"), 10, 64)

	buf := make([]byte, 0, r.sizeHint.Load()+256)
	if typ != "" {
		buf = append(buf, `{"type":"`...)
		buf = append(buf, typ...)
		buf = append(buf, `","object":`...)
	}
	fullStart := len(buf)
	buf = append(buf, r.typePrefix...)
	pos := len(buf)
	buf, err := appendJSON(buf, data)
	if err != nil {
		return nil, err
	}
	if len(buf)-pos == 2 { // data is "{}": drop the prefix's trailing comma
		buf = append(buf[:pos-1], '}')
	} else { // drop data's opening brace: the prefix opened the object
		copy(buf[pos:], buf[pos+1:])
		buf = buf[:len(buf)-1]
	}
	fullEnd := len(buf)
	if typ != "" {
		buf = append(buf, "}\n"...)
		o.frame = buf
	}
	o.full = buf[fullStart:fullEnd:fullEnd]
	o.bodyOff = pos - fullStart
	if n := int64(len(buf)); n > r.sizeHint.Load() {
		r.sizeHint.Store(n)
	}
	return o, nil
}

// dataMap returns the decoded object (read-only).
func (o *object) dataMap() map[string]any {
	if p := o.data.Load(); p != nil {
		return *p
	}
	body := make([]byte, 0, len(o.full)-o.bodyOff+1)
	body = append(append(body, '{'), o.full[o.bodyOff:]...)
	m, err := decodeJSON(body)
	if err != nil {
		return map[string]any{"metadata": map[string]any{"name": o.name, "namespace": o.namespace}}
	}
	return m
}

// dropDecoded drops the decoded form (an object no longer current, or any
// with Options.DropDecoded); dataMap decodes the JSON again when asked.
func (o *object) dropDecoded() { o.data.Store(nil) }

// withRV returns a copy of o whose resourceVersion is rv, framed as typ (used
// for DELETED events, which carry the deletion's resourceVersion).
func (r *resourceStore) withRV(o *object, rv uint64, typ eventType) *object {
	data := shallowWithMeta(o.dataMap())
	metaOf(data)["resourceVersion"] = strconv.FormatUint(rv, 10)
	n, err := r.finish(data, typ)
	if err != nil {
		return o
	}
	return n
}

// shallowWithMeta copies the top level and metadata maps so that metadata can
// be changed without touching the stored object.
func shallowWithMeta(data map[string]any) map[string]any {
	n := make(map[string]any, len(data))
	for k, v := range data {
		n[k] = v
	}
	if m, ok := data["metadata"].(map[string]any); ok {
		mm := make(map[string]any, len(m)+2)
		for k, v := range m {
			mm[k] = v
		}
		n["metadata"] = mm
	}
	return n
}

func objectKey(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

func newUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = (b[6] & 0x0f) | 0x40
	b[8] = (b[8] & 0x3f) | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

const generateNameAlphabet = "bcdfghjklmnpqrstvwxz2456789"

func randomSuffix(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = generateNameAlphabet[int(b[i])%len(generateNameAlphabet)]
	}
	return string(b)
}

func timestamp(t time.Time) string {
	return t.UTC().Truncate(time.Second).Format(time.RFC3339)
}

// fieldValue resolves a dotted path to a scalar, as field selectors see it.
func fieldValue(data map[string]any, path string) (string, bool) {
	var cur any = data
	start := 0
	for i := 0; i <= len(path); i++ {
		if i == len(path) || path[i] == '.' {
			m, ok := cur.(map[string]any)
			if !ok {
				return "", false
			}
			cur, ok = m[path[start:i]]
			if !ok {
				return "", false
			}
			start = i + 1
		}
	}
	switch v := cur.(type) {
	case string:
		return v, true
	case bool:
		return strconv.FormatBool(v), true
	case json.Number:
		return v.String(), true
	case nil:
		return "", true
	}
	return "", false
}
