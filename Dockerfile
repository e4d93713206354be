# gpumuxd's container image: the daemon, the gpumux CLI and the client
# example on Debian 12 (README.md, "Deploy").
#
#   podman build --format docker -t gpumux/gpumuxd:0.1.0 .
#   podman build --format docker --build-arg GPUMUX_CUDA=ON \
#     --build-arg CUDA_TOOLKIT_IMAGE=localhost/cuda-toolkit:13.0 -t gpumux/gpumuxd:0.1.0-cuda .
#
# --format docker keeps the HEALTHCHECK (OCI image configs have no such
# field). Where no registry is reachable, scripts/make-base-image makes
# BASE_IMAGE from Debian's mirror. scripts/container-test builds and runs it.
#
# The default build is the host backend. GPUMUX_CUDA=ON builds the CUDA
# backend with the toolkit found at /usr/local/cuda of CUDA_TOOLKIT_IMAGE
# (nvcc and the CUDA headers and static runtime; gpumuxd links cudart
# statically, and libcuda comes from the node's driver, which the NVIDIA
# container toolkit mounts). Make that image from NVIDIA's Debian 12
# packages (https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/,
# cuda-toolkit-13-0), or from a machine's own toolkit with
# `scripts/make-base-image --cuda-toolkit`, which imports /usr/local/cuda.
#
# The build stage packs the Debian packages (CPack) and the runtime stage
# installs gpumuxd's, so the image holds what `apt-get install gpumuxd`
# holds: `--target packages -o DIR` gives the .deb files.
#
# Build volumes: a ccache folder mounted at /ccache (podman build
# --volume DIR:/ccache) makes rebuilds incremental. The tree builds in
# /src/build with CCACHE_BASEDIR=/src, the layout of a checkout's ./build,
# so a developer's own ccache (base_dir above the checkout, hash_dir off)
# serves it too.

ARG BASE_IMAGE=docker.io/library/debian:bookworm-slim
ARG CUDA_TOOLKIT_IMAGE=${BASE_IMAGE}

FROM ${CUDA_TOOLKIT_IMAGE} AS cuda-toolkit

FROM ${BASE_IMAGE} AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config ccache dpkg-dev file \
      libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc \
      libabsl-dev libspdlog-dev libfmt-dev zlib1g-dev libssl-dev libmicrohttpd-dev libgloo-dev \
      libncurses-dev \
 && rm -rf /var/lib/apt/lists/*
COPY . /src
ARG GPUMUX_CUDA=OFF
ARG JOBS=
ENV CCACHE_DIR=/ccache CCACHE_BASEDIR=/src CCACHE_NOHASHDIR=1
# The toolkit is bind-mounted, not copied: 3 GB stay out of every layer.
RUN --mount=type=bind,from=cuda-toolkit,source=/usr/local,target=/toolkit \
    set -e; \
    case "$GPUMUX_CUDA" in \
      ON) cuda="-DGPUMUX_WITH_CUDA=ON -DGPUMUX_CUDA_ROOT=/toolkit/cuda" ;; \
      OFF) cuda="-DGPUMUX_WITH_CUDA=OFF" ;; \
      *) echo "GPUMUX_CUDA must be ON or OFF, not '$GPUMUX_CUDA'" >&2; exit 2 ;; \
    esac; \
    cmake -S /src -B /src/build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr \
      -DGPUMUX_WERROR=ON -DGPUMUX_BUILD_TESTS=OFF -DGPUMUX_BUILD_BENCH=OFF $cuda \
      -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
      -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache; \
    cmake --build /src/build -j "${JOBS:-$(nproc)}"; \
    (cd /src/build && cpack -G DEB -B /packages); \
    DESTDIR=/staged cmake --install /src/build; \
    cmake -S /src/examples/client -B /src/build/example -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_PREFIX_PATH=/staged/usr -DGPUMUX_EXAMPLE_STATIC=ON -DCMAKE_CXX_COMPILER_LAUNCHER=ccache; \
    cmake --build /src/build/example; \
    strip /src/build/example/client_example; \
    ccache --show-stats | grep -E 'Hits|Misses' || true

# The Debian packages alone: podman build --target packages -o DIR .
FROM scratch AS packages
COPY --from=build /packages/*.deb /

FROM ${BASE_IMAGE} AS runtime
# A fixed uid and gid, so that hosts and pods can name them (socket
# permissions, runAsUser, supplementalGroups); the package's postinst
# keeps an existing gpumux user.
RUN groupadd --system --gid 10001 gpumux \
 && useradd --system --uid 10001 --gid gpumux --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin gpumux
RUN --mount=type=bind,from=build,source=/packages,target=/packages \
    apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends tini \
      /packages/gpumuxd_*.deb \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log \
 && install -d -o gpumux -g gpumux -m 0750 /run/gpumux
COPY --from=build /src/build/example/client_example /usr/bin/gpumux-client-example
# The socket directory: gpumux.sock, gpumux.sock.memfd (memory reaches
# clients as file descriptors over it) and gpumux.sock.admin. Clients in
# other containers mount the same volume and need uid or gid 10001.
VOLUME /run/gpumux
# 50051: the observe gRPC listener (Device, Observe, Health; --listen).
# 9408: /metrics, /healthz, /readyz (--metrics-listen).
EXPOSE 50051 9408
ENV GPUMUX_ADDRESS=unix:///run/gpumux/gpumux.sock
USER 10001:10001
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 CMD ["gpumux", "health"]
# tini is PID 1: it forwards SIGTERM to gpumuxd, whose clean shutdown ends
# every session, and reaps what it leaves.
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/bin/gpumuxd"]
CMD ["--socket=/run/gpumux/gpumux.sock", "--listen=0.0.0.0:50051", "--metrics-listen=0.0.0.0:9408"]
