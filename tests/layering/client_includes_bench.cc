// Must not build: libgpumux does not depend on the benchmarks.
#include "bench/bench_flags.h"
