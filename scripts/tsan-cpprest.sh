#!/usr/bin/env bash
# Builds a ThreadSanitizer-instrumented libcpprest from Debian's source of the installed
# version into build-tsan/cpprest/, where the tsan test preset's LD_LIBRARY_PATH finds it.
#
# Debian's libcpprest is not instrumented, so ThreadSanitizer cannot see the synchronisation
# inside it (its pplx tasks, its Boost.Asio threads) and cannot tell a false report there from
# a real one. With this library in place, every access inside cpprestsdk is checked too: that
# is how the redirect follower's race (docs/development.md) was found. Needs the network to
# reach deb.debian.org once; about three minutes on two cores.
#
#   scripts/tsan-cpprest.sh && ctest --preset tsan -L cluster
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

out=build-tsan/cpprest
src_version=$(dpkg-query -W -f='${source:Version}' libcpprest-dev 2>/dev/null) || {
  echo "tsan-cpprest: libcpprest-dev is not installed; run scripts/setup.sh first" >&2
  exit 2
}
upstream=${src_version%-*}  # 2.10.18-1 -> 2.10.18
if [ -f "$out/VERSION" ] && [ "$(cat "$out/VERSION")" = "$src_version" ]; then
  echo "tsan-cpprest: $out already holds cpprestsdk $src_version"
  exit 0
fi

pool=http://deb.debian.org/debian/pool/main/c/cpprest
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
curl -fsS -o "$work/dsc" "$pool/cpprest_${src_version}.dsc"
curl -fsS -o "$work/orig.tar.gz" "$pool/cpprest_${upstream}.orig.tar.gz"
want=$(awk -v f="cpprest_${upstream}.orig.tar.gz" \
  '/^Checksums-Sha256:/ {s = 1; next} /^[^ ]/ {s = 0} s && $3 == f {print $1}' "$work/dsc")
got=$(sha256sum "$work/orig.tar.gz" | cut -d' ' -f1)
if [ -z "$want" ] || [ "$want" != "$got" ]; then
  echo "tsan-cpprest: cpprest_${upstream}.orig.tar.gz: sha256 $got, the .dsc says '$want'" >&2
  exit 1
fi
tar -xzf "$work/orig.tar.gz" -C "$work"

# Debian's options (debian/rules), less Brotli (the controller does not ask for compression),
# the tests and the samples; with -fsanitize=thread and debug information.
cmake -S "$work/cpprestsdk-${upstream}" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="-fsanitize=thread" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" \
  -DBUILD_TESTS=OFF -DBUILD_SAMPLES=OFF -DCPPREST_EXCLUDE_BROTLI=ON -DWERROR=OFF >"$work/cmake.log" 2>&1
ninja -C "$work/build" cpprest >"$work/ninja.log" || {
  tail -20 "$work/ninja.log" >&2
  exit 1
}
rm -rf "$out"
mkdir -p "$out"
cp -a "$work/build/Release/Binaries/"libcpprest.so* "$out/"
echo "$src_version" >"$out/VERSION"
echo "tsan-cpprest: built cpprestsdk $src_version with ThreadSanitizer into $out"
