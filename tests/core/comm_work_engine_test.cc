// CommWork over a backend with a CollectiveEngine (NCCL's seam): which
// torch.cuda.comm calls go to the engine, as PyTorch sends them to NCCL
// (broadcast, broadcast_coalesced, reduce_add, reduce_add_coalesced and
// all_reduce over distinct devices), which stay on copies (a device named
// twice, scatter, gather), and that the parts, roots, counts and addresses
// CommWork hands the engine give the right results. The engine here is a
// plain host computation over the host backend's memory; the NCCL engine
// itself runs in the GPU tests (tests/gpu).

#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/tensor/reduce.h"
#include "gtest/gtest.h"
#include "server/backend/forwarding_backend.h"
#include "server/core/comm_work.h"
#include "tests/core/core_fixture.h"

namespace gpumux {
namespace {

using ::gpumux::testing::StatusIs;

// What a call asked of the engine.
struct EngineCall {
  std::string kind;
  std::vector<int> devices;
  size_t root = 0;
  ReduceOp op = ReduceOp::kSum;
  uint64_t count = 0;
};

// Runs each collective on the host once its parts' streams are idle.
class HostEngine final : public CollectiveEngine {
 public:
  explicit HostEngine(DeviceBackend* backend) : backend_(backend) {}

  std::string description() const override { return "host test engine"; }
  uint64_t communicators_created() const override { return 0; }

  absl::Status AllReduce(absl::Span<const CollectivePart> parts, ReduceOp op, RngDtype dtype,
                         uint64_t count) override {
    Record("all_reduce", parts, 0, op, count);
    absl::StatusOr<std::vector<char>> acc = Combine(parts, op, dtype, count);
    if (!acc.ok()) return acc.status();
    for (const CollectivePart& part : parts) {
      absl::StatusOr<char*> recv = Reach(part, part.recv, acc->size());
      if (!recv.ok()) return recv.status();
      std::memcpy(*recv, acc->data(), acc->size());
    }
    return absl::OkStatus();
  }

  absl::Status Broadcast(absl::Span<const CollectivePart> parts, size_t root,
                         uint64_t bytes) override {
    Record("broadcast", parts, root, ReduceOp::kSum, bytes);
    absl::StatusOr<char*> send = Reach(parts[root], parts[root].send, bytes);
    if (!send.ok()) return send.status();
    for (const CollectivePart& part : parts) {
      absl::StatusOr<char*> recv = Reach(part, part.recv, bytes);
      if (!recv.ok()) return recv.status();
      if (*recv != *send) std::memcpy(*recv, *send, bytes);
    }
    return absl::OkStatus();
  }

  absl::Status Reduce(absl::Span<const CollectivePart> parts, size_t root, ReduceOp op,
                      RngDtype dtype, uint64_t count) override {
    Record("reduce", parts, root, op, count);
    absl::StatusOr<std::vector<char>> acc = Combine(parts, op, dtype, count);
    if (!acc.ok()) return acc.status();
    absl::StatusOr<char*> recv = Reach(parts[root], parts[root].recv, acc->size());
    if (!recv.ok()) return recv.status();
    std::memcpy(*recv, acc->data(), acc->size());
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> NewGroupId() override {
    return absl::FailedPreconditionError("groups are not part of this test");
  }
  absl::StatusOr<std::unique_ptr<GroupCommunicator>> JoinGroup(DeviceIndex, absl::string_view, int,
                                                               int, absl::Duration) override {
    return absl::FailedPreconditionError("groups are not part of this test");
  }

  std::vector<EngineCall> calls;

 private:
  void Record(const char* kind, absl::Span<const CollectivePart> parts, size_t root, ReduceOp op,
              uint64_t count) {
    EngineCall call{kind, {}, root, op, count};
    for (const CollectivePart& part : parts) call.devices.push_back(part.device.value());
    calls.push_back(call);
  }
  // op over every part's send, in part order (kAvg divided at the end).
  absl::StatusOr<std::vector<char>> Combine(absl::Span<const CollectivePart> parts, ReduceOp op,
                                            RngDtype dtype, uint64_t count) {
    const uint64_t bytes = count * RngElementSize(dtype);
    std::vector<char> acc(bytes);
    for (size_t i = 0; i < parts.size(); ++i) {
      absl::StatusOr<char*> send = Reach(parts[i], parts[i].send, bytes);
      if (!send.ok()) return send.status();
      if (i == 0) {
        std::memcpy(acc.data(), *send, bytes);
      } else {
        Accumulate(op, dtype, acc.data(), *send, count);
      }
    }
    if (op == ReduceOp::kAvg) FinishAverage(dtype, acc.data(), count, parts.size());
    return acc;
  }
  // The part's memory once the work queued on its stream ran (NCCL's
  // kernels run in stream order; this engine runs at once).
  absl::StatusOr<char*> Reach(const CollectivePart& part, uint64_t address, uint64_t bytes) {
    absl::Status synced = backend_->SynchronizeStream(part.stream);
    if (!synced.ok()) return synced;
    absl::StatusOr<HostMemoryView> view = backend_->AccessOnHost(part.device, address, bytes);
    if (!view.ok()) return view.status();
    views_.push_back(view->keep_alive);
    return view->data;
  }

  DeviceBackend* backend_;
  std::vector<std::shared_ptr<const void>> views_;
};

class WithEngine final : public ForwardingBackend {
 public:
  explicit WithEngine(DeviceBackend* target) : ForwardingBackend(target), engine_(target) {}
  CollectiveEngine* collectives() override { return &engine_; }
  HostEngine& engine() { return engine_; }

 private:
  HostEngine engine_;
};

class CommWorkEngineTest : public testing::CoreTest {
 protected:
  void SetUp() override {
    CoreTest::SetUp();
    with_engine_ = std::make_unique<WithEngine>(backend_.get());
    comm_ = std::make_unique<CommWork>(with_engine_.get(), memory_.get(), streams_.get(),
                                       staging_.get());
    session_ = Open("comm");
  }

  std::vector<EngineCall>& calls() { return with_engine_->engine().calls; }

  // A tensor of `count` f32 values with random non-zero contents on `device`.
  CommTensor Tensor(int device, int64_t count, uint32_t seed, std::vector<float>* values) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(0.5f, 4.0f);
    values->resize(static_cast<size_t>(count));
    for (float& v : *values) v = dist(rng);
    const AllocationId id = Allocate(session_, DeviceIndex(device), 4 * count);
    EXPECT_OK(work_->HostToDevice(
        session_, id, 0,
        absl::string_view(reinterpret_cast<const char*>(values->data()), 4 * count),
        WorkOptions{}));
    return CommTensor{id, 0, RngDtype::kF32, {count}, DeviceIndex(device)};
  }

  std::vector<float> Read(const CommTensor& tensor) {
    const uint64_t bytes = 4 * tensor.shape[0];
    std::string out;
    EXPECT_OK(work_->DeviceToHost(session_, RangeUse{tensor.id, tensor.offset, bytes},
                                  WorkOptions{}, &out));
    std::vector<float> values(tensor.shape[0]);
    std::memcpy(values.data(), out.data(), std::min<size_t>(out.size(), bytes));
    return values;
  }

  static CommOptions Waited() { return CommOptions{.wait = true}; }

  std::unique_ptr<WithEngine> with_engine_;
  std::unique_ptr<CommWork> comm_;
  SessionId session_;
};

TEST_F(CommWorkEngineTest, BroadcastToOtherDevicesIsOneEngineBroadcastFromTheSource) {
  std::vector<float> values;
  const CommTensor source = Tensor(1, 1000, 1, &values);
  absl::StatusOr<CommDone> done =
      comm_->Broadcast(session_, source, std::vector<int64_t>{0, 1}, std::nullopt, Waited());
  ASSERT_OK(done);
  ASSERT_EQ(calls().size(), 1u);
  EXPECT_EQ(calls()[0].kind, "broadcast");
  EXPECT_EQ(calls()[0].devices, (std::vector<int>{1, 0}));  // the source is rank 0
  EXPECT_EQ(calls()[0].root, 0u);
  EXPECT_EQ(calls()[0].count, 4000u);
  ASSERT_EQ(done->results.size(), 2u);
  EXPECT_EQ(done->results[1].tensor.id, source.id);  // its own device: the input
  EXPECT_EQ(Read(done->results[0].tensor), values);
}

TEST_F(CommWorkEngineTest, ADeviceNamedTwiceStaysOnCopiesAsPyTorchsNcclCheckWants) {
  std::vector<float> values;
  const CommTensor source = Tensor(0, 300, 2, &values);
  absl::StatusOr<CommDone> done =
      comm_->Broadcast(session_, source, std::vector<int64_t>{1, 1}, std::nullopt, Waited());
  ASSERT_OK(done);
  EXPECT_TRUE(calls().empty());
  for (const CommResult& result : done->results) EXPECT_EQ(Read(result.tensor), values);

  // broadcast(out=...) with an output on the source's device: copies too.
  std::vector<float> ignored;
  const std::vector<CommTensor> out{Tensor(0, 300, 3, &ignored), Tensor(1, 300, 4, &ignored)};
  ASSERT_OK(comm_->Broadcast(session_, source, std::nullopt, out, Waited()));
  EXPECT_TRUE(calls().empty());
  EXPECT_EQ(Read(out[0]), values);
  EXPECT_EQ(Read(out[1]), values);
}

TEST_F(CommWorkEngineTest, BroadcastCoalescedIsOneEngineBroadcastPerTensor) {
  std::vector<float> a;
  std::vector<float> b;
  const std::vector<CommTensor> tensors{Tensor(0, 100, 5, &a), Tensor(0, 7, 6, &b)};
  absl::StatusOr<CommDone> done =
      comm_->BroadcastCoalesced(session_, tensors, std::vector<int64_t>{0, 1}, 1 << 20, Waited());
  ASSERT_OK(done);
  ASSERT_EQ(calls().size(), 2u);
  EXPECT_EQ(calls()[0].count, 400u);
  EXPECT_EQ(calls()[1].count, 28u);
  ASSERT_EQ(done->results.size(), 4u);
  EXPECT_EQ(Read(done->results[2].tensor), a);
  EXPECT_EQ(Read(done->results[3].tensor), b);
}

TEST_F(CommWorkEngineTest, ReduceAddIsOneEngineReduceIntoANewTensorOnTheDestination) {
  std::vector<float> a;
  std::vector<float> b;
  const std::vector<CommTensor> inputs{Tensor(0, 513, 7, &a), Tensor(1, 513, 8, &b)};
  absl::StatusOr<CommDone> done = comm_->ReduceAdd(session_, inputs, 1, Waited());
  ASSERT_OK(done);
  ASSERT_EQ(calls().size(), 1u);
  EXPECT_EQ(calls()[0].kind, "reduce");
  EXPECT_EQ(calls()[0].devices, (std::vector<int>{0, 1}));
  EXPECT_EQ(calls()[0].root, 1u);
  EXPECT_EQ(calls()[0].count, 513u);
  ASSERT_EQ(done->results.size(), 1u);
  EXPECT_NE(done->results[0].tensor.id, inputs[1].id);
  EXPECT_EQ(done->results[0].tensor.device, DeviceIndex(1));
  std::vector<float> sum = a;
  Accumulate(ReduceOp::kSum, RngDtype::kF32, sum.data(), b.data(), sum.size());
  EXPECT_EQ(Read(done->results[0].tensor), sum);
  EXPECT_EQ(Read(inputs[0]), a);  // the inputs stay as they were
  EXPECT_EQ(Read(inputs[1]), b);

  std::vector<float> c;
  const std::vector<std::vector<CommTensor>> lists{{Tensor(0, 513, 9, &c)}, {inputs[1]}};
  calls().clear();
  done = comm_->ReduceAddCoalesced(session_, lists, 0, 1 << 20, Waited());
  ASSERT_OK(done);
  ASSERT_EQ(calls().size(), 1u);
  EXPECT_EQ(calls()[0].root, 0u);
  ASSERT_EQ(done->results.size(), 1u);
  sum = c;
  Accumulate(ReduceOp::kSum, RngDtype::kF32, sum.data(), b.data(), sum.size());
  EXPECT_EQ(Read(done->results[0].tensor), sum);
}

TEST_F(CommWorkEngineTest, AllReduceIsOneEngineCallInPlaceOrIntoTheOutputs) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
    calls().clear();
    std::vector<float> a;
    std::vector<float> b;
    const std::vector<CommTensor> inputs{Tensor(0, 2049, 10, &a), Tensor(1, 2049, 11, &b)};
    std::vector<float> expected = a;
    Accumulate(op, RngDtype::kF32, expected.data(), b.data(), expected.size());
    if (op == ReduceOp::kAvg) FinishAverage(RngDtype::kF32, expected.data(), expected.size(), 2);
    ASSERT_OK(comm_->AllReduce(session_, inputs, std::nullopt, op, Waited()));
    ASSERT_EQ(calls().size(), 1u);
    EXPECT_EQ(calls()[0].kind, "all_reduce");
    EXPECT_EQ(calls()[0].op, op);
    EXPECT_EQ(Read(inputs[0]), expected);
    EXPECT_EQ(Read(inputs[1]), expected);
  }
  std::vector<float> a;
  std::vector<float> b;
  std::vector<float> ignored;
  const std::vector<CommTensor> inputs{Tensor(0, 10, 12, &a), Tensor(1, 10, 13, &b)};
  const std::vector<CommTensor> outputs{Tensor(0, 10, 14, &ignored), Tensor(1, 10, 15, &ignored)};
  ASSERT_OK(comm_->AllReduce(session_, inputs, outputs, ReduceOp::kSum, Waited()));
  std::vector<float> sum = a;
  Accumulate(ReduceOp::kSum, RngDtype::kF32, sum.data(), b.data(), sum.size());
  EXPECT_EQ(Read(outputs[0]), sum);
  EXPECT_EQ(Read(outputs[1]), sum);
  EXPECT_EQ(Read(inputs[0]), a);
}

TEST_F(CommWorkEngineTest, ScatterAndGatherStayOnCopiesAndArgumentErrorsComeFirst) {
  std::vector<float> values;
  const CommTensor source = Tensor(0, 10, 16, &values);
  ASSERT_OK(comm_->Scatter(session_, source, std::vector<int64_t>{0, 1}, std::nullopt, 0, {},
                           std::nullopt, Waited()));
  std::string host;
  ASSERT_OK(comm_->Gather(session_, std::vector<CommTensor>{source, source}, 0, std::nullopt,
                          std::nullopt, Waited(), &host));
  EXPECT_TRUE(calls().empty());
  // PyTorch's argument errors come before any engine call.
  EXPECT_THAT(comm_->AllReduce(session_, std::vector<CommTensor>{source, source}, std::nullopt,
                               ReduceOp::kSum, Waited()),
              StatusIs(absl::StatusCode::kInvalidArgument, "inputs must be on unique devices"));
  EXPECT_TRUE(calls().empty());
}

}  // namespace
}  // namespace gpumux
