# Sourced by scripts/sanitize.sh and scripts/fuzz.sh: the one sanitizer
# build both use. Sets sanitize_build (the folder) and defines
# configure_sanitize_build.
#
# clang: its UBSan runs inside the ASan runtime, so UBSan's reports go to
# log_path too (gcc's separate libubsan writes them to stderr only), and
# libFuzzer is clang's. Debian's gRPC, protobuf and Abseil are gcc-built
# shared libraries, which clang-built code links as they are. -O1 and line
# tables: what AddressSanitizer recommends for its stacks, and a third
# quicker to build than RelWithDebInfo's -O2 -g. No benchmarks: they measure
# speed, which the sanitizers change.
sanitize_build=$(realpath -m "${GPUMUX_SANITIZE_BUILD_DIR:-build-sanitize}")

configure_sanitize_build() {
  cmake -S . -B "$sanitize_build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_CXX_FLAGS=-Wno-unknown-warning-option \
    -DGPUMUX_SANITIZE=address,undefined -DGPUMUX_FUZZ=ON -DGPUMUX_WITH_CUDA=OFF \
    -DGPUMUX_WERROR=ON -DGPUMUX_BUILD_BENCH=OFF "$@" >/dev/null
}
