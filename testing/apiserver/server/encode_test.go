package server

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	inputs := []string{
		`{}`, `[]`, `{"a":1,"b":[true,false,null],"c":{"z":"x","a":"y"}}`,
		`{"s":"quote\" backslash\\ nl\n tab\t cr\r ctl\u0001 html<>& uni é 漢 \u2028 \u2029"}`,
		`{"n":12345678901234567890,"f":1.5e300,"neg":-0.25}`,
		`{"metadata":{"labels":{"k8s.io/x":"y"},"name":"n"},"data":{"k":""}}`,
	}
	for _, in := range inputs {
		v, err := decodeJSON([]byte(in))
		if err != nil {
			if !bytes.HasPrefix([]byte(in), []byte("[")) {
				t.Fatalf("decode %s: %v", in, err)
			}
			continue
		}
		want, _ := json.Marshal(v)
		got, err := appendJSON(nil, v)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("appendJSON(%s)\n got %s\nwant %s (err %v)", in, got, want, err)
		}
	}
	bad := map[string]any{"s": string([]byte{'a', 0xff, 'b'})}
	want, _ := json.Marshal(bad)
	if got, _ := appendJSON(nil, bad); !bytes.Equal(got, want) {
		t.Errorf("invalid UTF-8: got %s want %s", got, want)
	}
}

func TestAppendJSONStringEveryPosition(t *testing.T) {
	specials := []string{`"`, `\`, "<", ">", "&", "\n", "\x01", "\x1f", "é", "\u2028", string([]byte{0xc3})}
	for n := 0; n < 24; n++ {
		for i := 0; i < n; i++ {
			for _, sp := range specials {
				s := ""
				for j := 0; j < n; j++ {
					if j == i {
						s += sp
					} else {
						s += string(rune('a' + j%26))
					}
				}
				want, _ := json.Marshal(s)
				if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
					t.Fatalf("%q: got %s want %s", s, got, want)
				}
			}
		}
	}
}
