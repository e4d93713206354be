#pragma once

/* libgpumux_alloc: gpumux allocations behind a C ABI in the shape PyTorch's
 * CUDAPluggableAllocator loads (torch.cuda.memory.CUDAPluggableAllocator(
 * "libgpumux_alloc.so", "gpumux_malloc", "gpumux_free") and the optional
 * hooks of torch._C._CUDAPluggableAllocator). C-compatible: no C++ type
 * appears; a cudaStream_t travels as void* (cudaStream_t is a pointer), so
 * this header compiles without the CUDA headers.
 *
 * One process-wide gpumux session serves every call. It is opened on first
 * use (any function below; thread-safe) at $GPUMUX_ADDRESS, or the daemon's
 * default socket, in local allocation mode (the process runs PyTorch's
 * caching allocator over segments it leases from gpumuxd) unless
 * GPUMUX_ALLOCATION=daemon. A failed connection is retried on the next call.
 * At process exit the library frees what is still allocated and ends the
 * session; pointers freed after that are ignored.
 *
 * Errors: a function that fails returns NULL (or -1) and sets the calling
 * thread's last error (gpumux_last_error). Every function but the two
 * last-error accessors clears it on entry, so after a call it is "" exactly
 * when the call succeeded. Thread-safe: any thread may call any function. */

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define GPUMUX_ALLOC_API __attribute__((visibility("default")))
#else
#define GPUMUX_ALLOC_API
#endif

/* PyTorch's alloc: `size` bytes on `device` for work on `stream` (a
 * cudaStream_t; NULL: the default stream), from that stream's pool, as
 * PyTorch's allocator keeps one per stream: a block freed on its stream is
 * reused there at once, before the GPU ran the work that used it, since
 * that stream runs its work in order. Returns the memory, as
 * this process sees it: a device pointer on the CUDA backend, a host mapping
 * on the host backend. Size 0 returns NULL and is no error (as cudaMalloc-like
 * allocators do). NULL and the last error: device out of range
 * (INVALID_ARGUMENT), a size above the device's memory (INVALID_ARGUMENT),
 * out of memory or over the memory fraction (RESOURCE_EXHAUSTED, with
 * PyTorch's "CUDA out of memory. Tried to allocate ..." text), no daemon
 * (UNAVAILABLE), or the process exiting (FAILED_PRECONDITION). */
GPUMUX_ALLOC_API void* gpumux_malloc(size_t size, int device, void* stream);

/* PyTorch's free, with the size, device and stream given to gpumux_malloc.
 * Nothing waits: the block goes back to its stream's pool at once, and is
 * handed out on another stream, or returned to gpumuxd, only after the work
 * queued by now on its stream and on every stream gpumux_record_stream (or
 * a `stream` other than the allocation's here) named completed. NULL is a
 * no-op.
 * A pointer gpumux_malloc did not return, or one freed already, is left
 * alone with the last error "Trying to free a pointer not allocated here:
 * ..." (PyTorch's text; NOT_FOUND). A size or device other than the
 * allocation's is INVALID_ARGUMENT and frees nothing. After the process began
 * to exit (the library freed everything) any pointer is ignored. */
GPUMUX_ALLOC_API void gpumux_free(void* ptr, size_t size, int device, void* stream);

/* set_init_fn: connects now (what first use would do) and learns the
 * daemon's device count. `device_count` is the caller's (PyTorch's) count:
 * negative is INVALID_ARGUMENT; more devices than gpumuxd serves is
 * FAILED_PRECONDITION naming both counts (the session stays usable for the
 * devices it has). */
GPUMUX_ALLOC_API void gpumux_init(int device_count);

/* set_reset_fn (torch.cuda.empty_cache): releases this process's cached,
 * unused memory on every device back to gpumuxd. */
GPUMUX_ALLOC_API void gpumux_empty_cache(void);

/* set_memory_fraction_fn (torch.cuda.set_per_process_memory_fraction): caps
 * this process's reserved memory on `device` at fraction x its total memory;
 * a later gpumux_malloc over it fails RESOURCE_EXHAUSTED. INVALID_ARGUMENT
 * "Invalid fraction value: <f>. Allowed range: 0~1" (PyTorch's) or for a
 * device out of range. */
GPUMUX_ALLOC_API void gpumux_set_memory_fraction(double fraction, int device);

/* set_base_alloc_fn: the base of the segment the block at `ptr` (a pointer
 * gpumux_malloc returned) was carved from, with the segment's size in *size.
 * One round trip to gpumuxd (its snapshot of the device). NULL and the last
 * error for an unknown pointer (NOT_FOUND) or a NULL `size`
 * (INVALID_ARGUMENT). */
GPUMUX_ALLOC_API void* gpumux_base_allocation(void* ptr, size_t* size);

/* set_record_stream_fn (tensor.record_stream): the block at `ptr` is used by
 * work on the CUDA stream `stream`, so its reuse after the free waits for
 * the work queued there by the time of the free: the free records an event
 * on `stream` and returns (PyTorch's insert_events), it does not wait.
 * NOT_FOUND for an unknown pointer. */
GPUMUX_ALLOC_API void gpumux_record_stream(void* ptr, void* stream);

/* The calling thread's last error: "" when the last call succeeded. The text
 * stays valid until the thread's next gpumux_* call. */
GPUMUX_ALLOC_API const char* gpumux_last_error(void);

/* The last error's code, Abseil's (and gRPC's) numbering: 0 OK, 3
 * INVALID_ARGUMENT, 5 NOT_FOUND, 8 RESOURCE_EXHAUSTED, 9
 * FAILED_PRECONDITION, 14 UNAVAILABLE, ... */
GPUMUX_ALLOC_API int gpumux_last_error_code(void);

/* torch.cuda.memory_stats(device) of this process as a JSON object of
 * PyTorch's 122 keys, written into `buf` as snprintf does: at most len - 1
 * characters and a NUL (nothing when len is 0; buf may then be NULL).
 * Returns the JSON's full length without the NUL, so a result >= len means
 * it was cut short; -1 and the last error when the stats cannot be had (a
 * device out of range is INVALID_ARGUMENT). */
GPUMUX_ALLOC_API int gpumux_memory_stats_json(int device, char* buf, size_t len);

/* torch.cuda.memory_snapshot() of this process's session: a JSON array of
 * its segments on every device, with PyTorch's keys (and gpumux's:
 * session_id, segment_id, shareable, leased), written into `buf` as
 * gpumux_memory_stats_json writes. */
GPUMUX_ALLOC_API int gpumux_memory_snapshot_json(char* buf, size_t len);

/* torch.cuda.reset_peak_memory_stats(device) and
 * reset_accumulated_memory_stats(device) of this process's session: 0, or
 * -1 and the last error (a device out of range is INVALID_ARGUMENT). */
GPUMUX_ALLOC_API int gpumux_reset_peak_memory_stats(int device);
GPUMUX_ALLOC_API int gpumux_reset_accumulated_memory_stats(int device);

/* The daemon's backend, "cuda" or "host" (whose memory is host memory,
 * which no CUDA kernel can use): connects first if need be. NULL and the
 * last error when no daemon answers. The text lives as long as the
 * process. */
GPUMUX_ALLOC_API const char* gpumux_backend(void);

#ifdef __cplusplus
}
#endif
