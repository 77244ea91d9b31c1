#!/usr/bin/env bash
# Installs everything Tessera's build and tests need on a fresh Debian 12 machine:
#   1. Debian packages (compilers, libraries, prometheus, python3-torch, ...);
#   2. a CUDA 13 toolkit with cuBLAS and NCCL from NVIDIA's PyPI wheels in .deps/cuda,
#      unless the machine has a CUDA toolkit already (TESSERA_CUDA=OFF skips it);
#   3. the local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
#      kube-scheduler, kubectl, kwok, helm) built from pinned Go modules into .deps/bin, with
#      the go found (GO_MIN or newer) or else a pinned Go toolchain from the module proxy.
# Idempotent: each piece is redone only when its pin changes. Downloads and builds are kept
# in a per-user cache ($TESSERA_CACHE, default ~/.cache/tessera) so a fresh clone on the
# same machine links to them instead of building again.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEPS=$ROOT/.deps
CACHE=${TESSERA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera}
# shellcheck source=versions.env
source "$ROOT/scripts/versions.env"
mkdir -p "$DEPS/bin" "$CACHE"

log() { printf '[setup %(%H:%M:%S)T] %s\n' -1 "$*"; }
die() { printf 'setup: %s\n' "$*" >&2; exit 1; }
hash_of() { cat "$@" | sha256sum | cut -c1-16; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
# unzip_into DEST ZIP...: unpacks the archives (wheels, Go's toolchain module) into DEST with
# their files' modes (Python's zipfile, since Debian's unzip may be missing, keeps none itself).
unzip_into() {
  python3 - "$@" <<'PY'
import os, sys, zipfile
dest = sys.argv[1]
for archive in sys.argv[2:]:
    with zipfile.ZipFile(archive) as z:
        for info in z.infolist():
            path = z.extract(info, dest)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                os.chmod(path, mode)
PY
}

# ---------------------------------------------------------------------------------------
# 1. Debian packages
APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config git clang clang-format libclang-rt-14-dev libomp-14-dev
  libcpprest-dev libssl-dev nlohmann-json3-dev libyaml-cpp-dev prometheus-cpp-dev libgloo-dev
  libopenblas-dev libcli11-dev libspdlog-dev libfmt-dev libgtest-dev libgmock-dev
  libbenchmark-dev prometheus python3 python3-pip python3-torch python3-numpy python3-yaml curl jq
  openssl iproute2 procps
  util-linux
)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
/usr/bin/python3 -c 'import torch' 2>/dev/null || die "python3-torch is installed but /usr/bin/python3 cannot import torch"

# ---------------------------------------------------------------------------------------
# 2. CUDA toolkit from wheels (compile-only here; a GPU is needed only to run)
system_nvcc=$(command -v nvcc || true)
[ -z "$system_nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && system_nvcc=/usr/local/cuda/bin/nvcc
if [ "${TESSERA_CUDA:-AUTO}" = OFF ]; then
  log "TESSERA_CUDA=OFF: skipping the CUDA toolkit"
elif [ -n "$system_nvcc" ]; then
  log "using the system CUDA toolkit ($system_nvcc)"
else
  key=$(echo "$CUDA_WHEELS" | sha256sum | cut -c1-16)
  prefix=$CACHE/cuda-$key
  if [ ! -f "$prefix/.complete" ]; then
    log "installing CUDA wheels into $prefix: $CUDA_WHEELS"
    mkdir -p "$CACHE/wheels"
    # shellcheck disable=SC2086
    python3 -m pip download -q --no-deps --only-binary=:all: -d "$CACHE/wheels" $CUDA_WHEELS
    rm -rf "$prefix.tmp" && mkdir -p "$prefix.tmp/unpacked"
    wheels=()
    for spec in $CUDA_WHEELS; do
      name=${spec%%==*} version=${spec#*==}
      file=$(ls "$CACHE/wheels/${name//-/_}-${version}-"*.whl | head -1)
      [ -f "$file" ] || die "wheel for $spec not found after download"
      wheels+=("$file")
    done
    unzip_into "$prefix.tmp/unpacked" "${wheels[@]}"
    # Arrange as a toolkit: nvidia/cu13 is already bin/ include/ lib/ nvvm/; add NCCL and
    # the unversioned library names CMake's CUDAToolkit looks for.
    mv "$prefix.tmp/unpacked/nvidia/cu13" "$prefix.tmp/root"
    cp -a "$prefix.tmp/unpacked/nvidia/nccl/include/." "$prefix.tmp/root/include/"
    cp -a "$prefix.tmp/unpacked/nvidia/nccl/lib/." "$prefix.tmp/root/lib/"
    chmod +x "$prefix.tmp/root/bin/"* "$prefix.tmp/root/nvvm/bin/"*
    (cd "$prefix.tmp/root/lib" && for so in lib*.so.[0-9]*; do
      base=${so%%.so.*}.so; [ -e "$base" ] || ln -s "$so" "$base"; done)
    ln -s lib "$prefix.tmp/root/lib64"
    rm -rf "$prefix" && mv "$prefix.tmp/root" "$prefix" && rm -rf "$prefix.tmp"
    "$prefix/bin/nvcc" --version | tail -2 | head -1
    touch "$prefix/.complete"
  fi
  ln -sfn "$prefix" "$DEPS/cuda"
  log "CUDA toolkit: .deps/cuda -> $prefix"
fi

# ---------------------------------------------------------------------------------------
# 3. The control plane from pinned Go modules
if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then export PATH=/usr/local/go/bin:$PATH; fi
# go_at_least GO: whether that go is GO_MIN or newer (without fetching another toolchain).
go_at_least() {
  local v
  v=$(GOTOOLCHAIN=local "$1" env GOVERSION 2>/dev/null) || return 1
  v=${v#go}
  [ "$(printf '%s\n%s\n' "$GO_MIN" "$v" | sort -V | head -1)" = "$GO_MIN" ]
}
if ! { command -v go >/dev/null && go_at_least go; }; then
  # No Go, or an older one (Debian 12's is 1.19): the pinned toolchain from the module proxy.
  [ "$(uname -m)" = x86_64 ] || die "Go $GO_MIN or newer is needed to build the local control plane (tests/cluster/tools); install it (this script fetches one only for x86_64)"
  goroot=$CACHE/go-$GO_TOOLCHAIN
  if [ ! -f "$goroot/.complete" ]; then
    module=golang.org/toolchain@v0.0.1-go$GO_TOOLCHAIN.linux-amd64
    proxy=${GOPROXY:-https://proxy.golang.org}
    proxy=${proxy%%[,|]*}
    case "$proxy" in http*) ;; *) proxy=https://proxy.golang.org ;; esac
    log "fetching Go $GO_TOOLCHAIN from $proxy"
    rm -rf "$goroot.tmp" && mkdir -p "$goroot.tmp"
    curl -fsSL --retry 3 -o "$goroot.tmp/go.zip" "$proxy/golang.org/toolchain/@v/v0.0.1-go$GO_TOOLCHAIN.linux-amd64.zip"
    echo "$GO_TOOLCHAIN_SHA256_AMD64  $goroot.tmp/go.zip" | sha256sum -c --quiet - ||
      die "the Go toolchain from $proxy does not have the sha256 pinned in scripts/versions.env"
    unzip_into "$goroot.tmp" "$goroot.tmp/go.zip"
    rm -rf "$goroot" && mv "$goroot.tmp/$module" "$goroot" && rm -rf "$goroot.tmp"
    touch "$goroot/.complete"
  fi
  export PATH=$goroot/bin:$PATH GOROOT=$goroot
  go_at_least go || die "$goroot/bin/go does not run"
fi
log "Go: $(command -v go) ($(GOTOOLCHAIN=local go env GOVERSION))"
export CGO_ENABLED=0 GOFLAGS=-mod=mod

# build_tool DIR LDFLAGS PACKAGE...: builds the packages of helper module DIR into the cache,
# keyed by its go.mod, go.sum, flags and Go version, and links the binaries into .deps/bin.
build_tool() {
  local dir=$ROOT/tests/cluster/tools/$1 ldflags=$2; shift 2
  local key out
  key=$( (cat "$dir/go.mod" "$dir/go.sum"; echo "$ldflags $*"; go version) | sha256sum | cut -c1-16)
  out=$CACHE/bin-$(basename "$dir")-$key
  if [ ! -f "$out/.complete" ]; then
    log "building $* (this takes minutes the first time)"
    rm -rf "$out" && mkdir -p "$out"
    (cd "$dir" && go build -ldflags "$ldflags" -o "$out/" "$@")
    # go names a binary after its package path; etcd's main is go.etcd.io/etcd/server/v3.
    if [ -f "$out/server" ]; then mv "$out/server" "$out/etcd"; fi
    touch "$out/.complete"
  fi
  for bin in "$out"/*; do ln -sfn "$bin" "$DEPS/bin/$(basename "$bin")"; done
}

k8s_minor=${KUBERNETES_VERSION#v1.}; k8s_minor=${k8s_minor%%.*}
k8s_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor"
  k8s_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
build_tool kube "$k8s_ldflags" k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubectl
build_tool etcd "" go.etcd.io/etcd/server/v3
build_tool kwok "-X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok
build_tool helm "-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" helm.sh/helm/v4/cmd/helm

log "done: $(du -shL "$DEPS" 2>/dev/null | cut -f1) in .deps (links into $CACHE)"
