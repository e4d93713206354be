// torch.cuda.comm through the client against the real daemon (host backend,
// three emulated devices): every collective with random data for every
// dtype and sizes from one element to 64 MiB, each result compared with a
// plain computation on the host; PyTorch's argument errors with their
// messages; uneven chunks and negative dims; completion events; a session
// that dies with a collective queued.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/tensor/philox.h"
#include "gmock/gmock.h"
#include "gpumux/client.h"
#include "gpumux/comm.h"
#include "gpumux/comm_types.h"
#include "gpumux/common/reduce_op.h"
#include "gpumux/copy.h"
#include "gpumux/copy_options.h"
#include "gpumux/device_buffer.h"
#include "gpumux/memory.h"
#include "gpumux/nccl.h"
#include "gpumux/random.h"
#include "gpumux/random_options.h"
#include "gtest/gtest.h"
#include "tests/client/client_test_support.h"
#include "tests/status_matchers.h"
#include "tests/support/daemon_client_test.h"

// ASSERT_OK_AND_ASSIGN(Type x, Foo()): asserts that Foo() (an absl::StatusOr)
// is OK, then moves its value into `x`.
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  COMM_TEST_ASSIGN_IMPL_(COMM_TEST_CONCAT_(comm_test_statusor_, __LINE__), lhs, expr)
#define COMM_TEST_ASSIGN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                           \
  ASSERT_OK(statusor.status());                     \
  lhs = *std::move(statusor)
#define COMM_TEST_CONCAT_(a, b) COMM_TEST_CONCAT_INNER_(a, b)
#define COMM_TEST_CONCAT_INNER_(a, b) a##b

namespace gpumux::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr Dtype kDtypes[] = {Dtype::kFloat32, Dtype::kFloat64, Dtype::kFloat16, Dtype::kBFloat16,
                             Dtype::kInt32,   Dtype::kInt64,   Dtype::kUInt8};

std::string DtypeName(Dtype dtype) {
  switch (dtype) {
    case Dtype::kFloat32:
      return "float32";
    case Dtype::kFloat64:
      return "float64";
    case Dtype::kFloat16:
      return "float16";
    case Dtype::kBFloat16:
      return "bfloat16";
    case Dtype::kInt32:
      return "int32";
    case Dtype::kInt64:
      return "int64";
    case Dtype::kUInt8:
      return "uint8";
  }
  return "?";
}

// Element i of `bytes` as a double (exact for every dtype but wide int64).
double Load(Dtype dtype, const std::string& bytes, uint64_t i) {
  const char* p = bytes.data() + i * DtypeSize(dtype);
  switch (dtype) {
    case Dtype::kFloat32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case Dtype::kFloat64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case Dtype::kFloat16:
    case Dtype::kBFloat16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return dtype == Dtype::kFloat16 ? HalfBitsToFloat(v) : BFloat16BitsToFloat(v);
    }
    case Dtype::kInt32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case Dtype::kInt64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case Dtype::kUInt8:
      return static_cast<uint8_t>(*p);
  }
  return 0;
}

// Stores `value` as element i, rounded as the dtype's arithmetic rounds.
void Store(Dtype dtype, std::string& bytes, uint64_t i, double value) {
  char* p = bytes.data() + i * DtypeSize(dtype);
  switch (dtype) {
    case Dtype::kFloat32: {
      const float v = static_cast<float>(value);
      std::memcpy(p, &v, 4);
      return;
    }
    case Dtype::kFloat64:
      std::memcpy(p, &value, 8);
      return;
    case Dtype::kFloat16: {
      const uint16_t v = FloatToHalfBits(static_cast<float>(value));
      std::memcpy(p, &v, 2);
      return;
    }
    case Dtype::kBFloat16: {
      const uint16_t v = FloatToBFloat16Bits(static_cast<float>(value));
      std::memcpy(p, &v, 2);
      return;
    }
    case Dtype::kInt32: {
      const auto v = static_cast<int32_t>(static_cast<int64_t>(value));
      std::memcpy(p, &v, 4);
      return;
    }
    case Dtype::kInt64: {
      const auto v = static_cast<int64_t>(value);
      std::memcpy(p, &v, 8);
      return;
    }
    case Dtype::kUInt8:
      *p = static_cast<char>(static_cast<uint8_t>(static_cast<int64_t>(value)));
      return;
  }
}

// One step of `op` as PyTorch computes it for two elements of `dtype`: in
// float for the 16-bit floats, in the type itself otherwise (the values the
// tests draw keep integers far from overflow and products exact in double).
double Step(ReduceOp op, Dtype dtype, double a, double b) {
  const bool f32_compute =
      dtype == Dtype::kFloat32 || dtype == Dtype::kFloat16 || dtype == Dtype::kBFloat16;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return f32_compute ? static_cast<double>(static_cast<float>(a) + static_cast<float>(b))
                         : a + b;
    case ReduceOp::kProduct:
      return f32_compute ? static_cast<double>(static_cast<float>(a) * static_cast<float>(b))
                         : a * b;
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
  }
  return 0;
}

// op over `inputs` element by element, folding them in order and storing
// after every step, as the daemon's engine and PyTorch's fallback do.
std::string Reference(ReduceOp op, Dtype dtype, const std::vector<std::string>& inputs) {
  std::string out = inputs[0];
  const uint64_t count = out.size() / DtypeSize(dtype);
  for (size_t k = 1; k < inputs.size(); ++k) {
    for (uint64_t i = 0; i < count; ++i) {
      Store(dtype, out, i, Step(op, dtype, Load(dtype, out, i), Load(dtype, inputs[k], i)));
    }
  }
  if (op == ReduceOp::kAvg) {
    const bool integral =
        dtype == Dtype::kInt32 || dtype == Dtype::kInt64 || dtype == Dtype::kUInt8;
    for (uint64_t i = 0; i < count; ++i) {
      const double v = Load(dtype, out, i);
      const double n = static_cast<double>(inputs.size());
      Store(dtype, out, i,
            integral ? std::trunc(v / n)
                     : (dtype == Dtype::kFloat64
                            ? v / n
                            : static_cast<double>(static_cast<float>(v) / static_cast<float>(n))));
    }
  }
  return out;
}

class CommTest : public DaemonClientTest {
 protected:
  CommTest() : DaemonClientTest({.daemon = {.devices = 3, .device_memory = 512 * kMiB}}) {}

  // A tensor of `shape` on `device` filled with random values of `dtype`
  // (never all zeros): small integers, or floats in [-4, 4).
  struct Owned {
    DeviceBuffer buffer;
    TensorRef ref;
  };
  Owned Random(Dtype dtype, std::vector<int64_t> shape, int device, uint64_t seed) {
    uint64_t count = 1;
    for (int64_t s : shape) count *= static_cast<uint64_t>(s);
    const uint64_t bytes = count * DtypeSize(dtype);
    Owned owned;
    absl::StatusOr<DeviceBuffer> buffer =
        memory::Allocate(client(), std::max<uint64_t>(bytes, 1), DeviceIndex(device));
    EXPECT_OK(buffer);
    if (!buffer.ok()) return owned;
    owned.buffer = *std::move(buffer);
    EXPECT_OK(random::ManualSeed(client(), seed, DeviceIndex(device)));
    const Distribution distribution =
        dtype == Dtype::kUInt8 ? Distribution(Uniform{0, 16}) : Distribution(Uniform{-4, 4});
    EXPECT_OK(random::Generate(client(), owned.buffer, 0, dtype, count, distribution));
    owned.ref = TensorRef{&owned.buffer, 0, dtype, std::move(shape), DeviceIndex(device)};
    return owned;
  }
  Owned Empty(Dtype dtype, std::vector<int64_t> shape, int device) {
    uint64_t count = 1;
    for (int64_t s : shape) count *= static_cast<uint64_t>(s);
    Owned owned;
    absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(
        client(), std::max<uint64_t>(count * DtypeSize(dtype), 1), DeviceIndex(device));
    EXPECT_OK(buffer);
    if (!buffer.ok()) return owned;
    owned.buffer = *std::move(buffer);
    owned.ref = TensorRef{&owned.buffer, 0, dtype, std::move(shape), DeviceIndex(device)};
    return owned;
  }
  // The bytes of a tensor, read back.
  std::string Bytes(const TensorRef& tensor) {
    uint64_t count = 1;
    for (int64_t s : tensor.shape) count *= static_cast<uint64_t>(s);
    std::string bytes(count * DtypeSize(tensor.dtype), '\0');
    if (!bytes.empty()) {
      EXPECT_OK(
          copy::DeviceToHost(client(), bytes.data(), *tensor.buffer, tensor.offset, bytes.size()));
    }
    return bytes;
  }
};

std::vector<uint64_t> Counts(Dtype dtype) {
  // One element, odd counts, and 1 MiB worth of elements.
  return {1, 7, 1023, 65537, kMiB / DtypeSize(dtype)};
}

TEST_F(CommTest, BroadcastEveryDtypeAndSize) {
  for (Dtype dtype : kDtypes) {
    for (uint64_t count : Counts(dtype)) {
      SCOPED_TRACE(absl::StrCat(DtypeName(dtype), " x ", count));
      Owned input = Random(dtype, {static_cast<int64_t>(count)}, 1, count);
      const std::string expected = Bytes(input.ref);
      ASSERT_OK_AND_ASSIGN(CollectiveResult result,
                           comm::Broadcast(client(), input.ref, {0, 1, 2}));
      ASSERT_THAT(result.tensors, SizeIs(3));
      // The input itself on its own device, copies on the others.
      EXPECT_EQ(result.tensors[1].buffer(), &input.buffer);
      EXPECT_FALSE(result.tensors[1].owned.valid());
      for (int d : {0, 2}) {
        const ResultTensor& out = result.tensors[static_cast<size_t>(d)];
        ASSERT_TRUE(out.owned.valid());
        EXPECT_EQ(out.owned.device(), DeviceIndex(d));
        EXPECT_EQ(out.shape, input.ref.shape);
        EXPECT_EQ(out.dtype, dtype);
        EXPECT_TRUE(Bytes(out.ref()) == expected);
      }
    }
  }
}

TEST_F(CommTest, SixtyFourMiBThroughEveryCollective) {
  const int64_t count = static_cast<int64_t>(64 * kMiB / 4);
  Owned a = Random(Dtype::kFloat32, {count}, 0, 1);
  Owned b = Random(Dtype::kFloat32, {count}, 1, 2);
  const std::string a_bytes = Bytes(a.ref);
  const std::string b_bytes = Bytes(b.ref);
  ASSERT_OK_AND_ASSIGN(CollectiveResult broadcast, comm::Broadcast(client(), a.ref, {0, 2}));
  EXPECT_TRUE(Bytes(broadcast.tensors[1].ref()) == a_bytes);
  ASSERT_OK_AND_ASSIGN(CollectiveResult sum,
                       comm::ReduceAdd(client(), {a.ref, b.ref}, DeviceIndex(1)));
  EXPECT_TRUE(Bytes(sum.tensors[0].ref()) ==
              Reference(ReduceOp::kSum, Dtype::kFloat32, {b_bytes, a_bytes}));
  ASSERT_OK_AND_ASSIGN(CollectiveResult scattered, comm::Scatter(client(), a.ref, {1, 2}));
  ASSERT_OK_AND_ASSIGN(
      CollectiveResult gathered,
      comm::Gather(client(), {scattered.tensors[0].ref(), scattered.tensors[1].ref()}, 0,
                   DeviceIndex(0)));
  EXPECT_TRUE(Bytes(gathered.tensors[0].ref()) == a_bytes);
  ASSERT_OK(nccl::AllReduce(client(), {a.ref, b.ref}, ReduceOp::kMax));
  const std::string max = Reference(ReduceOp::kMax, Dtype::kFloat32, {a_bytes, b_bytes});
  EXPECT_TRUE(Bytes(a.ref) == max);
  EXPECT_TRUE(Bytes(b.ref) == max);
}

TEST_F(CommTest, BroadcastOutAndItsErrors) {
  Owned input = Random(Dtype::kFloat16, {3, 5}, 0, 3);
  Owned out1 = Empty(Dtype::kFloat16, {3, 5}, 1);
  Owned out0 = Empty(Dtype::kFloat16, {3, 5}, 0);
  ASSERT_OK_AND_ASSIGN(CollectiveResult result,
                       comm::BroadcastOut(client(), input.ref, {out1.ref, out0.ref}));
  ASSERT_THAT(result.tensors, SizeIs(2));
  EXPECT_EQ(result.tensors[0].buffer(), &out1.buffer);
  EXPECT_EQ(result.tensors[1].buffer(), &out0.buffer);
  EXPECT_TRUE(Bytes(out1.ref) == Bytes(input.ref));
  EXPECT_TRUE(Bytes(out0.ref) == Bytes(input.ref));

  Owned wrong = Empty(Dtype::kFloat16, {15}, 2);
  EXPECT_THAT(comm::BroadcastOut(client(), input.ref, {out1.ref, wrong.ref}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Expected all output tensors to have same shape as the source tensor [3, "
                       "5], but output tensor at index 1 has shape [15]"));
  EXPECT_THAT(comm::Broadcast(client(), input.ref, {0, -1}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Expected non-negative device index, but got -1"));
  EXPECT_THAT(comm::Broadcast(client(), input.ref, {3}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("device 3")));
}

TEST_F(CommTest, BroadcastCoalescedKeepsOrderAndDtypes) {
  Owned a = Random(Dtype::kInt64, {4}, 0, 4);
  Owned b = Random(Dtype::kBFloat16, {2, 3}, 0, 5);
  Owned c = Random(Dtype::kUInt8, {1}, 0, 6);
  ASSERT_OK_AND_ASSIGN(CollectiveResult result,
                       comm::BroadcastCoalesced(client(), {a.ref, b.ref, c.ref}, {0, 2, 1}, 8));
  ASSERT_THAT(result.tensors, SizeIs(9));
  const Owned* inputs[] = {&a, &b, &c};
  for (int d = 0; d < 3; ++d) {
    for (int i = 0; i < 3; ++i) {
      const ResultTensor& out = result.tensors[static_cast<size_t>(d * 3 + i)];
      if (d == 0) {
        EXPECT_EQ(out.buffer(), &inputs[i]->buffer);
      } else {
        EXPECT_EQ(out.owned.device(), DeviceIndex(d == 1 ? 2 : 1));
      }
      EXPECT_EQ(out.dtype, inputs[i]->ref.dtype);
      EXPECT_TRUE(Bytes(out.ref()) == Bytes(inputs[i]->ref));
    }
  }
  Owned elsewhere = Random(Dtype::kInt64, {4}, 1, 7);
  EXPECT_THAT(comm::BroadcastCoalesced(client(), {a.ref, elsewhere.ref}, {0, 1}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "All tensors must be on devices[0]: 0"));
}

TEST_F(CommTest, ReduceAddEveryDtypeInPyTorchsOrder) {
  for (Dtype dtype : kDtypes) {
    for (uint64_t count : Counts(dtype)) {
      SCOPED_TRACE(absl::StrCat(DtypeName(dtype), " x ", count));
      const int64_t n = static_cast<int64_t>(count);
      Owned x = Random(dtype, {n}, 0, 10 + count);
      Owned y = Random(dtype, {n}, 1, 20 + count);
      Owned z = Random(dtype, {n}, 2, 30 + count);
      ASSERT_OK_AND_ASSIGN(CollectiveResult result,
                           comm::ReduceAdd(client(), {x.ref, y.ref, z.ref}, DeviceIndex(1)));
      ASSERT_THAT(result.tensors, SizeIs(1));
      ASSERT_TRUE(result.tensors[0].owned.valid());
      EXPECT_EQ(result.tensors[0].owned.device(), DeviceIndex(1));
      // The input on the destination first, then the others in order.
      EXPECT_TRUE(Bytes(result.tensors[0].ref()) ==
                  Reference(ReduceOp::kSum, dtype, {Bytes(y.ref), Bytes(x.ref), Bytes(z.ref)}));
    }
  }
}

TEST_F(CommTest, ReduceAddArgumentRules) {
  Owned x = Random(Dtype::kFloat32, {2, 3}, 0, 1);
  Owned y = Random(Dtype::kFloat32, {3, 2}, 1, 2);
  EXPECT_THAT(comm::ReduceAdd(client(), {x.ref, y.ref}, DeviceIndex(0)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "input 1 has invalid size: got 3x2, but expected 2x3"));
  Owned y2 = Random(Dtype::kFloat32, {2, 3}, 1, 3);
  EXPECT_THAT(comm::ReduceAdd(client(), {x.ref, y2.ref}, DeviceIndex(2)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "reduce_add expects destination to be on the same GPU with one of the "
                       "tensors"));
  // One input is returned as it is.
  ASSERT_OK_AND_ASSIGN(CollectiveResult one, comm::ReduceAdd(client(), {x.ref}, DeviceIndex(0)));
  EXPECT_EQ(one.tensors[0].buffer(), &x.buffer);
  // The default destination is the current device.
  ASSERT_OK(client().SetDevice(DeviceIndex(1)));
  ASSERT_OK_AND_ASSIGN(CollectiveResult current, comm::ReduceAdd(client(), {x.ref, y2.ref}));
  EXPECT_EQ(current.tensors[0].owned.device(), DeviceIndex(1));
}

TEST_F(CommTest, ReduceAddCoalescedSumsColumns) {
  Owned a0 = Random(Dtype::kFloat64, {5}, 0, 1);
  Owned b0 = Random(Dtype::kInt32, {2, 2}, 0, 2);
  Owned a1 = Random(Dtype::kFloat64, {5}, 1, 3);
  Owned b1 = Random(Dtype::kInt32, {2, 2}, 1, 4);
  ASSERT_OK_AND_ASSIGN(
      CollectiveResult result,
      comm::ReduceAddCoalesced(client(), {{a0.ref, b0.ref}, {a1.ref, b1.ref}}, DeviceIndex(0)));
  ASSERT_THAT(result.tensors, SizeIs(2));
  EXPECT_TRUE(Bytes(result.tensors[0].ref()) ==
              Reference(ReduceOp::kSum, Dtype::kFloat64, {Bytes(a0.ref), Bytes(a1.ref)}));
  EXPECT_TRUE(Bytes(result.tensors[1].ref()) ==
              Reference(ReduceOp::kSum, Dtype::kInt32, {Bytes(b0.ref), Bytes(b1.ref)}));
}

// Rows [start, start + length) of dim `dim` of a row-major tensor.
std::string Narrow(const std::string& bytes, const std::vector<int64_t>& shape, size_t element,
                   int dim, int64_t start, int64_t length) {
  uint64_t outer = 1;
  for (int i = 0; i < dim; ++i) outer *= static_cast<uint64_t>(shape[static_cast<size_t>(i)]);
  uint64_t inner = element;
  for (size_t i = static_cast<size_t>(dim) + 1; i < shape.size(); ++i)
    inner *= static_cast<uint64_t>(shape[i]);
  const uint64_t row = static_cast<uint64_t>(shape[static_cast<size_t>(dim)]) * inner;
  std::string out;
  for (uint64_t r = 0; r < outer; ++r)
    out += bytes.substr(r * row + static_cast<uint64_t>(start) * inner,
                        static_cast<uint64_t>(length) * inner);
  return out;
}

TEST_F(CommTest, ScatterUnevenChunksAndNegativeDim) {
  for (Dtype dtype : kDtypes) {
    SCOPED_TRACE(DtypeName(dtype));
    Owned input = Random(dtype, {4, 7}, 0, 9);
    const std::string bytes = Bytes(input.ref);
    // torch.chunk(3) of 7 along the last dim: 3, 3, 1.
    ASSERT_OK_AND_ASSIGN(CollectiveResult result,
                         comm::Scatter(client(), input.ref, {1, 0, 2}, {}, -1));
    ASSERT_THAT(result.tensors, SizeIs(3));
    const int64_t sizes[] = {3, 3, 1};
    int64_t start = 0;
    for (int i = 0; i < 3; ++i) {
      const ResultTensor& chunk = result.tensors[static_cast<size_t>(i)];
      EXPECT_EQ(chunk.shape, (std::vector<int64_t>{4, sizes[i]}));
      EXPECT_TRUE(Bytes(chunk.ref()) ==
                  Narrow(bytes, {4, 7}, DtypeSize(dtype), 1, start, sizes[i]));
      start += sizes[i];
    }
    // Along dim 0 a chunk that stays on its device is a view of the input.
    ASSERT_OK_AND_ASSIGN(CollectiveResult rows,
                         comm::Scatter(client(), input.ref, {2, 0}, std::vector<int64_t>{1, 3}, 0));
    ASSERT_THAT(rows.tensors, SizeIs(2));
    EXPECT_EQ(rows.tensors[1].buffer(), &input.buffer);
    EXPECT_EQ(rows.tensors[1].offset, 7 * DtypeSize(dtype));
    EXPECT_TRUE(Bytes(rows.tensors[0].ref()) == Narrow(bytes, {4, 7}, DtypeSize(dtype), 0, 0, 1));
    EXPECT_TRUE(Bytes(rows.tensors[1].ref()) == Narrow(bytes, {4, 7}, DtypeSize(dtype), 0, 1, 3));
  }
}

TEST_F(CommTest, ScatterArgumentRules) {
  Owned input = Random(Dtype::kFloat32, {4, 6}, 0, 1);
  EXPECT_THAT(
      comm::Scatter(client(), input.ref, {}).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, "Expected at least one device to scatter to"));
  EXPECT_THAT(comm::Scatter(client(), input.ref, {0, 1}, std::vector<int64_t>{1, 2, 1}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Expected devices and chunk_sizes to be of same length, but got "
                       "len(devices) = 2 and len(chunk_sizes) = 3"));
  EXPECT_THAT(comm::Scatter(client(), input.ref, {0, 1}, std::vector<int64_t>{1, 2}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "given chunk sizes don't sum up to the tensor's size (sum(chunk_sizes) "
                       "== 3, but expected 4)"));
  EXPECT_THAT(comm::Scatter(client(), input.ref, {0, 1}, std::nullopt, 2).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Dimension out of range (expected to be in range of [-2, 1], but got 2)"));
  ASSERT_OK_AND_ASSIGN(Stream on1, client().CreateStream(DeviceIndex(1)));
  const std::optional<Stream> streams[] = {on1, std::nullopt};
  EXPECT_THAT(comm::Scatter(client(), input.ref, {0, 1}, std::nullopt, 0, streams).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Expected the device associated with the stream at index 0 (was 1) to "
                       "match the device supplied at that index (expected 0)"));
  // With matching streams the chunks are copied on them.
  const std::optional<Stream> matching[] = {std::nullopt, on1};
  ASSERT_OK_AND_ASSIGN(CollectiveResult result,
                       comm::Scatter(client(), input.ref, {0, 1}, std::nullopt, 1, matching));
  // Bytes reads on device 1's current stream, which the copy on `on1` does
  // not order: wait for it first, as a PyTorch program must.
  ASSERT_OK(on1.Synchronize());
  EXPECT_TRUE(Bytes(result.tensors[1].ref()) == Narrow(Bytes(input.ref), {4, 6}, 4, 1, 3, 3));

  Owned out_a = Empty(Dtype::kFloat32, {4, 2}, 1);
  Owned out_b = Empty(Dtype::kFloat32, {4, 4}, 2);
  ASSERT_OK_AND_ASSIGN(CollectiveResult out,
                       comm::ScatterOut(client(), input.ref, {out_a.ref, out_b.ref}, -1));
  EXPECT_EQ(out.tensors[0].buffer(), &out_a.buffer);
  EXPECT_TRUE(Bytes(out_b.ref) == Narrow(Bytes(input.ref), {4, 6}, 4, 1, 2, 4));
  Owned bad = Empty(Dtype::kFloat32, {3, 4}, 2);
  EXPECT_THAT(comm::ScatterOut(client(), input.ref, {out_a.ref, bad.ref}, 1).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Output tensor at index 1 has incorrect shape: [3, 4]. Expected same shape "
                       "except for scatter dim 1 as the source tensor: [4, 6]"));
  Owned short_b = Empty(Dtype::kFloat32, {4, 3}, 2);
  EXPECT_THAT(comm::ScatterOut(client(), input.ref, {out_a.ref, short_b.ref}, 1).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Total size for output tensors along scatter dim 1 does not match the "
                       "source tensor size at dim 1. Expected 6, but got total size 5"));
  EXPECT_THAT(comm::ScatterOut(client(), input.ref, {}, 1).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Expected at least one output tensor to scatter to"));
}

TEST_F(CommTest, GatherToDevicesAndTheHost) {
  for (Dtype dtype : kDtypes) {
    SCOPED_TRACE(DtypeName(dtype));
    Owned a = Random(dtype, {3, 2, 5}, 0, 1);
    Owned b = Random(dtype, {3, 4, 5}, 2, 2);
    const std::string a_bytes = Bytes(a.ref);
    const std::string b_bytes = Bytes(b.ref);
    std::string expected;
    const uint64_t e = DtypeSize(dtype);
    for (int r = 0; r < 3; ++r) {
      expected += a_bytes.substr(r * 10 * e, 10 * e);
      expected += b_bytes.substr(r * 20 * e, 20 * e);
    }
    ASSERT_OK_AND_ASSIGN(CollectiveResult result,
                         comm::Gather(client(), {a.ref, b.ref}, -2, DeviceIndex(1)));
    ASSERT_THAT(result.tensors, SizeIs(1));
    EXPECT_EQ(result.tensors[0].shape, (std::vector<int64_t>{3, 6, 5}));
    EXPECT_EQ(result.tensors[0].owned.device(), DeviceIndex(1));
    EXPECT_TRUE(Bytes(result.tensors[0].ref()) == expected);
    for (TransferPath path : {TransferPath::kInline, TransferPath::kStaging}) {
      std::string host(expected.size(), '\0');
      ASSERT_OK_AND_ASSIGN(
          CollectiveResult to_host,
          comm::GatherToHost(client(), {a.ref, b.ref}, host.data(), host.size(), 1, {}, path));
      EXPECT_TRUE(host == expected);
      ASSERT_THAT(to_host.tensors, SizeIs(1));
      EXPECT_EQ(to_host.tensors[0].shape, (std::vector<int64_t>{3, 6, 5}));
      EXPECT_EQ(to_host.tensors[0].buffer(), nullptr);
      // A host buffer of another size is refused, whichever the path.
      std::string short_host(expected.size() - 1, '\0');
      EXPECT_THAT(comm::GatherToHost(client(), {a.ref, b.ref}, short_host.data(), short_host.size(),
                                     1, {}, path),
                  StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("but the host buffer")));
    }
    Owned out = Empty(dtype, {3, 6, 5}, 0);
    ASSERT_OK_AND_ASSIGN(CollectiveResult into,
                         comm::GatherOut(client(), {a.ref, b.ref}, out.ref, 1));
    EXPECT_EQ(into.tensors[0].buffer(), &out.buffer);
    EXPECT_TRUE(Bytes(out.ref) == expected);
  }
}

TEST_F(CommTest, GatherLargerThanTheStagingBuffer) {
  const int64_t rows = static_cast<int64_t>(5 * kMiB / 4);
  Owned a = Random(Dtype::kFloat32, {rows}, 0, 1);
  Owned b = Random(Dtype::kFloat32, {rows}, 1, 2);
  std::string host(2 * 5 * kMiB, '\0');
  ASSERT_OK_AND_ASSIGN(CollectiveResult result,
                       comm::GatherToHost(client(), {a.ref, b.ref}, host.data(), host.size(), 0, {},
                                          TransferPath::kStaging));
  EXPECT_TRUE(host == Bytes(a.ref) + Bytes(b.ref));
  ASSERT_THAT(result.tensors, SizeIs(1));
  EXPECT_EQ(result.tensors[0].shape, (std::vector<int64_t>{2 * rows}));
}

TEST_F(CommTest, GatherArgumentRules) {
  Owned a = Random(Dtype::kFloat32, {2, 3}, 0, 1);
  Owned b = Random(Dtype::kFloat32, {2, 4}, 1, 2);
  EXPECT_THAT(
      comm::Gather(client(), {}, 0, DeviceIndex(0)).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, "Expected at least one tensor to gather from"));
  EXPECT_THAT(comm::Gather(client(), {a.ref, b.ref}, 0, DeviceIndex(0)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Input tensor at index 1 has invalid shape [2, 4], but expected [2, 3]"));
  Owned c = Random(Dtype::kFloat32, {2, 3, 1}, 1, 3);
  EXPECT_THAT(comm::Gather(client(), {a.ref, c.ref}, 0, DeviceIndex(0)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Expected all input tensors to have the same number of dimensions, but "
                       "tensor at index 1has 3 dimensions, (expected 2)"));
  Owned out = Empty(Dtype::kFloat32, {2, 6}, 0);
  EXPECT_THAT(comm::GatherOut(client(), {a.ref, b.ref}, out.ref, 1).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Expected out tensor to have shape [2, 7], but got [2, 6]"));
}

TEST_F(CommTest, AllReduceEveryOpAndDtype) {
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg}) {
    for (Dtype dtype : kDtypes) {
      SCOPED_TRACE(absl::StrCat("op ", static_cast<int>(op), " ", DtypeName(dtype)));
      const int64_t n = 4099;
      Owned x = Random(dtype, {n}, 2, 1);
      Owned y = Random(dtype, {n}, 0, 2);
      Owned z = Random(dtype, {n}, 1, 3);
      const std::string expected = Reference(op, dtype, {Bytes(x.ref), Bytes(y.ref), Bytes(z.ref)});
      // Into outputs, then in place.
      Owned ox = Empty(dtype, {n}, 2);
      Owned oy = Empty(dtype, {n}, 0);
      Owned oz = Empty(dtype, {n}, 1);
      ASSERT_OK(nccl::AllReduceOut(client(), {x.ref, y.ref, z.ref}, {ox.ref, oy.ref, oz.ref}, op));
      for (const Owned* out : {&ox, &oy, &oz}) EXPECT_TRUE(Bytes(out->ref) == expected);
      ASSERT_OK_AND_ASSIGN(CollectiveResult result,
                           nccl::AllReduce(client(), {x.ref, y.ref, z.ref}, op));
      EXPECT_EQ(result.tensors[2].buffer(), &z.buffer);
      for (const Owned* in : {&x, &y, &z}) EXPECT_TRUE(Bytes(in->ref) == expected);
    }
  }
}

TEST_F(CommTest, AllReduceArgumentRules) {
  Owned x = Random(Dtype::kFloat32, {8}, 0, 1);
  Owned y = Random(Dtype::kFloat32, {8}, 0, 2);
  EXPECT_THAT(nccl::AllReduce(client(), {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "input sequence can't be empty"));
  EXPECT_THAT(nccl::AllReduce(client(), {x.ref, y.ref}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "inputs must be on unique devices"));
  Owned w = Random(Dtype::kFloat32, {9}, 1, 3);
  EXPECT_THAT(nccl::AllReduce(client(), {x.ref, w.ref}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "all inputs must have the same number of elements"));
  Owned h = Random(Dtype::kFloat16, {8}, 1, 4);
  EXPECT_THAT(nccl::AllReduce(client(), {x.ref, h.ref}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "all inputs and outputs must be of the same Tensor dtype"));
  EXPECT_THAT(nccl::AllReduceOut(client(), {x.ref}, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "inputs and outputs sequences have to be of the same length, but got "
                       "input of length 1 and output of length 0"));
}

TEST_F(CommTest, MemoryOutsideAnAllocationIsOutOfRange) {
  Owned x = Random(Dtype::kFloat32, {8}, 0, 1);
  TensorRef beyond = x.ref;
  beyond.shape = {1 << 20};
  EXPECT_THAT(comm::Broadcast(client(), beyond, {1}).status(),
              StatusIs(absl::StatusCode::kOutOfRange));
  TensorRef negative = x.ref;
  negative.shape = {-1, 2};
  EXPECT_THAT(comm::Broadcast(client(), negative, {1}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Trying to create tensor with negative dimension -1: [-1, 2]"));
}

TEST_F(CommTest, RunsAfterQueuedWorkAndReportsCompletion) {
  // A gate holds device 1's current stream: the broadcast into device 1
  // waits behind it, and its completion event says so.
  Owned x = Random(Dtype::kInt32, {1000}, 0, 1);
  const std::string expected = Bytes(x.ref);
  Gate gate(client(), DeviceIndex(1));
  ASSERT_OK(gate.Hold(client().CurrentStream(DeviceIndex(1))));
  CollectiveOptions options;
  options.completion_event = true;
  ASSERT_OK_AND_ASSIGN(CollectiveResult result, comm::Broadcast(client(), x.ref, {1}, options));
  ASSERT_TRUE(result.completion.created());
  ASSERT_OK_AND_ASSIGN(bool done, result.completion.Query());
  EXPECT_FALSE(done);
  gate.Open();
  ASSERT_OK(result.completion.Synchronize());
  EXPECT_TRUE(Bytes(result.tensors[0].ref()) == expected);
}

TEST_F(CommTest, ASessionThatDiesWithACollectiveQueuedLeavesOthersAlone) {
  std::unique_ptr<Client> other = ConnectAnother();
  ASSERT_NE(other, nullptr);
  ASSERT_OK_AND_ASSIGN(DeviceBuffer theirs, memory::Allocate(*other, 4096, DeviceIndex(1)));
  ASSERT_OK(copy::Memset(*other, theirs, 0, 7, 4096));
  // The other session's gate holds the dying session's stream on device 0.
  Gate gate(*other, DeviceIndex(0));
  ASSERT_OK_AND_ASSIGN(std::string handle, gate.event().IpcHandle());
  const SessionId dying = client().session_id();
  {
    ASSERT_OK_AND_ASSIGN(Event held, client().OpenEventIpcHandle(DeviceIndex(0), handle));
    ASSERT_OK(client().CurrentStream(DeviceIndex(0)).WaitEvent(held));
    Owned x = Random(Dtype::kFloat32, {1 << 16}, 0, 1);
    ASSERT_OK_AND_ASSIGN(CollectiveResult queued, comm::Broadcast(client(), x.ref, {1, 2}));
    ASSERT_OK_AND_ASSIGN(bool done, client().CurrentStream(DeviceIndex(1)).Query());
    EXPECT_FALSE(done);  // behind the gate
  }
  DisconnectClient();  // the session ends with its collective queued
  for (int i = 0; i < 500 && daemon().Session(dying).has_value(); ++i)
    absl::SleepFor(absl::Milliseconds(10));
  EXPECT_FALSE(daemon().Session(dying).has_value());
  // The other session's memory and calls are untouched.
  std::string bytes(4096, '\0');
  ASSERT_OK(copy::DeviceToHost(*other, bytes.data(), theirs, 0, bytes.size()));
  EXPECT_EQ(bytes, std::string(4096, '\7'));
  ASSERT_OK_AND_ASSIGN(DeviceBuffer more, memory::Allocate(*other, 1024, DeviceIndex(0)));
  ASSERT_OK(copy::Memset(*other, more, 0, 9, 1024));
  TensorRef ref{&more, 0, Dtype::kUInt8, {1024}, DeviceIndex(0)};
  ASSERT_OK_AND_ASSIGN(CollectiveResult copies, comm::Broadcast(*other, ref, {1, 2}));
  std::string copied(1024, '\0');
  ASSERT_OK(copy::DeviceToHost(*other, copied.data(), *copies.tensors[1].buffer(), 0, 1024));
  EXPECT_EQ(copied, std::string(1024, '\11'));
  gate.Open();  // the dead session's work runs to its end; nothing waits for it
  ASSERT_OK(other->Synchronize(DeviceIndex(0)));
}

}  // namespace
}  // namespace gpumux::testing
