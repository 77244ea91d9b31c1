# syntax=docker/dockerfile:1
# Tessera's container images (DESIGN.md §8), from one multi-stage build:
#
#   docker build --target controller -t tessera/controller:0.1.0 .   # small, no CUDA
#   docker build --target worker     -t tessera/worker:0.1.0 .       # CUDA runtime + NCCL
#
# The build stage compiles everything once on NVIDIA's CUDA devel image (CUDA and NCCL code
# included); each runtime stage takes its binaries plus the shared libraries they link that
# its base image lacks, so no -dev package or compiler reaches a runtime image.
# Build arguments: CUDA_VERSION, CUDA_ARCHITECTURES (e.g. "90;100"), VERSION, REVISION.
# docs/operations.md describes the images.

ARG CUDA_VERSION=13.0.0
ARG UBUNTU_RELEASE=24.04

# ---- build --------------------------------------------------------------------------------
FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu${UBUNTU_RELEASE} AS build
ARG DEBIAN_FRONTEND=noninteractive
ARG CUDA_ARCHITECTURES=90
# The Debian/Ubuntu packages cmake/TesseraDependencies.cmake finds (scripts/setup.sh installs
# the same on a development machine); NCCL comes from NVIDIA's repository in the base image.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config git ca-certificates \
      libcpprest-dev libssl-dev nlohmann-json3-dev libyaml-cpp-dev prometheus-cpp-dev \
      libgloo-dev libopenblas-dev libcli11-dev libspdlog-dev libfmt-dev \
      libnccl-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Only what the build reads (tests, benchmarks and docs are not part of an image).
COPY CMakeLists.txt ./
COPY cmake cmake
COPY api api
COPY lifecycle lifecycle
COPY controller controller
COPY worker worker
COPY cli cli
RUN cmake -S /src -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_TESTS=OFF \
      -DTESSERA_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES}" \
 && cmake --build /build --target tessera tessera-controller tessera-worker
# Stage each image's files under /out/<image>: binaries in bin/, and in lib/ every shared
# library they load except glibc's own and the CUDA/NCCL libraries, which the worker's base
# image provides (the controller does not link them).
RUN set -eu; \
    stage() { image=$1; shift; \
      mkdir -p /out/$image/bin /out/$image/lib; \
      for bin in "$@"; do \
        cp /build/bin/$bin /out/$image/bin/; \
        ldd /build/bin/$bin | awk '$2 == "=>" && $3 ~ /^\// {print $3}' \
          | grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so|/lib(cuda|cudart|cublas|cublasLt|nccl)\.so' \
          | xargs -r cp -L -t /out/$image/lib/; \
      done; }; \
    stage controller tessera-controller; \
    stage worker tessera-worker tessera; \
    if ldd /out/controller/bin/tessera-controller | grep -Eq 'lib(cudart|nccl)'; then \
      echo "tessera-controller links CUDA; the controller image has none" >&2; exit 1; fi

# ---- controller ---------------------------------------------------------------------------
FROM ubuntu:${UBUNTU_RELEASE} AS controller
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="tessera-controller" \
      org.opencontainers.image.description="Tessera controller: runs TrainingJobs as gangs of worker pods" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="https://github.com/tessera-dev/tessera" \
      org.opencontainers.image.vendor="Tessera"
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 tessera \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin tessera
COPY --from=build /out/controller/lib/ /usr/local/lib/tessera/
COPY --from=build /out/controller/bin/ /usr/local/bin/
RUN echo /usr/local/lib/tessera > /etc/ld.so.conf.d/tessera.conf && ldconfig \
 && tessera-controller --version
# Numeric, so Kubernetes can verify runAsNonRoot without reading /etc/passwd.
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/tessera-controller"]

# ---- worker -------------------------------------------------------------------------------
FROM nvidia/cuda:${CUDA_VERSION}-runtime-ubuntu${UBUNTU_RELEASE} AS worker
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="tessera-worker" \
      org.opencontainers.image.description="Tessera worker: one pod of a TrainingJob (GPT trainer, NCCL and Gloo)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="https://github.com/tessera-dev/tessera" \
      org.opencontainers.image.vendor="Tessera"
# The runtime image carries cuBLAS and NCCL (libnccl2); checked here rather than assumed.
RUN for lib in 'libnccl.so.2*' 'libcublasLt.so.*' 'libcudart.so.*'; do \
      find /usr/lib /usr/local/cuda/ -name "$lib" -print -quit | grep -q . \
        || { echo "the CUDA runtime image lacks $lib" >&2; exit 1; }; \
    done \
 && groupadd --gid 65532 tessera \
 && useradd --uid 65532 --gid 65532 --create-home --home-dir /home/tessera \
      --shell /usr/sbin/nologin tessera \
 && mkdir -p /checkpoints /data && chown 65532:65532 /checkpoints
COPY --from=build /out/worker/lib/ /usr/local/lib/tessera/
COPY --from=build /out/worker/bin/ /usr/local/bin/
RUN echo /usr/local/lib/tessera > /etc/ld.so.conf.d/tessera.conf && ldconfig \
 && tessera-worker --version && tessera version
ENV TESSERA_WORKER_BINARY=/usr/local/bin/tessera-worker \
    TESSERA_CHECKPOINT_DIR=/checkpoints
USER 65532:65532
WORKDIR /home/tessera
EXPOSE 9400 29500
ENTRYPOINT ["/usr/local/bin/tessera-worker"]
