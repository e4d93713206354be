// libFuzzer target for gpumux.v1.Memory: allocations, leases, frees (also riding on
// Allocate, with wait event handles), record_stream, caches, stats, limits,
// share tokens and imports, against the fixture's allocations and stream.

#include "absl/strings/str_cat.h"
#include "gpumux/v1/memory.grpc.pb.h"
#include "tests/fuzz/fuzz_service.h"

namespace gpumux::fuzz {

using v1::Memory;

const FuzzService& TargetService() {
  static const FuzzService service(
      Memory::service_full_name(),
      {
          Unary<Memory>(
              "Allocate", &Memory::Stub::Allocate,
              {"device: 0 size: 4096", "device: 1 size: 25165824 shareable: true",
               "device: 0 size: 512 stream: 1 free_allocation_ids: 1000",
               absl::StrCat("device: 1 size: 1 free_wait_event_handles: ", kSeedEventHandle)}),
          Unary<Memory>("Lease", &Memory::Stub::Lease,
                        {"device: 0 size: 2097152", "device: 1 size: 20971520 stream: 1",
                         "device: 0 size: 4194304 small_pool: true free_allocation_ids: 1000",
                         "device: 0 size: 4096"}),
          Unary<Memory>("GetStatsPage", &Memory::Stub::GetStatsPage, {""}),
          Unary<Memory>(
              "Free", &Memory::Stub::Free,
              {"allocation_ids: 1000", "allocation_ids: 4 allocation_ids: 4",
               absl::StrCat("allocation_ids: 1000 wait_event_handles: ", kSeedEventHandle)}),
          Unary<Memory>("RecordStream", &Memory::Stub::RecordStream,
                        {"allocation_id: 1 stream: 1", "allocation_id: 2 stream: 1"}),
          Unary<Memory>("EmptyCache", &Memory::Stub::EmptyCache,
                        {"device: 0", "all_devices: true all_sessions: true"}),
          Unary<Memory>("GetStats", &Memory::Stub::GetStats, {"device: 1"}),
          Unary<Memory>("ResetPeakStats", &Memory::Stub::ResetPeakStats, {"device: 0"}),
          Unary<Memory>("ResetAccumulatedStats", &Memory::Stub::ResetAccumulatedStats,
                        {"device: 1"}),
          Unary<Memory>("GetSummary", &Memory::Stub::GetSummary, {"device: 0 abbreviated: true"}),
          Unary<Memory>("GetSnapshot", &Memory::Stub::GetSnapshot,
                        {"device: 0", "all_devices: true"}),
          Unary<Memory>(
              "SetMemoryLimit", &Memory::Stub::SetMemoryLimit,
              {"device: 0 fraction: 0.5", "device: 1 bytes: 2097152", "device: 0 unlimited: true"}),
          Unary<Memory>("Share", &Memory::Stub::Share, {"allocation_id: 3", "allocation_id: 1"}),
          Unary<Memory>("Import", &Memory::Stub::Import,
                        {"token: 'gpumux-share-0123456789abcdef0123456789abcdef'"}),
      });
  return service;
}

}  // namespace gpumux::fuzz
