#pragma once

// The geometry of torch.cuda.comm's scatter and gather on contiguous tensors
// (the collectives describe memory as dtype and shape, row-major): dim
// wrapping, torch.chunk's sizes, scatter's chunk_sizes and gather's shape
// checks with PyTorch's messages, and the byte slabs a chunk along any dim
// occupies, so an engine copies it with one memcpy per row.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace gpumux {

using Shape = std::vector<int64_t>;

// "[2, 3]", as PyTorch prints sizes in its messages.
std::string FormatShape(absl::Span<const int64_t> shape);

// c10's maybe_wrap_dim: `dim` in [-ndim, ndim - 1] (a 0-d tensor wraps as a
// 1-d one), or INVALID_ARGUMENT "Dimension out of range (expected to be in
// range of [-N, N-1], but got D)".
absl::StatusOr<int> WrapDim(int64_t dim, size_t ndim);

// torch.chunk(chunks, dim)'s sizes along a dimension of `size`:
// ceil(size / chunks) each, the last one smaller, and fewer than `chunks`
// pieces where the elements run out; `chunks` empty pieces for size 0.
// Precondition: chunks >= 1, size >= 0.
std::vector<int64_t> ChunkSizes(int64_t size, int64_t chunks);

// scatter's chunk_sizes against the size of the scattered dim, checked as
// torch.cuda.comm.scatter does: INVALID_ARGUMENT "given chunk sizes don't
// sum up to the tensor's size (sum(chunk_sizes) == S, but expected N)", then
// "Chunk size must be positive".
absl::Status CheckChunkSizes(absl::Span<const int64_t> chunk_sizes, int64_t size);

// gather's inputs: at least one ("Expected at least one tensor to gather
// from"), all of one rank ("Expected all input tensors to have the same
// number of dimensions, ...") and equal in every dim but `dim` ("Input tensor
// at index I has invalid shape [..], but expected [..]"), with PyTorch 2's
// words; the output's shape.
// `dim` is wrapped already.
absl::StatusOr<Shape> GatherShape(absl::Span<const Shape> inputs, int dim);

// Elements of `shape` (1 for a 0-d tensor).
int64_t ElementCount(absl::Span<const int64_t> shape);

// Where tensor.narrow(dim, start, length) of a contiguous tensor lies:
// `rows` runs of `row_bytes` bytes, `stride` bytes apart, the first at byte
// `offset`. Copied in row order, the runs are the narrowed tensor made
// contiguous. Preconditions: dim is wrapped, 0 <= start <= start + length <=
// shape[dim].
struct Slab {
  uint64_t offset = 0;
  uint64_t row_bytes = 0;
  uint64_t rows = 0;
  uint64_t stride = 0;
};
Slab NarrowSlab(absl::Span<const int64_t> shape, size_t element_size, int dim, int64_t start,
                int64_t length);

}  // namespace gpumux
