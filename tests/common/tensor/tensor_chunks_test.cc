// The geometry of scatter and gather: torch.chunk's sizes, dim wrapping and
// PyTorch's messages, and slabs that, copied row by row, give exactly the
// narrowed tensor, for random shapes and dims; a scatter's chunks gathered
// back give the tensor again.

#include "common/tensor/tensor_chunks.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::StatusIs;
using ::testing::ElementsAre;

TEST(TensorChunksTest, ChunkSizesAreTorchChunks) {
  EXPECT_THAT(ChunkSizes(10, 3), ElementsAre(4, 4, 2));
  EXPECT_THAT(ChunkSizes(9, 3), ElementsAre(3, 3, 3));
  EXPECT_THAT(ChunkSizes(5, 4), ElementsAre(2, 2, 1));  // fewer chunks than asked
  EXPECT_THAT(ChunkSizes(1, 8), ElementsAre(1));
  EXPECT_THAT(ChunkSizes(0, 3), ElementsAre(0, 0, 0));
  EXPECT_THAT(ChunkSizes(7, 1), ElementsAre(7));
}

TEST(TensorChunksTest, WrapDimAsC10) {
  EXPECT_EQ(*WrapDim(-1, 3), 2);
  EXPECT_EQ(*WrapDim(-3, 3), 0);
  EXPECT_EQ(*WrapDim(2, 3), 2);
  EXPECT_EQ(*WrapDim(-1, 0), 0);  // a 0-d tensor wraps as 1-d
  EXPECT_THAT(WrapDim(3, 3).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Dimension out of range (expected to be in range of [-3, 2], but got 3)"));
  EXPECT_THAT(WrapDim(-4, 3).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Dimension out of range (expected to be in range of [-3, 2], but got -4)"));
}

TEST(TensorChunksTest, ChunkSizesAndGatherShapesAreCheckedWithPyTorchsMessages) {
  EXPECT_OK(CheckChunkSizes({2, 3}, 5));
  EXPECT_THAT(
      CheckChunkSizes({2, 2}, 5),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "given chunk sizes don't sum up to the tensor's size (sum(chunk_sizes) == 4, "
               "but expected 5)"));
  EXPECT_THAT(CheckChunkSizes({6, -1}, 5),
              StatusIs(absl::StatusCode::kInvalidArgument, "Chunk size must be positive"));
  EXPECT_THAT(CheckChunkSizes({5, 0}, 5),
              StatusIs(absl::StatusCode::kInvalidArgument, "Chunk size must be positive"));

  EXPECT_THAT(GatherShape({}, 0).status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                                    "Expected at least one tensor to gather from"));
  absl::StatusOr<Shape> gathered = GatherShape({{2, 3, 4}, {2, 5, 4}, {2, 1, 4}}, 1);
  ASSERT_OK(gathered);
  EXPECT_THAT(*gathered, ElementsAre(2, 9, 4));
  EXPECT_THAT(
      GatherShape({{2, 3, 4}, {2, 5, 5}}, 1).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "Input tensor at index 1 has invalid shape [2, 5, 5], but expected [2, 5, 4]"));
  EXPECT_THAT(GatherShape({{2, 3}, {2, 3, 1}}, 0).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Expected all input tensors to have the same number of dimensions, but "
                       "tensor at index 1has 3 dimensions, (expected 2)"));
}

// Element (i0, i1, ...) of a row-major tensor holds its own flat index.
std::vector<int32_t> Iota(const Shape& shape) {
  std::vector<int32_t> values(static_cast<size_t>(ElementCount(shape)));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int32_t>(i);
  return values;
}

// Copies the slab out, row by row.
std::vector<int32_t> CopyOut(const std::vector<int32_t>& tensor, const Slab& slab) {
  std::vector<int32_t> out(slab.rows * slab.row_bytes / sizeof(int32_t));
  const auto* bytes = reinterpret_cast<const char*>(tensor.data());
  for (uint64_t r = 0; r < slab.rows; ++r) {
    std::memcpy(reinterpret_cast<char*>(out.data()) + r * slab.row_bytes,
                bytes + slab.offset + r * slab.stride, slab.row_bytes);
  }
  return out;
}

TEST(TensorChunksTest, SlabsAreTheNarrowedTensorForRandomShapesAndDims) {
  std::mt19937_64 random(20261203);
  for (int round = 0; round < 300; ++round) {
    Shape shape(1 + random() % 4);
    for (int64_t& size : shape) size = 1 + static_cast<int64_t>(random() % 5);
    const int dim = *WrapDim(-static_cast<int64_t>(1 + random() % shape.size()), shape.size());
    const std::vector<int32_t> tensor = Iota(shape);
    const std::vector<int64_t> sizes = ChunkSizes(shape[dim], 1 + random() % 4);
    std::vector<Shape> chunk_shapes;
    std::vector<std::vector<int32_t>> chunks;
    int64_t start = 0;
    for (int64_t length : sizes) {
      const Slab slab = NarrowSlab(shape, sizeof(int32_t), dim, start, length);
      chunks.push_back(CopyOut(tensor, slab));
      Shape chunk_shape = shape;
      chunk_shape[dim] = length;
      chunk_shapes.push_back(chunk_shape);
      // Each element is the one narrow() picks: index arithmetic by hand.
      const std::vector<int32_t>& chunk = chunks.back();
      ASSERT_EQ(static_cast<int64_t>(chunk.size()), ElementCount(chunk_shape));
      for (size_t flat = 0; flat < chunk.size(); ++flat) {
        size_t rest = flat;
        int64_t source = 0;
        int64_t scale = 1;
        for (size_t d = shape.size(); d-- > 0;) {
          int64_t index = static_cast<int64_t>(rest % static_cast<size_t>(chunk_shape[d]));
          rest /= static_cast<size_t>(chunk_shape[d]);
          if (static_cast<int>(d) == dim) index += start;
          source += index * scale;
          scale *= shape[d];
        }
        ASSERT_EQ(chunk[flat], source)
            << FormatShape(shape) << " dim " << dim << " start " << start;
      }
      start += length;
    }
    // Gather: the chunks written back through the output's slabs give the tensor.
    absl::StatusOr<Shape> gathered = GatherShape(chunk_shapes, dim);
    ASSERT_OK(gathered);
    ASSERT_EQ(*gathered, shape);
    std::vector<int32_t> output(tensor.size(), -1);
    start = 0;
    for (size_t c = 0; c < chunks.size(); ++c) {
      const Slab slab = NarrowSlab(shape, sizeof(int32_t), dim, start, chunk_shapes[c][dim]);
      for (uint64_t r = 0; r < slab.rows; ++r) {
        std::memcpy(reinterpret_cast<char*>(output.data()) + slab.offset + r * slab.stride,
                    reinterpret_cast<const char*>(chunks[c].data()) + r * slab.row_bytes,
                    slab.row_bytes);
      }
      start += chunk_shapes[c][dim];
    }
    ASSERT_EQ(output, tensor) << FormatShape(shape) << " dim " << dim;
  }
}

TEST(TensorChunksTest, AZeroDimensionalTensorIsOneElement) {
  const Slab slab = NarrowSlab({}, 8, 0, 0, 1);
  EXPECT_EQ(slab.rows, 1u);
  EXPECT_EQ(slab.row_bytes, 8u);
  EXPECT_EQ(slab.offset, 0u);
  EXPECT_EQ(ElementCount({}), 1);
  EXPECT_EQ(FormatShape({}), "[]");
}

}  // namespace
}  // namespace gpumux
