#!/usr/bin/env bash
# Regenerates go.mod for the Kubernetes helper module from the pinned version.
# k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with
# local paths; outside its tree each must be replaced by the matching v0.X release.
set -euo pipefail
cd "$(dirname "$0")"
K8S_VERSION=${1:?usage: gen.sh v1.X.Y}
STAGING_VERSION="v0.${K8S_VERSION#v1.}"
export GOFLAGS=-mod=mod
modfile=$(go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
{
  echo "module tessera.dev/tools/kube"
  echo
  echo "go $(awk '/^go /{print $2}' "$modfile")"
  echo
  echo "require k8s.io/kubernetes ${K8S_VERSION}"
  echo
  echo "replace ("
  grep -E '=> \./staging' "$modfile" | awk -v v="$STAGING_VERSION" '{print "\t" $1 " => " $1 " " v}' | sort -u
  echo ")"
} > go.mod
go mod tidy
