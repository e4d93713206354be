/* A C program using libgpumux_alloc.so the way PyTorch's
 * CUDAPluggableAllocator does through ctypes: dlopen() the library, dlsym()
 * each function by name, call them through pointers. c_abi_test.cc runs it
 * against a gpumuxd (host backend, 2 devices of 256 MiB) with
 * GPUMUX_ADDRESS set.
 *   gpumux_alloc_c_program LIBRARY full|hold|refused CODE TEXT
 * full: every function and the bad inputs, then exits with two blocks still
 *   allocated (the library frees them at exit); prints "ok" last.
 * hold: allocates 8 MiB on each device, prints "holding", and exits when a
 *   line arrives on stdin, without freeing.
 * refused: the session cannot be opened (no daemon, a bad GPUMUX_ALLOCATION):
 *   init and malloc fail with CODE and a message containing TEXT.
 * Exit status 0 when every check passed; each failed check prints "FAIL:". */

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpumux/alloc.h"

#define MiB ((size_t)1 << 20)

static int failures = 0;

#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (!(cond)) {                                         \
      printf("FAIL: line %d: %s: ", __LINE__, #cond);      \
      printf(__VA_ARGS__);                                 \
      printf(" (last error: \"%s\")\n", api.last_error()); \
      failures++;                                          \
    }                                                      \
  } while (0)

/* The functions, as ctypes would hold them; typed from the header, so the
 * header's declarations are what is checked (typeof does not link them). */
static struct {
  __typeof__(&gpumux_malloc) malloc;
  __typeof__(&gpumux_free) free;
  __typeof__(&gpumux_init) init;
  __typeof__(&gpumux_empty_cache) empty_cache;
  __typeof__(&gpumux_set_memory_fraction) set_memory_fraction;
  __typeof__(&gpumux_base_allocation) base_allocation;
  __typeof__(&gpumux_record_stream) record_stream;
  __typeof__(&gpumux_last_error) last_error;
  __typeof__(&gpumux_last_error_code) last_error_code;
  __typeof__(&gpumux_memory_stats_json) memory_stats_json;
  __typeof__(&gpumux_memory_snapshot_json) memory_snapshot_json;
  __typeof__(&gpumux_reset_peak_memory_stats) reset_peak_memory_stats;
  __typeof__(&gpumux_reset_accumulated_memory_stats) reset_accumulated_memory_stats;
  __typeof__(&gpumux_backend) backend;
} api;

static void* Symbol(void* library, const char* name) {
  void* symbol = dlsym(library, name);
  if (symbol == NULL) {
    printf("FAIL: dlsym(%s): %s\n", name, dlerror());
    exit(1);
  }
  return symbol;
}

/* dlsym's object pointer into a function pointer, as POSIX allows: copied,
 * since C has no conversion between the two. */
#define LOAD(field, name)                           \
  do {                                              \
    void* symbol = Symbol(library, #name);          \
    memcpy(&api.field, &symbol, sizeof(api.field)); \
  } while (0)

static void Load(const char* path) {
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (library == NULL) {
    printf("FAIL: dlopen(%s): %s\n", path, dlerror());
    exit(1);
  }
  LOAD(malloc, gpumux_malloc);
  LOAD(free, gpumux_free);
  LOAD(init, gpumux_init);
  LOAD(empty_cache, gpumux_empty_cache);
  LOAD(set_memory_fraction, gpumux_set_memory_fraction);
  LOAD(base_allocation, gpumux_base_allocation);
  LOAD(record_stream, gpumux_record_stream);
  LOAD(last_error, gpumux_last_error);
  LOAD(last_error_code, gpumux_last_error_code);
  LOAD(memory_stats_json, gpumux_memory_stats_json);
  LOAD(memory_snapshot_json, gpumux_memory_snapshot_json);
  LOAD(reset_peak_memory_stats, gpumux_reset_peak_memory_stats);
  LOAD(reset_accumulated_memory_stats, gpumux_reset_accumulated_memory_stats);
  LOAD(backend, gpumux_backend);
}

static int StartsWith(const char* text, const char* prefix) {
  return strncmp(text, prefix, strlen(prefix)) == 0;
}

static int Contains(const char* text, const char* part) { return strstr(text, part) != NULL; }

/* One stat out of gpumux_memory_stats_json's object; -1 when absent. */
static long long Stat(int device, const char* key) {
  char json[16384];
  int n = api.memory_stats_json(device, json, sizeof(json));
  if (n < 0 || (size_t)n >= sizeof(json)) return -1;
  char quoted[128];
  snprintf(quoted, sizeof(quoted), "\"%s\": ", key);
  const char* at = strstr(json, quoted);
  return at == NULL ? -1 : atoll(at + strlen(quoted));
}

static unsigned char Pattern(size_t block, size_t i) {
  return (unsigned char)(block * 31 + i * 7 + (i >> 12));
}

enum { kBlocks = 12 };

static void AllocateWriteReadFree(void) {
  const size_t sizes[kBlocks / 2] = {1, 512, 4096 + 3, MiB, 3 * MiB + 7, 25 * MiB};
  void* blocks[kBlocks];
  size_t block_sizes[kBlocks];
  for (size_t b = 0; b < kBlocks; ++b) {
    const int device = (int)(b % 2);
    block_sizes[b] = sizes[b / 2];
    blocks[b] = api.malloc(block_sizes[b], device, NULL);
    CHECK(blocks[b] != NULL, "malloc(%zu, %d)", block_sizes[b], device);
    CHECK(api.last_error()[0] == '\0', "malloc(%zu, %d) left an error", block_sizes[b], device);
    if (blocks[b] == NULL) return;
    unsigned char* bytes = blocks[b];
    for (size_t i = 0; i < block_sizes[b]; ++i) bytes[i] = Pattern(b, i);
  }
  /* Each block still holds its own bytes: no two overlap. */
  for (size_t b = 0; b < kBlocks; ++b) {
    const unsigned char* bytes = blocks[b];
    size_t wrong = 0;
    for (size_t i = 0; i < block_sizes[b]; ++i) wrong += bytes[i] != Pattern(b, i);
    CHECK(wrong == 0, "block %zu (%zu bytes): %zu bytes changed", b, block_sizes[b], wrong);
  }
  /* Local allocation: this process's own stats count the blocks. */
  CHECK(Stat(0, "allocation.all.current") == kBlocks / 2,
        "allocation.all.current of device 0 is %lld", Stat(0, "allocation.all.current"));
  CHECK(Stat(1, "active.all.current") == kBlocks / 2, "active.all.current of device 1 is %lld",
        Stat(1, "active.all.current"));
  /* base_allocation: the block lies in its segment, a PyTorch segment size. */
  for (size_t b = 0; b < kBlocks; ++b) {
    size_t segment_size = 0;
    char* base = api.base_allocation(blocks[b], &segment_size);
    CHECK(base != NULL, "base_allocation of block %zu", b);
    if (base == NULL) continue;
    CHECK(base <= (char*)blocks[b] && (char*)blocks[b] + block_sizes[b] <= base + segment_size,
          "block %zu [%p, +%zu) is outside its segment [%p, +%zu)", b, blocks[b], block_sizes[b],
          (void*)base, segment_size);
    CHECK(segment_size % (2 * MiB) == 0, "segment of block %zu: %zu bytes", b, segment_size);
  }
  api.record_stream(blocks[0], NULL);
  CHECK(api.last_error()[0] == '\0', "record_stream(NULL stream)");
  for (size_t b = 0; b < kBlocks; ++b) {
    api.free(blocks[b], block_sizes[b], (int)(b % 2), NULL);
    CHECK(api.last_error()[0] == '\0', "free of block %zu", b);
  }
  CHECK(Stat(0, "allocated_bytes.all.current") == 0,
        "allocated bytes of device 0 after the frees: %lld",
        Stat(0, "allocated_bytes.all.current"));
  /* Double free: the pointer is unknown now. */
  api.free(blocks[3], block_sizes[3], 1, NULL);
  CHECK(StartsWith(api.last_error(), "Trying to free a pointer not allocated here"), "double free");
  CHECK(api.last_error_code() == 5, "double free: code %d, not NOT_FOUND", api.last_error_code());
  api.empty_cache();
  CHECK(api.last_error()[0] == '\0', "empty_cache");
  CHECK(Stat(0, "reserved_bytes.all.current") == 0,
        "reserved bytes of device 0 after empty_cache: %lld",
        Stat(0, "reserved_bytes.all.current"));
  CHECK(Stat(1, "reserved_bytes.all.current") == 0,
        "reserved bytes of device 1 after empty_cache: %lld",
        Stat(1, "reserved_bytes.all.current"));
  printf("allocated, wrote, read and freed %d blocks\n", kBlocks);
}

static void BadInputs(void) {
  int local = 42;
  /* Size 0: NULL without an error, as cudaMalloc-like allocators do. */
  CHECK(api.malloc(0, 0, NULL) == NULL, "malloc(0)");
  CHECK(api.last_error()[0] == '\0', "malloc(0) set an error");
  CHECK(api.malloc(SIZE_MAX, 0, NULL) == NULL, "malloc(SIZE_MAX)");
  CHECK(api.last_error_code() == 3 && Contains(api.last_error(), "18446744073709551615"),
        "malloc(SIZE_MAX): code %d", api.last_error_code());
  printf("malloc(SIZE_MAX): %s\n", api.last_error());
  CHECK(api.malloc(SIZE_MAX - 511, 1, NULL) == NULL, "malloc(SIZE_MAX - 511)");
  CHECK(api.last_error_code() == 3, "malloc(SIZE_MAX - 511): code %d", api.last_error_code());
  CHECK(api.malloc(512, -1, NULL) == NULL, "malloc on device -1");
  CHECK(strcmp(api.last_error(),
               "gpumux_malloc: device -1 is out of range [0, 2): gpumuxd serves 2 devices") == 0,
        "device -1");
  CHECK(api.malloc(512, 2, NULL) == NULL, "malloc on device 2");
  CHECK(strcmp(api.last_error(),
               "gpumux_malloc: device 2 is out of range [0, 2): gpumuxd serves 2 devices") == 0,
        "device 2");
  CHECK(api.last_error_code() == 3, "device 2: code %d", api.last_error_code());
  /* free(NULL) is a no-op; an unknown pointer is refused with PyTorch's text. */
  api.free(NULL, 0, 0, NULL);
  CHECK(api.last_error()[0] == '\0', "free(NULL)");
  api.free(&local, sizeof(local), 0, NULL);
  CHECK(StartsWith(api.last_error(), "Trying to free a pointer not allocated here: "),
        "free of an unknown pointer");
  /* Another size or device than the allocation's frees nothing. */
  void* block = api.malloc(1000, 1, NULL);
  CHECK(block != NULL, "malloc(1000, 1)");
  api.free(block, 1000, 0, NULL);
  CHECK(api.last_error_code() == 3 &&
            Contains(api.last_error(), "was allocated on device 1, not device 0"),
        "free on the wrong device");
  api.free(block, 999, 1, NULL);
  CHECK(api.last_error_code() == 3 &&
            Contains(api.last_error(), "was allocated with size 1000, not 999"),
        "free with the wrong size");
  api.free(block, 1000, 1, NULL);
  CHECK(api.last_error()[0] == '\0', "free after the refused ones");
  /* base_allocation and record_stream of unknown pointers, NULL size. */
  size_t size = 0;
  CHECK(api.base_allocation(&local, &size) == NULL, "base_allocation of an unknown pointer");
  CHECK(api.last_error_code() == 5 && StartsWith(api.last_error(), "gpumux_base_allocation: "),
        "base_allocation of an unknown pointer");
  CHECK(api.base_allocation(&local, NULL) == NULL && api.last_error_code() == 3,
        "base_allocation with a NULL size");
  api.record_stream(&local, NULL);
  CHECK(api.last_error_code() == 5 && StartsWith(api.last_error(), "gpumux_record_stream: "),
        "record_stream of an unknown pointer");
  /* init: the caller's device count against the daemon's. */
  api.init(-1);
  CHECK(strcmp(api.last_error(), "gpumux_init: device_count -1 is negative") == 0, "init(-1)");
  api.init(3);
  CHECK(api.last_error_code() == 9 && Contains(api.last_error(), "the caller counts 3 devices"),
        "init(3)");
  api.init(1);
  CHECK(api.last_error()[0] == '\0', "init(1)");
  /* Stats: snprintf's contract, bad devices. */
  char small[8];
  int n = api.memory_stats_json(0, small, sizeof(small));
  CHECK(n > (int)sizeof(small) && strlen(small) == sizeof(small) - 1 && small[0] == '{',
        "memory_stats_json into 8 bytes returned %d, wrote \"%s\"", n, small);
  CHECK(api.memory_stats_json(0, NULL, 0) == n, "memory_stats_json(NULL, 0)");
  CHECK(api.memory_stats_json(0, NULL, 5) == -1 && api.last_error_code() == 3,
        "memory_stats_json(NULL, 5)");
  CHECK(api.memory_stats_json(7, small, sizeof(small)) == -1 &&
            StartsWith(api.last_error(), "gpumux_memory_stats_json: device 7 is out of range"),
        "memory_stats_json of device 7");
  printf("bad inputs refused\n");
}

/* PyTorch's pools are per stream: the stream argument keys them (the local
 * allocator's; the daemon's are per gpumux stream). */
static void PoolsPerStream(void) {
  const char* mode = getenv("GPUMUX_ALLOCATION");
  if (mode != NULL && strcmp(mode, "daemon") == 0) return;
  void* const stream_a = (void*)(uintptr_t)0x1000;
  void* const stream_b = (void*)(uintptr_t)0x2000;
  void* a = api.malloc(MiB, 0, stream_a);
  CHECK(a != NULL, "malloc on stream a");
  api.free(a, MiB, 0, stream_a);
  void* b = api.malloc(MiB, 0, stream_b);
  CHECK(b != NULL && b != a, "stream b took stream a's block %p", a);
  void* again = api.malloc(MiB, 0, stream_a);
  CHECK(again == a, "stream a's block %p came back as %p", a, again);
  /* Another stream used it: nothing waits at the free. */
  api.record_stream(again, stream_b);
  CHECK(api.last_error()[0] == '\0', "record_stream on stream b");
  api.free(again, MiB, 0, stream_a);
  CHECK(api.last_error()[0] == '\0', "free after record_stream");
  api.free(b, MiB, 0, stream_b);
  CHECK(api.last_error()[0] == '\0', "free on stream b");
  printf("pools per stream\n");
}

/* The statistics PyTorch's own functions report while gpumux is its allocator. */
static void StatsForPyTorch(void) {
  const char* backend = api.backend();
  CHECK(backend != NULL && strcmp(backend, "host") == 0, "backend %s", backend);
  CHECK(api.reset_peak_memory_stats(1) == 0, "reset_peak_memory_stats(1)");
  void* block = api.malloc(3 * MiB, 1, NULL);
  CHECK(block != NULL, "malloc(3 MiB, 1)");
  char snapshot[65536];
  const int n = api.memory_snapshot_json(snapshot, sizeof(snapshot));
  CHECK(n > 0 && (size_t)n < sizeof(snapshot), "memory_snapshot_json: %d", n);
  CHECK(snapshot[0] == '[' && Contains(snapshot, "\"requested_size\": 3145728") &&
            Contains(snapshot, "\"state\": \"active_allocated\""),
        "the snapshot lists the block: %.200s", snapshot);
  api.free(block, 3 * MiB, 1, NULL);
  CHECK(Stat(1, "allocated_bytes.all.peak") == 3 * MiB, "peak since the reset: %lld",
        Stat(1, "allocated_bytes.all.peak"));
  CHECK(api.reset_peak_memory_stats(1) == 0, "reset_peak_memory_stats(1) again");
  CHECK(Stat(1, "allocated_bytes.all.peak") == 0, "peak after the second reset: %lld",
        Stat(1, "allocated_bytes.all.peak"));
  CHECK(api.reset_accumulated_memory_stats(1) == 0, "reset_accumulated_memory_stats(1)");
  CHECK(Stat(1, "allocation.all.allocated") == 0, "allocations counted after the reset: %lld",
        Stat(1, "allocation.all.allocated"));
  CHECK(api.reset_peak_memory_stats(9) == -1 && api.last_error_code() == 3,
        "reset_peak_memory_stats(9)");
  printf("statistics for PyTorch\n");
}

static void MemoryFraction(void) {
  api.set_memory_fraction(1.5, 0);
  CHECK(strcmp(api.last_error(), "Invalid fraction value: 1.5. Allowed range: 0~1") == 0,
        "fraction 1.5");
  api.set_memory_fraction(0.5, 2);
  CHECK(StartsWith(api.last_error(), "gpumux_set_memory_fraction: device 2 is out of range"),
        "fraction on device 2");
  /* A quarter of 256 MiB: 64 MiB. */
  api.set_memory_fraction(0.25, 0);
  CHECK(api.last_error()[0] == '\0', "set_memory_fraction(0.25, 0)");
  CHECK(api.malloc(100 * MiB, 0, NULL) == NULL, "100 MiB over a 64 MiB fraction");
  CHECK(api.last_error_code() == 8 &&
            StartsWith(api.last_error(), "CUDA out of memory. Tried to allocate 100.00 MiB"),
        "100 MiB over the fraction: code %d", api.last_error_code());
  printf("over the fraction: %s\n", api.last_error());
  void* fits = api.malloc(40 * MiB, 0, NULL);
  CHECK(fits != NULL, "40 MiB under the fraction");
  void* other_device = api.malloc(100 * MiB, 1, NULL);
  CHECK(other_device != NULL, "100 MiB on device 1, which has no fraction");
  api.free(fits, 40 * MiB, 0, NULL);
  api.free(other_device, 100 * MiB, 1, NULL);
  api.set_memory_fraction(1.0, 0);
  CHECK(api.last_error()[0] == '\0', "set_memory_fraction(1.0, 0)");
  printf("memory fraction enforced\n");
}

/* Threads allocating and freeing at once, each checking its own bytes. */
static void* Churn(void* arg) {
  const size_t seed = (size_t)(uintptr_t)arg;
  for (size_t i = 0; i < 500; ++i) {
    const size_t size = 512 + ((seed * 7919 + i * 104729) % (3 * MiB));
    const int device = (int)((seed + i) % 2);
    unsigned char* block = api.malloc(size, device, NULL);
    if (block == NULL) {
      printf("FAIL: thread %zu: malloc(%zu, %d): %s\n", seed, size, device, api.last_error());
      return (void*)1;
    }
    memset(block, (int)(seed + 1), size);
    if (block[0] != (unsigned char)(seed + 1) || block[size - 1] != (unsigned char)(seed + 1)) {
      printf("FAIL: thread %zu: block changed under it\n", seed);
      return (void*)1;
    }
    api.free(block, size, device, NULL);
    if (api.last_error()[0] != '\0') {
      printf("FAIL: thread %zu: free: %s\n", seed, api.last_error());
      return (void*)1;
    }
  }
  return NULL;
}

static void Threads(void) {
  pthread_t threads[4];
  for (size_t t = 0; t < 4; ++t) pthread_create(&threads[t], NULL, Churn, (void*)(uintptr_t)t);
  for (size_t t = 0; t < 4; ++t) {
    void* result = NULL;
    pthread_join(threads[t], &result);
    if (result != NULL) failures++;
  }
  printf("4 threads allocated and freed 2000 blocks\n");
}

static int Hold(void) {
  void* a = api.malloc(8 * MiB, 0, NULL);
  void* b = api.malloc(8 * MiB, 1, NULL);
  CHECK(a != NULL && b != NULL, "malloc of 8 MiB on each device");
  if (a != NULL) memset(a, 1, 8 * MiB);
  if (b != NULL) memset(b, 2, 8 * MiB);
  printf("holding\n");
  fflush(stdout);
  char line[64];
  if (fgets(line, sizeof(line), stdin) == NULL) return 1;
  printf("exiting\n");
  return failures == 0 ? 0 : 1; /* the library frees both at exit */
}

/* The first call fails: the library cannot open its session. */
static int Refused(int code, const char* text) {
  api.init(1);
  CHECK(api.last_error_code() == code && Contains(api.last_error(), text), "init: code %d, not %d",
        api.last_error_code(), code);
  CHECK(api.malloc(4096, 0, NULL) == NULL && api.last_error_code() == code, "malloc: code %d",
        api.last_error_code());
  api.free(NULL, 0, 0, NULL);
  CHECK(api.last_error()[0] == '\0', "free(NULL) without a session");
  printf("%s\n", failures == 0 ? "ok" : "failed");
  return failures == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 3) {
    printf("usage: %s LIBRARY full|hold|refused CODE TEXT\n", argv[0]);
    return 2;
  }
  Load(argv[1]);
  CHECK(api.last_error()[0] == '\0' && api.last_error_code() == 0, "a fresh thread has an error");
  if (strcmp(argv[2], "hold") == 0) return Hold();
  if (strcmp(argv[2], "refused") == 0 && argc == 5) return Refused(atoi(argv[3]), argv[4]);
  if (strcmp(argv[2], "full") != 0) {
    printf("unknown mode %s\n", argv[2]);
    return 2;
  }
  api.init(2);
  CHECK(api.last_error()[0] == '\0', "init(2)");
  AllocateWriteReadFree();
  BadInputs();
  PoolsPerStream();
  StatsForPyTorch();
  MemoryFraction();
  Threads();
  /* Left allocated: the library frees them at exit. */
  void* left[2] = {api.malloc(5 * MiB, 0, NULL), api.malloc(300, 1, NULL)};
  CHECK(left[0] != NULL && left[1] != NULL, "the blocks left for exit");
  printf("%s\n", failures == 0 ? "ok" : "failed");
  return failures == 0 ? 0 : 1;
}
