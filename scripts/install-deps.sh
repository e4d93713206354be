#!/usr/bin/env bash
# Installs what gpumux needs to build and test on Debian 12 (run as root).
# CUDA and NCCL are optional: the build uses /usr/local/cuda when present.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
packages=(
  build-essential cmake ninja-build pkg-config git patchelf
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libabsl-dev libspdlog-dev libfmt-dev zlib1g-dev libssl-dev openssl
  libgtest-dev libgmock-dev
  libcpp-httplib-dev libmicrohttpd-dev libgloo-dev
  prometheus curl
  python3 python3-grpcio python3-grpc-tools
  python3-dev pybind11-dev libdlpack-dev python3-pytest python3-numpy python3-torch libtorch-dev
  clang libclang-rt-14-dev clang-format
  libncurses-dev tmux
  yamllint python3-kubernetes systemd
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
