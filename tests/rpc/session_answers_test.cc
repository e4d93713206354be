// A session's answers to the daemon's questions (session.proto: lease_blocks,
// cache_released) are untrusted input, sent here over raw gRPC by a session
// that holds real leases: blocks that do not tile a lease, unknown states,
// answers to questions never asked, answers past the bounds. None of it
// changes what the snapshot says of other memory than the liar's own leases
// (each marked, with the reason), and the daemon serves on.

#include <future>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gpumux/v1/observe.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/rpc/daemon_fixture.h"

namespace gpumux::testing {
namespace {

constexpr uint64_t kLease = uint64_t{2} << 20;

class SessionAnswersTest : public DaemonTest {
 protected:
  Daemon::Options Options() override {
    Daemon::Options options = DaemonTest::Options();
    options.client_reply_timeout = absl::Milliseconds(300);
    options.snapshot_answer_reuse = absl::ZeroDuration();  // every snapshot asks
    return options;
  }

  v1::Allocation Lease(RawSession& session) {
    v1::LeaseRequest request;
    request.set_device(0);
    request.set_size(kLease);
    v1::AllocateResponse response;
    grpc::ClientContext context;
    context.AddMetadata("gpumux-session", session.credentials());
    grpc::Status status = session.memory().Lease(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.allocation();
  }

  // Device 0's snapshot from Observe, asked on another thread while `answer`
  // plays the leasing session's client on this one.
  v1::MemorySnapshot SnapshotAnswering(RawSession& session,
                                       const std::function<void(uint64_t request)>& answer) {
    auto snapshot = std::async(std::launch::async, [&] {
      auto observe = v1::Observe::NewStub(channel_);
      v1::ObserveSnapshotRequest request;
      v1::MemorySnapshot out;
      grpc::ClientContext context;
      grpc::Status status = observe->GetMemorySnapshot(&context, request, &out);
      EXPECT_TRUE(status.ok()) << status.error_message();
      return out;
    });
    v1::SessionServerMessage notice;
    while (session.ReadNotice(&notice) && !notice.has_blocks_request()) {
    }
    EXPECT_TRUE(notice.has_blocks_request());
    answer(notice.blocks_request().request_id());
    return snapshot.get();
  }

  static v1::SessionClientMessage Answer(uint64_t request, const v1::Allocation& lease,
                                         const std::vector<v1::SnapshotBlock>& blocks,
                                         bool last = true) {
    v1::SessionClientMessage message;
    v1::LeaseBlocks* answer = message.mutable_lease_blocks();
    answer->set_request_id(request);
    answer->set_last(last);
    v1::SnapshotSegment* segment = answer->add_segments();
    segment->set_device(0);
    segment->set_address(lease.address());
    for (const v1::SnapshotBlock& block : blocks) *segment->add_blocks() = block;
    return message;
  }

  static v1::SnapshotBlock Block(uint64_t address, uint64_t size, const std::string& state,
                                 uint64_t requested = 0) {
    v1::SnapshotBlock block;
    block.set_address(address);
    block.set_size(size);
    block.set_requested_size(requested);
    block.set_state(state);
    return block;
  }

  static const v1::SnapshotSegment* Find(const v1::MemorySnapshot& snapshot, uint64_t address) {
    for (const v1::SnapshotSegment& segment : snapshot.segments()) {
      if (segment.address() == address) return &segment;
    }
    ADD_FAILURE() << "no segment at " << address;
    return nullptr;
  }
};

TEST_F(SessionAnswersTest, AnHonestAnswerFillsTheLeaseFromTheBlocks) {
  RawSession client(channel_, "client");
  const v1::Allocation lease = Lease(client);
  const uint64_t a = lease.address();
  v1::MemorySnapshot snapshot = SnapshotAnswering(client, [&](uint64_t request) {
    client.Send(Answer(request, lease,
                       {Block(a, 1 << 20, "active_allocated", 1000000),
                        Block(a + (1 << 20), 512, "active_pending_free", 100),
                        Block(a + (1 << 20) + 512, (1 << 20) - 512, "inactive")}));
  });
  const v1::SnapshotSegment* segment = Find(snapshot, a);
  ASSERT_NE(segment, nullptr);
  EXPECT_TRUE(segment->leased());
  EXPECT_FALSE(segment->blocks_unavailable()) << segment->blocks_unavailable_reason();
  ASSERT_EQ(segment->blocks_size(), 3);
  // The sizes are summed by the daemon; the sessions named are its own.
  EXPECT_EQ(segment->allocated_size(), 1u << 20);
  EXPECT_EQ(segment->active_size(), (1u << 20) + 512);
  EXPECT_EQ(segment->requested_size(), 1000100u);
  EXPECT_EQ(segment->blocks(0).session_id(), client.id());
  EXPECT_EQ(segment->blocks(2).session_id(), 0u);
}

TEST_F(SessionAnswersTest, LiesMarkOnlyTheLiarsLeasesAndTheDaemonServesOn) {
  RawSession liar(channel_, "liar");
  RawSession bystander(channel_, "bystander");
  v1::Allocation own;
  ASSERT_TRUE(bystander.Allocate(0, 4096, &own).ok());
  const v1::Allocation gap = Lease(liar), bad_state = Lease(liar), too_big = Lease(liar);
  v1::MemorySnapshot snapshot = SnapshotAnswering(liar, [&](uint64_t request) {
    // Noise first: answers to questions never asked, and a cache release
    // nobody asked for.
    liar.Send(Answer(request + 1000, gap, {Block(gap.address(), kLease, "inactive")}));
    v1::SessionClientMessage released;
    released.mutable_cache_released()->set_request_id(77);
    liar.Send(released);
    // One answer in three messages.
    liar.Send(Answer(request, gap, {Block(gap.address(), 4096, "active_allocated", 10)}, false));
    liar.Send(Answer(request, bad_state, {Block(bad_state.address(), kLease, "borrowed")}, false));
    liar.Send(Answer(request, too_big,
                     {Block(too_big.address(), kLease, "active_allocated", kLease + 1)}));
  });
  const std::string prefix = absl::StrCat("blocks unavailable: session ", liar.id(),
                                          "'s client described this lease "
                                          "wrongly: ");
  const v1::SnapshotSegment* segment = Find(snapshot, gap.address());
  ASSERT_NE(segment, nullptr);
  EXPECT_TRUE(segment->blocks_unavailable());
  EXPECT_EQ(segment->blocks_unavailable_reason(),
            absl::StrCat(prefix, "its blocks end at ", gap.address() + 4096,
                         ", before the segment's end"));
  // One block of unknown state spans it (PyTorch's tools want the blocks to
  // add up to the segment), and nothing counts as allocated.
  ASSERT_EQ(segment->blocks_size(), 1);
  EXPECT_EQ(segment->blocks(0).state(), "unknown");
  EXPECT_EQ(segment->allocated_size(), 0u);
  segment = Find(snapshot, bad_state.address());
  ASSERT_NE(segment, nullptr);
  EXPECT_EQ(segment->blocks_unavailable_reason(),
            absl::StrCat(prefix,
                         "a block's state is none of active_allocated, active_pending_free and "
                         "inactive"));
  segment = Find(snapshot, too_big.address());
  ASSERT_NE(segment, nullptr);
  EXPECT_TRUE(absl::StrContains(segment->blocks_unavailable_reason(), "requested of its"))
      << segment->blocks_unavailable_reason();
  // The bystander's allocation is as the daemon's books say.
  segment = Find(snapshot, own.address() - own.offset());
  ASSERT_NE(segment, nullptr);
  EXPECT_FALSE(segment->leased());
  EXPECT_FALSE(segment->blocks_unavailable());
  EXPECT_EQ(segment->allocated_size(), 4096u);

  // An answer past the bounds is as good as none, and says so (it used to
  // read as no answer within the deadline).
  snapshot = SnapshotAnswering(liar, [&](uint64_t request) {
    v1::SessionClientMessage huge = Answer(request, gap, {});
    v1::SnapshotSegment* first = huge.mutable_lease_blocks()->mutable_segments(0);
    for (int i = 0; i < 70000; ++i) *huge.mutable_lease_blocks()->add_segments() = *first;
    liar.Send(huge);
  });
  segment = Find(snapshot, gap.address());
  ASSERT_NE(segment, nullptr);
  EXPECT_EQ(segment->blocks_unavailable_reason(),
            absl::StrCat("blocks unavailable: session ", liar.id(),
                         "'s client answered too much: over 65536 segments or 4194304 blocks, so "
                         "its answer was dropped"));
  // One block of unknown state spans the lease, for PyTorch's tools.
  ASSERT_EQ(segment->blocks_size(), 1);
  EXPECT_EQ(segment->blocks(0).state(), "unknown");
  EXPECT_EQ(segment->blocks(0).size(), segment->total_size());

  // A liar that answers nothing is marked by the deadline, and then not
  // asked until it answers something; each reason is its own.
  snapshot = SnapshotAnswering(liar, [](uint64_t) {});
  segment = Find(snapshot, gap.address());
  ASSERT_NE(segment, nullptr);
  EXPECT_EQ(segment->blocks_unavailable_reason(),
            absl::StrCat("blocks unavailable: session ", liar.id(),
                         "'s client did not answer within 300ms"));
  v1::MemorySnapshot unasked;
  {
    auto observe = v1::Observe::NewStub(channel_);
    grpc::ClientContext context;
    ASSERT_TRUE(observe->GetMemorySnapshot(&context, v1::ObserveSnapshotRequest(), &unasked).ok());
  }
  segment = Find(unasked, gap.address());
  ASSERT_NE(segment, nullptr);
  EXPECT_EQ(segment->blocks_unavailable_reason(),
            absl::StrCat("blocks unavailable: session ", liar.id(),
                         "'s client was not asked: it let an earlier question pass its deadline "
                         "and has answered nothing since"));
  EXPECT_TRUE(liar.Ping().ok());
  EXPECT_TRUE(bystander.Ping().ok());
}

// A holder asked to return its cache that gave nothing back is not asked
// again until its figures change: one that answered just inside the
// deadline, with nothing, used to delay every allocation of every other
// session by that much, every time.
TEST_F(SessionAnswersTest, AHolderThatGaveNothingIsNotAskedAgainUntilItsFiguresChange) {
  RawSession holder(channel_, "holder");
  RawSession requester(channel_, "requester");
  Lease(holder);  // 2 MiB cached, nothing of it given back below
  v1::Allocation most;
  ASSERT_TRUE(requester.Allocate(0, 60 << 20, &most).ok());  // 2 of 64 MiB left
  // The next release question the holder reads (on another thread: it
  // blocks), answered with nothing given back.
  auto answer_next_question = [&] {
    return std::async(std::launch::async, [&] {
      v1::SessionServerMessage notice;
      while (holder.ReadNotice(&notice) && !notice.has_release_cached()) {
      }
      v1::SessionClientMessage answer;
      answer.mutable_cache_released()->set_request_id(notice.release_cached().request_id());
      holder.Send(answer);
      return notice.release_cached().request_id();
    });
  };
  auto first = answer_next_question();
  v1::Allocation refused;
  EXPECT_EQ(requester.Allocate(0, 4 << 20, &refused).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  const uint64_t asked = first.get();
  ASSERT_NE(asked, 0u);
  // Refused again without asking it: its figures are as they were.
  EXPECT_EQ(requester.Allocate(0, 4 << 20, &refused).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  // Its figures change (a second lease, the last 2 MiB): asked again, by the
  // very next question (had the refusal above asked it, this would be the
  // one after).
  Lease(holder);
  auto second = answer_next_question();
  EXPECT_EQ(requester.Allocate(0, 4 << 20, &refused).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  ASSERT_EQ(second.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(second.get(), asked + 1);
}

class SnapshotAnswerReuseTest : public SessionAnswersTest {
 protected:
  Daemon::Options Options() override {
    Daemon::Options options = SessionAnswersTest::Options();
    options.snapshot_answer_reuse = absl::Seconds(30);
    return options;
  }
};

// Snapshots in a loop (four callers on the observe port used to cut a
// client's allocation rate to a quarter) ask a client again only once it
// allocated or freed since its answer.
TEST_F(SnapshotAnswerReuseTest, AnAnswerServesUntilTheClientAllocates) {
  RawSession client(channel_, "client");
  const v1::Allocation lease = Lease(client);
  const uint64_t a = lease.address();
  const auto honest = [&](uint64_t request) {
    client.Send(Answer(request, lease,
                       {Block(a, 1 << 20, "active_allocated", 1000000),
                        Block(a + (1 << 20), 1 << 20, "inactive")}));
  };
  SnapshotAnswering(client, honest);
  // Not asked (nobody would answer): the answer serves, blocks and all.
  for (int i = 0; i < 3; ++i) {
    v1::MemorySnapshot again;
    auto observe = v1::Observe::NewStub(channel_);
    grpc::ClientContext context;
    ASSERT_TRUE(observe->GetMemorySnapshot(&context, v1::ObserveSnapshotRequest(), &again).ok());
    const v1::SnapshotSegment* segment = Find(again, a);
    ASSERT_NE(segment, nullptr);
    EXPECT_FALSE(segment->blocks_unavailable()) << segment->blocks_unavailable_reason();
    EXPECT_EQ(segment->blocks_size(), 2);
  }
  // A new lease: asked again.
  const v1::Allocation second = Lease(client);
  v1::MemorySnapshot fresh = SnapshotAnswering(client, [&](uint64_t request) {
    v1::SessionClientMessage both = Answer(request, lease, {Block(a, 2 << 20, "inactive")});
    *both.mutable_lease_blocks()->add_segments() =
        Answer(request, second, {Block(second.address(), 2 << 20, "inactive")})
            .lease_blocks()
            .segments(0);
    client.Send(both);
  });
  const v1::SnapshotSegment* segment = Find(fresh, a);
  ASSERT_NE(segment, nullptr);
  EXPECT_EQ(segment->blocks_size(), 1);
  segment = Find(fresh, second.address());
  ASSERT_NE(segment, nullptr);
  EXPECT_FALSE(segment->blocks_unavailable()) << segment->blocks_unavailable_reason();
}

}  // namespace
}  // namespace gpumux::testing
