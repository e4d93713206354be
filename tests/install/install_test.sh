#!/usr/bin/env bash
# cmake --install into a temporary prefix, then the out-of-tree client
# example (examples/client) built three ways against what was installed:
# find_package(gpumux) with gpumux::client and with gpumux::client_static,
# and pkg-config gpumux. Each runs against the installed gpumuxd: allocate,
# write, share, import from a second process, memory summary. Then a C
# program against the installed C ABI (gpumux/alloc.h, libgpumux_alloc.so).
#   install_test.sh SOURCE_DIR BUILD_DIR [CUDA_INCLUDE_DIR]
set -euo pipefail
source_dir=$1
build_dir=$2
cuda_include=${3:-}
work=$(mktemp -d /tmp/gpumux-install-test-XXXXXX)
daemon_pid=
cleanup() {
  if [[ -n $daemon_pid ]]; then kill "$daemon_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "install_test: $*" >&2; exit 1; }

prefix=$work/prefix
cmake --install "$build_dir" --prefix "$prefix" > "$work/install.log"
for file in bin/gpumuxd bin/gpumux lib/libgpumux.a lib/libgpumux.so include/gpumux/client.h \
            include/gpumux/memory.h include/gpumux/copy.h include/gpumux/random.h include/gpumux/comm.h \
            include/gpumux/nccl.h include/gpumux/nvtx.h include/gpumux/distributed.h include/gpumux/profiler.h \
            include/gpumux/observer.h include/gpumux/common/ids.h lib/libgpumux_alloc.so include/gpumux/alloc.h \
            lib/cmake/gpumux/gpumuxConfig.cmake \
            lib/cmake/gpumux/gpumuxConfigVersion.cmake lib/pkgconfig/gpumux.pc; do
  [[ -e $prefix/$file ]] || fail "cmake --install did not install $file"
done

# The public headers, included as <gpumux/...> with the installed include
# root only: each finds its includes there, reaches no gRPC or protobuf
# header (nor the generated wire API), and all compile together. None
# carries a test hook (*ForTest) or includes the daemon's internals
# (server/, its backends).
extra=()
[[ -n $cuda_include ]] && extra=(-isystem "$cuda_include")
all_headers=$work/all_headers.cc
: > "$all_headers"
for header in "$prefix"/include/gpumux/*.h "$prefix"/include/gpumux/common/*.h; do
  name=${header#"$prefix/include/"}
  deps=$(c++ -std=c++20 -M -I"$prefix/include" "${extra[@]}" -x c++ "$header") ||
    fail "$name does not find its includes in the installed tree"
  if grep -Eq 'grpc|google/protobuf|gpumux/v1/' <<<"$deps"; then
    fail "$name reaches a gRPC or protobuf header: $(grep -Eo '[^ ]*(grpc|protobuf|gpumux/v1)[^ ]*' <<<"$deps" | head -3)"
  fi
  if grep -n 'ForTest' "$header"; then fail "$name carries a test hook"; fi
  if grep -nE '^#include .*(server/|backend)' "$header"; then fail "$name includes the daemon's internals"; fi
  echo "#include <$name>" >> "$all_headers"
done
c++ -std=c++20 -fsyntax-only -I"$prefix/include" "${extra[@]}" "$all_headers" ||
  fail "the installed headers do not compile"
# Nothing else under include/: the old layout (include/gpumux/client/) is gone.
stray=$(cd "$prefix/include" && find . -type f | grep -Ev '^\./gpumux/(common/)?[^/]+\.h$' | head -3) || true
[[ -z $stray ]] || fail "files outside include/gpumux and include/gpumux/common: $stray"

# The example, three ways.
example=$source_dir/examples/client
cmake -S "$example" -B "$work/cmake-shared" -DCMAKE_PREFIX_PATH="$prefix" > "$work/configure.log" ||
  { cat "$work/configure.log"; fail "find_package(gpumux) failed"; }
cmake --build "$work/cmake-shared" > "$work/build.log" || { cat "$work/build.log"; fail "building with gpumux::client failed"; }
cmake -S "$example" -B "$work/cmake-static" -DCMAKE_PREFIX_PATH="$prefix" -DGPUMUX_EXAMPLE_STATIC=ON \
  > "$work/configure.log" || { cat "$work/configure.log"; fail "find_package(gpumux) failed"; }
cmake --build "$work/cmake-static" > "$work/build.log" ||
  { cat "$work/build.log"; fail "building with gpumux::client_static failed"; }
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
# shellcheck disable=SC2046  # pkg-config's flags are words
c++ -std=c++20 "$example/main.cc" -o "$work/pkg-config-example" $(pkg-config --cflags --libs gpumux) \
  -Wl,-rpath,"$prefix/lib" || fail "building with pkg-config gpumux failed"
# ldd's output is read whole: `ldd | grep -q` fails under pipefail when grep
# exits at its match and ldd, still writing, dies of SIGPIPE.
shared_libs=$(ldd "$work/cmake-shared/client_example")
static_libs=$(ldd "$work/cmake-static/client_example")
grep -q "$prefix/lib/libgpumux.so" <<<"$shared_libs" ||
  fail "the gpumux::client build does not use the installed libgpumux.so"
if grep -q libgpumux <<<"$static_libs"; then
  fail "the gpumux::client_static build links libgpumux.so"
fi

# The C ABI (libgpumux_alloc.so, gpumux/alloc.h): a C program built as C
# against the installed header and library, which exports the gpumux_*
# functions only.
exported=$(nm -D --defined-only "$prefix/lib/libgpumux_alloc.so" | awk '{print $3}')
if grep -qv '^gpumux_' <<<"$exported"; then
  fail "libgpumux_alloc.so exports more than gpumux_*: $(grep -v '^gpumux_' <<<"$exported" | head -3)"
fi
cat > "$work/alloc_example.c" <<'C'
#include <gpumux/alloc.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  gpumux_init(1);
  char* p = gpumux_malloc(1 << 20, 0, NULL);
  if (p == NULL) {
    printf("gpumux_malloc failed: %s\n", gpumux_last_error());
    return 1;
  }
  strcpy(p + 4096, "hello from C");
  size_t segment = 0;
  char* base = gpumux_base_allocation(p, &segment);
  printf("c abi: %s, segment of %zu bytes at offset %ld\n", p + 4096, segment, (long)(p - base));
  gpumux_free(p, 1 << 20, 0, NULL);
  return gpumux_last_error()[0] == '\0' ? 0 : 1;
}
C
cc -std=c11 -Wall -Wextra -Wpedantic -Werror "$work/alloc_example.c" -o "$work/alloc_example" \
  -I"$prefix/include" -L"$prefix/lib" -lgpumux_alloc -Wl,-rpath,"$prefix/lib" ||
  fail "building a C program against the installed gpumux/alloc.h and libgpumux_alloc.so failed"

# The installed daemon, and each build against it.
socket=$work/gpumux.sock
"$prefix/bin/gpumuxd" --socket="$socket" --host-device-memory=256MiB > "$work/daemon.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do [[ -S $socket ]] && break; sleep 0.1; done
[[ -S $socket ]] || { cat "$work/daemon.log"; fail "the installed gpumuxd did not start"; }
for program in "$work/cmake-shared/client_example" "$work/cmake-static/client_example" \
               "$work/pkg-config-example"; do
  out=$("$program" "unix://$socket") || { echo "$out"; fail "$program failed"; }
  grep -q 'imported 1048576 bytes in session [0-9]*: "hello from gpumux"' <<<"$out" ||
    { echo "$out"; fail "$program: the second process did not read what the first wrote"; }
  grep -q 'PyTorch CUDA memory summary, device ID 0' <<<"$out" ||
    { echo "$out"; fail "$program printed no memory summary"; }
done
"$prefix/bin/gpumux" --address="unix://$socket" sessions > /dev/null || fail "the installed gpumux CLI failed"
out=$(GPUMUX_ADDRESS="unix://$socket" "$work/alloc_example") || { echo "$out"; fail "the C ABI example failed"; }
grep -q '^c abi: hello from C, segment of 2097152 bytes at offset [0-9]*$' <<<"$out" ||
  { echo "$out"; fail "the C ABI example did not read back what it wrote"; }
kill -TERM "$daemon_pid"
wait "$daemon_pid" || { cat "$work/daemon.log"; fail "gpumuxd did not stop cleanly"; }
daemon_pid=
echo "install_test: installed, built three ways and in C, and ran against the installed daemon"
