// A group's device communicator (server/core/group_device.h), with a fake
// engine in place of NCCL: the members agree through a real rendezvous round
// whether all of them have an engine, rank 0's id reaches every member, and
// each joins on the group's device; one member without an engine leaves the
// group on its host transport. Then GroupWork over a group of one: tensors
// on the communicator's device run on it (queued on their stream and waited
// for), tensors elsewhere on the host transport, and a communicator that
// breaks breaks the group. NCCL itself runs only on GPUs (tests/gpu).

#include "server/core/group_device.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "gtest/gtest.h"
#include "server/core/group_work.h"
#include "tests/core/core_fixture.h"

namespace gpumux {
namespace {

// The group every test forms, of sessions opened without a tenant.
constexpr GroupRef kGroup{.tenant = "", .name = "g"};

using ::gpumux::testing::StatusIs;

// What a member's engine was asked.
struct Joined {
  DeviceIndex device;
  std::string id;
  int world_size = 0;
  int rank = 0;
};

// Runs each collective of a group of one on host memory once its stream is
// idle (the host backend's memory is host memory); counts the calls, and
// fails and breaks when told to.
class FakeCommunicator final : public GroupCommunicator {
 public:
  FakeCommunicator(DeviceBackend* backend, DeviceIndex device)
      : backend_(backend), device_(device) {}

  DeviceIndex device() const override { return device_; }
  bool broken() const override { return broken_; }
  absl::Status AllReduce(BackendStream stream, uint64_t send, uint64_t recv, uint64_t count,
                         RngDtype dtype, ReduceOp) override {
    return Copy("all_reduce", stream, send, recv, count * RngElementSize(dtype));
  }
  absl::Status Broadcast(BackendStream stream, uint64_t send, uint64_t recv, uint64_t bytes,
                         int) override {
    return Copy("broadcast", stream, send, recv, bytes);
  }
  absl::Status AllGather(BackendStream stream, uint64_t send, uint64_t recv,
                         uint64_t bytes) override {
    return Copy("all_gather", stream, send, recv, bytes);
  }
  absl::Status ReduceScatter(BackendStream stream, uint64_t send, uint64_t recv, uint64_t count,
                             RngDtype dtype, ReduceOp) override {
    return Copy("reduce_scatter", stream, send, recv, count * RngElementSize(dtype));
  }
  absl::Status Wait(BackendStream stream, absl::Duration) override {
    if (broken_) return absl::FailedPreconditionError("aborted");
    ++waits;
    return backend_->SynchronizeStream(stream);
  }

  std::vector<std::string> calls;
  int waits = 0;
  bool fail_next = false;

 private:
  absl::Status Copy(const char* what, BackendStream stream, uint64_t send, uint64_t recv,
                    uint64_t bytes) {
    if (broken_) return absl::FailedPreconditionError("aborted");
    if (fail_next) {
      broken_ = true;
      return absl::UnavailableError("the fake communicator lost its peer");
    }
    calls.push_back(what);
    GPUMUX_RETURN_IF_ERROR(backend_->SynchronizeStream(stream));
    absl::StatusOr<HostMemoryView> from = backend_->AccessOnHost(device_, send, bytes);
    absl::StatusOr<HostMemoryView> to = backend_->AccessOnHost(device_, recv, bytes);
    if (!from.ok()) return from.status();
    if (!to.ok()) return to.status();
    std::memmove(to->data, from->data, bytes);  // one rank: the result is its own part
    return absl::OkStatus();
  }

  DeviceBackend* backend_;
  DeviceIndex device_;
  bool broken_ = false;
};

class FakeEngine final : public CollectiveEngine {
 public:
  explicit FakeEngine(DeviceBackend* backend = nullptr) : backend_(backend) {}

  std::string description() const override { return "fake"; }
  uint64_t communicators_created() const override { return 0; }
  absl::Status AllReduce(absl::Span<const CollectivePart>, ReduceOp, RngDtype, uint64_t) override {
    return absl::FailedPreconditionError("not part of this test");
  }
  absl::Status Broadcast(absl::Span<const CollectivePart>, size_t, uint64_t) override {
    return absl::FailedPreconditionError("not part of this test");
  }
  absl::Status Reduce(absl::Span<const CollectivePart>, size_t, ReduceOp, RngDtype,
                      uint64_t) override {
    return absl::FailedPreconditionError("not part of this test");
  }
  absl::StatusOr<std::string> NewGroupId() override {
    ++ids_made;
    return std::string("\0fake-nccl-id\xff", 14);
  }
  absl::StatusOr<std::unique_ptr<GroupCommunicator>> JoinGroup(DeviceIndex device,
                                                               absl::string_view id, int world_size,
                                                               int rank, absl::Duration) override {
    joined.push_back(Joined{device, std::string(id), world_size, rank});
    auto comm = std::make_unique<FakeCommunicator>(backend_, device);
    last = comm.get();
    return std::unique_ptr<GroupCommunicator>(std::move(comm));
  }

  int ids_made = 0;
  std::vector<Joined> joined;
  FakeCommunicator* last = nullptr;

 private:
  DeviceBackend* backend_;
};

// A group of one's host transport: nothing to exchange; counts the calls.
class OneRankTransport final : public GroupTransport {
 public:
  explicit OneRankTransport(std::atomic<int>* calls) : calls_(calls) {}
  absl::Status AllReduce(void*, uint64_t, RngDtype, ReduceOp) override {
    ++*calls_;
    return absl::OkStatus();
  }
  absl::Status Broadcast(void*, uint64_t, int) override {
    ++*calls_;
    return absl::OkStatus();
  }
  absl::Status AllGather(const void* input, void* output, uint64_t bytes) override {
    ++*calls_;
    if (input != output) std::memmove(output, input, bytes);
    return absl::OkStatus();
  }

 private:
  std::atomic<int>* calls_;
};

// Forms a round of `world` ranks on `store` and adds device communicators;
// engines[r] null: rank r has none. Returns each rank's transport.
std::vector<std::unique_ptr<GroupTransport>> FormAll(RendezvousStore& store,
                                                     std::vector<FakeEngine*> engines,
                                                     const std::string& name) {
  const int world = static_cast<int>(engines.size());
  std::vector<std::unique_ptr<GroupTransport>> transports(world);
  std::vector<absl::Status> statuses(world);
  std::atomic<int> host_calls{0};
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      absl::StatusOr<RendezvousRound> round =
          store.Join(name, world, r, absl::StrCat("10.0.0.", r, ":1"), absl::Seconds(10));
      if (!round.ok()) {
        statuses[r] = round.status();
        return;
      }
      GroupSpec spec{.name = name,
                     .world_size = world,
                     .rank = r,
                     .timeout = absl::Seconds(10),
                     .device = DeviceIndex(1)};
      absl::StatusOr<std::unique_ptr<GroupTransport>> transport =
          AddDeviceCommunicator(std::make_unique<OneRankTransport>(&host_calls), engines[r], store,
                                spec, round->generation);
      statuses[r] = transport.status();
      if (transport.ok()) transports[r] = *std::move(transport);
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < world; ++r) EXPECT_OK(statuses[r]) << "rank " << r;
  return transports;
}

TEST(GroupDeviceTest, EveryMemberWithAnEngineJoinsWithRankZerosId) {
  RendezvousStore store;
  std::vector<FakeEngine> engines(3);
  std::vector<std::unique_ptr<GroupTransport>> transports =
      FormAll(store, {&engines[0], &engines[1], &engines[2]}, "nccl");
  ASSERT_EQ(transports.size(), 3u);
  EXPECT_EQ(engines[0].ids_made, 1);
  for (int r = 0; r < 3; ++r) {
    ASSERT_NE(transports[r], nullptr);
    EXPECT_NE(transports[r]->device_communicator(), nullptr) << "rank " << r;
    ASSERT_EQ(engines[r].joined.size(), 1u);
    const Joined& joined = engines[r].joined[0];
    EXPECT_EQ(joined.id, std::string("\0fake-nccl-id\xff", 14));  // binary, as NCCL's
    EXPECT_EQ(joined.world_size, 3);
    EXPECT_EQ(joined.rank, r);
    EXPECT_EQ(joined.device, DeviceIndex(1));
    EXPECT_EQ(engines[r].ids_made, r == 0 ? 1 : 0);
  }
}

TEST(GroupDeviceTest, OneMemberWithoutAnEngineKeepsEveryoneOnTheHostTransport) {
  RendezvousStore store;
  std::vector<FakeEngine> engines(3);
  std::vector<std::unique_ptr<GroupTransport>> transports =
      FormAll(store, {&engines[0], nullptr, &engines[2]}, "mixed");
  for (int r = 0; r < 3; ++r) {
    ASSERT_NE(transports[r], nullptr);
    EXPECT_EQ(transports[r]->device_communicator(), nullptr) << "rank " << r;
  }
  EXPECT_TRUE(engines[0].joined.empty());
  EXPECT_TRUE(engines[2].joined.empty());
  EXPECT_EQ(engines[0].ids_made, 0);
}

class GroupWorkOnDeviceTest : public testing::CoreTest {
 protected:
  void SetUp() override {
    CoreTest::SetUp();
    engine_ = std::make_unique<FakeEngine>(backend_.get());
    groups_ = std::make_unique<GroupRegistry>(
        &store_,
        GroupRegistry::Hooks{
            .connect_rendezvous =
                [](const std::string&) -> absl::StatusOr<std::unique_ptr<RendezvousPoint>> {
              return absl::FailedPreconditionError("a group of one has no remote rendezvous");
            },
            .connect_transport =
                [this](RendezvousPoint& rendezvous, const GroupSpec& spec, uint64_t generation) {
                  return AddDeviceCommunicator(std::make_unique<OneRankTransport>(&host_calls_),
                                               engine_.get(), rendezvous, spec, generation);
                },
            .probe = [](const std::string&, absl::Duration) { return false; },
            .own_address = [] { return std::string(); },
            .serves_rendezvous = false});
    work_on_groups_ =
        std::make_unique<GroupWork>(groups_.get(), backend_.get(), memory_.get(), streams_.get());
    session_ = Open("group");
    absl::StatusOr<GroupInfoView> formed =
        groups_->Form(GroupSpec{.name = "g", .world_size = 1, .rank = 0, .device = DeviceIndex(0)});
    ASSERT_OK(formed);
    EXPECT_TRUE(formed->device_communicator);
  }
  void TearDown() override {
    groups_->Close();
    CoreTest::TearDown();
  }

  // `count` random f32 on `device`.
  CommTensor Tensor(int device, int64_t count, std::string* bytes) {
    std::mt19937 rng(static_cast<uint32_t>(count));
    bytes->resize(static_cast<size_t>(4 * count));
    for (char& c : *bytes) c = static_cast<char>(1 + rng() % 200);
    const AllocationId id = Allocate(session_, DeviceIndex(device), 4 * count);
    EXPECT_OK(work_->HostToDevice(session_, id, 0, *bytes, WorkOptions{}));
    return CommTensor{id, 0, RngDtype::kF32, {count}, DeviceIndex(device)};
  }
  std::string Read(const CommTensor& tensor) {
    std::string out;
    EXPECT_OK(work_->DeviceToHost(session_, RangeUse{tensor.id, 0, 4 * uint64_t(tensor.shape[0])},
                                  WorkOptions{}, &out));
    return out;
  }

  RendezvousStore store_;
  std::unique_ptr<FakeEngine> engine_;
  std::atomic<int> host_calls_{0};
  std::unique_ptr<GroupRegistry> groups_;
  std::unique_ptr<GroupWork> work_on_groups_;
  SessionId session_;
};

TEST_F(GroupWorkOnDeviceTest, TensorsOnTheCommunicatorsDeviceRunOnItOthersOnTheHostTransport) {
  ASSERT_NE(engine_->last, nullptr);
  FakeCommunicator& comm = *engine_->last;
  std::string bytes;
  const CommTensor on_device = Tensor(0, 1000, &bytes);
  ASSERT_OK(work_on_groups_->AllReduce(session_, kGroup, on_device, ReduceOp::kSum, CommOptions{}));
  ASSERT_OK(work_on_groups_->Broadcast(session_, kGroup, on_device, 0, CommOptions{}));
  std::string out_bytes;
  const CommTensor out = Tensor(0, 1000, &out_bytes);
  ASSERT_OK(work_on_groups_->AllGather(session_, kGroup, on_device, out, CommOptions{}));
  EXPECT_EQ(Read(out), bytes);  // a group of one gathers its own part
  ASSERT_OK(work_on_groups_->ReduceScatter(session_, kGroup, on_device, out, ReduceOp::kMax,
                                           CommOptions{}));
  EXPECT_EQ(comm.calls,
            (std::vector<std::string>{"all_reduce", "broadcast", "all_gather", "reduce_scatter"}));
  EXPECT_EQ(comm.waits, 4);
  EXPECT_EQ(host_calls_.load(), 0);
  EXPECT_EQ(Read(on_device), bytes);

  // Device 1 is not the communicator's: Gloo's path, in place.
  std::string other_bytes;
  const CommTensor elsewhere = Tensor(1, 100, &other_bytes);
  ASSERT_OK(work_on_groups_->AllReduce(session_, kGroup, elsewhere, ReduceOp::kSum, CommOptions{}));
  EXPECT_EQ(host_calls_.load(), 1);
  EXPECT_EQ(comm.calls.size(), 4u);
}

TEST_F(GroupWorkOnDeviceTest, ACommunicatorThatBreaksBreaksTheGroup) {
  ASSERT_NE(engine_->last, nullptr);
  std::string bytes;
  const CommTensor tensor = Tensor(0, 64, &bytes);
  engine_->last->fail_next = true;
  EXPECT_THAT(work_on_groups_->AllReduce(session_, kGroup, tensor, ReduceOp::kSum, CommOptions{}),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(work_on_groups_->AllReduce(session_, kGroup, tensor, ReduceOp::kSum, CommOptions{}),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  const std::vector<GroupInfoView> listed = groups_->List();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_TRUE(listed[0].broken);
  // A refusal of the session's own input breaks nothing.
  absl::StatusOr<GroupInfoView> formed =
      groups_->Form(GroupSpec{.name = "g", .world_size = 1, .rank = 0, .device = DeviceIndex(0)});
  ASSERT_OK(formed);
  CommTensor too_long = tensor;
  too_long.shape = {65};
  EXPECT_THAT(work_on_groups_->AllReduce(session_, kGroup, too_long, ReduceOp::kSum, CommOptions{}),
              StatusIs(absl::StatusCode::kOutOfRange));
  ASSERT_OK(work_on_groups_->AllReduce(session_, kGroup, tensor, ReduceOp::kSum, CommOptions{}));
}

}  // namespace
}  // namespace gpumux
