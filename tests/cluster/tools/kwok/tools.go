//go:build tools

// Package tools pins sigs.k8s.io/kwok/cmd/kwok for the local control plane.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
