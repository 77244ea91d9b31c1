//go:build tools

// Package tools pins helm.sh/helm/v4/cmd/helm for the local control plane.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
