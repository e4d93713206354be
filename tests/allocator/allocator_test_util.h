#pragma once

// A CachingAllocator over a real HostBackend with one small emulated device,
// and the stats-versus-snapshot consistency check of PyTorch's test_cuda.py
// (_check_memory_stat_consistency), device-wide and per client.

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "allocator/allocator_config.h"
#include "allocator/caching_allocator.h"
#include "gtest/gtest.h"
#include "server/backend/host/host_backend.h"
#include "tests/status_matchers.h"

namespace gpumux::testing {

inline constexpr uint64_t kKiB = 1024;
inline constexpr uint64_t kMiB = 1024 * 1024;
inline constexpr DeviceIndex kDev(0);
inline constexpr ClientId kA(1);
inline constexpr ClientId kB(2);
inline constexpr StreamId kS0(0);
inline constexpr StreamId kS1(1);

class AllocatorTest : public ::testing::Test {
 protected:
  // (Re)creates backend and allocator; `conf` is PYTORCH_CUDA_ALLOC_CONF text.
  void Init(uint64_t device_memory = 256 * kMiB, const std::string& conf = "") {
    allocator_.reset();
    backend_.reset();
    released_.clear();
    HostBackend::Options options;
    options.device_count = 1;
    options.device_memory = device_memory;
    auto backend = HostBackend::Create(options);
    ASSERT_OK(backend);
    backend_ = std::move(*backend);
    auto parsed = AllocatorOptions::Parse(conf);
    ASSERT_OK(parsed);
    allocator_ = std::make_unique<CachingAllocator>(backend_.get(), *parsed,
                                                    [this](DeviceIndex, SegmentId id) {
                                                      absl::MutexLock lock(&released_mu_);
                                                      released_.push_back(id);
                                                    });
  }
  void SetUp() override { Init(); }

  AllocationResult Alloc(uint64_t size, ClientId client = kA, StreamId stream = kS0,
                         bool dedicated = false) {
    absl::StatusOr<AllocationResult> r =
        allocator_->Allocate(kDev, client, stream, size, dedicated);
    EXPECT_OK(r);
    return r.ok() ? *r : AllocationResult{};
  }
  void Free(const AllocationResult& r) { allocator_->Free(kDev, r.address); }
  DeviceStats Stats() const { return allocator_->GetStats(kDev); }
  DeviceStats StatsOf(ClientId client) const { return allocator_->GetClientStats(kDev, client); }
  std::vector<SegmentSnapshot> Segments(std::optional<ClientId> client = std::nullopt) const {
    return allocator_->Snapshot(kDev, client);
  }

  std::unique_ptr<HostBackend> backend_;
  std::unique_ptr<CachingAllocator> allocator_;
  // From the segment-released callback, which every thread that allocates
  // may run at once; tests read it once theirs have joined.
  absl::Mutex released_mu_;
  std::vector<SegmentId> released_;
};

// What the stats' "current" values must be, computed from a snapshot.
struct ExpectedCurrent {
  std::array<int64_t, 3> segment{}, reserved{}, allocation{}, allocated{}, active{}, active_bytes{},
      inactive_split{}, inactive_split_bytes{}, requested{};
};

// Device-wide when `client` is null; else segments count for their owner and
// live blocks for the client they are charged to.
inline ExpectedCurrent ExpectFromSnapshot(const std::vector<SegmentSnapshot>& segments,
                                          std::optional<ClientId> client) {
  ExpectedCurrent e;
  for (const SegmentSnapshot& s : segments) {
    const int pool = s.is_small ? kSmallPool : kLargePool;
    auto add = [&](std::array<int64_t, 3>& a, int64_t n) {
      a[kAggregate] += n;
      a[pool] += n;
    };
    const bool owner = !client.has_value() || s.client == *client;
    // Expandable segments' runs count in no `segment` nor `inactive_split`
    // stat (PyTorch's test skips them the same way).
    if (owner) {
      if (!s.is_expandable) add(e.segment, 1);
      add(e.reserved, static_cast<int64_t>(s.total_size));
    }
    for (const BlockSnapshot& b : s.blocks) {
      if (b.state == BlockState::kInactive) {
        if (owner && s.blocks.size() > 1 && !s.is_expandable) {
          add(e.inactive_split, 1);
          add(e.inactive_split_bytes, static_cast<int64_t>(b.size));
        }
        continue;
      }
      if (client.has_value() && b.client != *client) continue;
      add(e.active, 1);
      add(e.active_bytes, static_cast<int64_t>(b.size));
      add(e.requested, static_cast<int64_t>(b.requested_size));
      if (b.state == BlockState::kActiveAllocated) {
        add(e.allocation, 1);
        add(e.allocated, static_cast<int64_t>(b.size));
      }
    }
  }
  return e;
}

// _check_memory_stat_consistency for `stats` against `segments`.
inline void ExpectConsistent(const DeviceStats& stats, const std::vector<SegmentSnapshot>& segments,
                             std::optional<ClientId> client) {
  const ExpectedCurrent e = ExpectFromSnapshot(segments, client);
  const std::string who = client.has_value() ? "client " + ToString(*client) : "device";
  for (int pool : {kAggregate, kSmallPool, kLargePool}) {
    SCOPED_TRACE(who + " pool " + std::to_string(pool));
    EXPECT_EQ(stats.segment[pool].current, e.segment[pool]);
    EXPECT_EQ(stats.reserved_bytes[pool].current, e.reserved[pool]);
    EXPECT_EQ(stats.allocation[pool].current, e.allocation[pool]);
    EXPECT_EQ(stats.allocated_bytes[pool].current, e.allocated[pool]);
    EXPECT_EQ(stats.active[pool].current, e.active[pool]);
    EXPECT_EQ(stats.active_bytes[pool].current, e.active_bytes[pool]);
    EXPECT_EQ(stats.inactive_split[pool].current, e.inactive_split[pool]);
    EXPECT_EQ(stats.inactive_split_bytes[pool].current, e.inactive_split_bytes[pool]);
    EXPECT_EQ(stats.requested_bytes[pool].current, e.requested[pool]);
  }
  // oversize_* count blocks and segments of at least max_split_size.
  const uint64_t max_split =
      stats.max_split_size < 0 ? UINT64_MAX : static_cast<uint64_t>(stats.max_split_size);
  int64_t oversize_segments = 0;
  int64_t oversize_allocations = 0;
  for (const SegmentSnapshot& s : segments) {
    if ((!client.has_value() || s.client == *client) && !s.is_expandable &&
        s.total_size >= max_split) {
      ++oversize_segments;
    }
    for (const BlockSnapshot& b : s.blocks) {
      if (b.state == BlockState::kActiveAllocated && b.size >= max_split &&
          (!client.has_value() || b.client == *client)) {
        ++oversize_allocations;
      }
    }
  }
  EXPECT_EQ(stats.oversize_segments.current, oversize_segments) << who;
  EXPECT_EQ(stats.oversize_allocations.current, oversize_allocations) << who;
}

}  // namespace gpumux::testing
