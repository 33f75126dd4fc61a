package server

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
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
	data      map[string]any // the object without kind/apiVersion
	// full is the JSON of the object with kind and apiVersion first; full[bodyOff:]
	// is the JSON of data without its opening brace, so that "{"+full[bodyOff:]
	// is the typeless form used for items of built-in lists.
	full    []byte
	bodyOff int
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
func (r *resourceStore) finish(data map[string]any) (*object, error) {
	meta := metaOf(data)
	delete(data, "kind")
	delete(data, "apiVersion")
	body, err := json.Marshal(data)
	if err != nil {
		return nil, err
	}
	o := &object{
		namespace: str(meta, "namespace"),
		name:      str(meta, "name"),
		uid:       str(meta, "uid"),
		labels:    labelsOf(meta),
		data:      data,
	}
	o.key = objectKey(o.namespace, o.name)
	o.rv, _ = strconv.ParseUint(str(meta, "resourceVersion"), 10, 64)
	prefix := r.typePrefix
	if len(body) <= 2 { // "{}"
		o.full = append(append([]byte{}, prefix[:len(prefix)-1]...), '}')
		o.bodyOff = len(o.full) - 1
		return o, nil
	}
	full := make([]byte, 0, len(prefix)+len(body)-1)
	full = append(full, prefix...)
	o.bodyOff = len(full)
	full = append(full, body[1:]...)
	o.full = full
	return o, nil
}

// withRV returns a copy of o whose resourceVersion is rv (used for DELETED
// events, which carry the deletion's resourceVersion).
func (r *resourceStore) withRV(o *object, rv uint64) *object {
	data := shallowWithMeta(o.data)
	metaOf(data)["resourceVersion"] = strconv.FormatUint(rv, 10)
	n, err := r.finish(data)
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
