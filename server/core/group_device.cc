#include "server/core/group_device.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace gpumux {
namespace {

class WithDevice final : public GroupTransport {
 public:
  WithDevice(std::unique_ptr<GroupTransport> host, std::unique_ptr<GroupCommunicator> device)
      : host_(std::move(host)), device_(std::move(device)) {}

  absl::Status AllReduce(void* data, uint64_t count, RngDtype dtype, ReduceOp op) override {
    return host_->AllReduce(data, count, dtype, op);
  }
  absl::Status Broadcast(void* data, uint64_t bytes, int root) override {
    return host_->Broadcast(data, bytes, root);
  }
  absl::Status AllGather(const void* input, void* output, uint64_t bytes) override {
    return host_->AllGather(input, output, bytes);
  }
  GroupCommunicator* device_communicator() override { return device_.get(); }

 private:
  std::unique_ptr<GroupTransport> host_;
  std::unique_ptr<GroupCommunicator> device_;
};

constexpr char kIdKey[] = "device-engine/id";

std::string EngineKey(int rank) { return absl::StrCat("device-engine/", rank); }

}  // namespace

absl::StatusOr<std::unique_ptr<GroupTransport>> AddDeviceCommunicator(
    std::unique_ptr<GroupTransport> host, CollectiveEngine* engine, RendezvousPoint& rendezvous,
    const GroupSpec& spec, uint64_t generation) {
  const std::string name = RendezvousName(GroupRef{spec.tenant, spec.name});
  GPUMUX_RETURN_IF_ERROR(
      rendezvous.Set(name, generation, EngineKey(spec.rank), engine != nullptr ? "1" : "0"));
  bool everyone = engine != nullptr;
  for (int rank = 0; rank < spec.world_size; ++rank) {
    if (rank == spec.rank) continue;
    absl::StatusOr<std::string> has =
        rendezvous.Get(name, generation, EngineKey(rank), spec.timeout);
    if (!has.ok()) return has.status();
    if (*has != "1") everyone = false;
  }
  if (!everyone) return host;
  std::string id;
  if (spec.rank == 0) {
    GPUMUX_ASSIGN_OR_RETURN(id, engine->NewGroupId());
    GPUMUX_RETURN_IF_ERROR(rendezvous.Set(name, generation, kIdKey, id));
  } else {
    GPUMUX_ASSIGN_OR_RETURN(id, rendezvous.Get(name, generation, kIdKey, spec.timeout));
  }
  GPUMUX_ASSIGN_OR_RETURN(
      std::unique_ptr<GroupCommunicator> device,
      engine->JoinGroup(spec.device, id, spec.world_size, spec.rank, spec.timeout));
  return std::unique_ptr<GroupTransport>(new WithDevice(std::move(host), std::move(device)));
}

}  // namespace gpumux
