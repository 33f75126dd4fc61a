package server

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
)

// Request bodies in protobuf: client-go's typed clients send built-in
// objects (and DeleteOptions) as application/vnd.kubernetes.protobuf. The
// server decodes them into the k8s.io/api types and stores them as JSON;
// responses are always JSON, which every client accepts.

const protobufContentType = "application/vnd.kubernetes.protobuf"

var protoScheme, protoSerializer = func() (*runtime.Scheme, *protobuf.Serializer) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, coordinationv1.AddToScheme,
		authenticationv1.AddToScheme, authorizationv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return s, protobuf.NewSerializer(s, s)
}()

func isProtobuf(req *http.Request) bool {
	mt, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
	return mt == protobufContentType
}

// decodeProtobufObject decodes a built-in object and returns its JSON form.
func decodeProtobufObject(b []byte) (map[string]any, error) {
	obj, _, err := protoSerializer.Decode(b, nil, nil)
	if err != nil {
		return nil, err
	}
	j, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	m, err := decodeJSON(j)
	if err != nil {
		return nil, err
	}
	dropNulls(m)
	return m, nil
}

// dropNulls removes null members (zero-valued typed fields such as
// "creationTimestamp": null) so that stored objects look like the JSON a
// client would have sent.
func dropNulls(m map[string]any) {
	for k, v := range m {
		switch t := v.(type) {
		case nil:
			delete(m, k)
		case map[string]any:
			dropNulls(t)
		}
	}
}

func decodeProtobufDeleteOptions(b []byte) (deleteOptions, error) {
	var opts deleteOptions
	into := &metav1.DeleteOptions{}
	obj, _, err := protoSerializer.Decode(b, &schema.GroupVersionKind{Version: "v1", Kind: "DeleteOptions"}, into)
	if err != nil {
		return opts, err
	}
	do, ok := obj.(*metav1.DeleteOptions)
	if !ok {
		return opts, fmt.Errorf("not DeleteOptions: %T", obj)
	}
	if p := do.Preconditions; p != nil {
		opts.Preconditions = &deletePreconditions{ResourceVersion: p.ResourceVersion}
		if p.UID != nil {
			u := string(*p.UID)
			opts.Preconditions.UID = &u
		}
	}
	opts.DryRun = do.DryRun
	return opts, nil
}
