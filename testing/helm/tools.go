//go:build tools

// Package tools keeps in go.mod the module whose Go types the Prometheus Operator's CRDs are
// generated from (prometheus-operator-crds): go mod tidy keeps what a file imports.
package tools

import _ "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
