#pragma once

// ForwardingBackend: a DeviceBackend that passes every call to another one
// (LevelDB's EnvWrapper). Policies and test doubles derive from it and
// override only the calls they change, so they keep compiling when the
// interface grows. Thread-safe as far as the target is; it does not own it.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "server/backend/device_backend.h"

namespace gpumux {

class ForwardingBackend : public DeviceBackend {
 public:
  // `target` must outlive this object.
  explicit ForwardingBackend(DeviceBackend* target) : target_(target) {}

  DeviceBackend* target() const { return target_; }

  absl::string_view name() const override { return target_->name(); }
  int device_count() const override { return target_->device_count(); }
  const DeviceInfo& device_info(DeviceIndex device) const override {
    return target_->device_info(device);
  }
  absl::StatusOr<uint64_t> FreeMemory(DeviceIndex device) const override {
    return target_->FreeMemory(device);
  }
  absl::Status DeviceHealth(DeviceIndex device) const override {
    return target_->DeviceHealth(device);
  }
  absl::StatusOr<BackendSegment> AllocateSegment(DeviceIndex device, uint64_t size) override {
    return target_->AllocateSegment(device, size);
  }
  absl::Status ReleaseSegment(DeviceIndex device, uint64_t address) override {
    return target_->ReleaseSegment(device, address);
  }
  bool SupportsExpandableSegments() const override { return target_->SupportsExpandableSegments(); }
  absl::StatusOr<BackendRange> ReserveRange(DeviceIndex device, uint64_t size, uint64_t page_size,
                                            StreamId stream, bool small_pool) override {
    return target_->ReserveRange(device, size, page_size, stream, small_pool);
  }
  absl::Status MapPages(DeviceIndex device, uint64_t address, uint64_t size) override {
    return target_->MapPages(device, address, size);
  }
  absl::Status UnmapPages(DeviceIndex device, uint64_t address, uint64_t size) override {
    return target_->UnmapPages(device, address, size);
  }
  absl::Status ReleaseRange(DeviceIndex device, uint64_t address) override {
    return target_->ReleaseRange(device, address);
  }
  absl::StatusOr<std::vector<PageHandle>> PageHandles(DeviceIndex device, uint64_t address,
                                                      uint64_t size) override {
    return target_->PageHandles(device, address, size);
  }
  absl::Status Synchronize(DeviceIndex device) override { return target_->Synchronize(device); }

  StreamPriorityRange GetStreamPriorityRange(DeviceIndex device) const override {
    return target_->GetStreamPriorityRange(device);
  }
  absl::StatusOr<BackendStream> CreateStream(DeviceIndex device, int priority) override {
    return target_->CreateStream(device, priority);
  }
  absl::Status DestroyStream(BackendStream stream) override {
    return target_->DestroyStream(stream);
  }
  absl::StatusOr<bool> QueryStream(BackendStream stream) override {
    return target_->QueryStream(stream);
  }
  absl::Status SynchronizeStream(BackendStream stream) override {
    return target_->SynchronizeStream(stream);
  }

  absl::StatusOr<BackendEvent> CreateEvent(DeviceIndex device, EventFlags flags) override {
    return target_->CreateEvent(device, flags);
  }
  absl::Status DestroyEvent(BackendEvent event) override { return target_->DestroyEvent(event); }
  absl::Status RecordEvent(BackendEvent event, BackendStream stream) override {
    return target_->RecordEvent(event, stream);
  }
  absl::StatusOr<bool> QueryEvent(BackendEvent event) override {
    return target_->QueryEvent(event);
  }
  absl::Status SynchronizeEvent(BackendEvent event) override {
    return target_->SynchronizeEvent(event);
  }
  absl::Status StreamWaitEvent(BackendStream stream, BackendEvent event) override {
    return target_->StreamWaitEvent(stream, event);
  }
  absl::StatusOr<float> ElapsedTimeMs(BackendEvent start, BackendEvent end) override {
    return target_->ElapsedTimeMs(start, end);
  }
  absl::StatusOr<std::string> GetIpcEventHandle(BackendEvent event) override {
    return target_->GetIpcEventHandle(event);
  }
  absl::StatusOr<BackendEvent> OpenIpcEventHandle(DeviceIndex device,
                                                  absl::string_view handle) override {
    return target_->OpenIpcEventHandle(device, handle);
  }

  absl::Status CopyDeviceToDevice(BackendStream stream, DeviceIndex dst_device, uint64_t dst,
                                  DeviceIndex src_device, uint64_t src, uint64_t bytes) override {
    return target_->CopyDeviceToDevice(stream, dst_device, dst, src_device, src, bytes);
  }
  absl::Status CopyHostToDevice(BackendStream stream, uint64_t dst, const void* src, uint64_t bytes,
                                std::shared_ptr<const void> keep_alive) override {
    return target_->CopyHostToDevice(stream, dst, src, bytes, std::move(keep_alive));
  }
  absl::Status CopyDeviceToHost(BackendStream stream, void* dst, uint64_t src, uint64_t bytes,
                                std::shared_ptr<void> keep_alive) override {
    return target_->CopyDeviceToHost(stream, dst, src, bytes, std::move(keep_alive));
  }
  absl::Status Memset(BackendStream stream, uint64_t dst, uint8_t value, uint64_t bytes) override {
    return target_->Memset(stream, dst, value, bytes);
  }
  absl::Status FillRandom(BackendStream stream, uint64_t dst, const RngRequest& request,
                          uint64_t seed, uint64_t offset) override {
    return target_->FillRandom(stream, dst, request, seed, offset);
  }
  absl::Status CopyDeviceToDevice2D(BackendStream stream, DeviceIndex dst_device, uint64_t dst,
                                    uint64_t dst_pitch, DeviceIndex src_device, uint64_t src,
                                    uint64_t src_pitch, uint64_t row_bytes,
                                    uint64_t rows) override {
    return target_->CopyDeviceToDevice2D(stream, dst_device, dst, dst_pitch, src_device, src,
                                         src_pitch, row_bytes, rows);
  }
  bool CanReadPeer(DeviceIndex device, DeviceIndex peer) const override {
    return target_->CanReadPeer(device, peer);
  }
  absl::Status Reduce(BackendStream stream, ReduceOp op, RngDtype dtype, uint64_t dst,
                      DeviceIndex src_device, uint64_t src, uint64_t count) override {
    return target_->Reduce(stream, op, dtype, dst, src_device, src, count);
  }
  absl::Status FinishAverage(BackendStream stream, RngDtype dtype, uint64_t data, uint64_t count,
                             int ranks) override {
    return target_->FinishAverage(stream, dtype, data, count, ranks);
  }

  void AbandonInterprocessWaits() override { target_->AbandonInterprocessWaits(); }
  absl::Status PinHostMemory(void* data, uint64_t bytes) override {
    return target_->PinHostMemory(data, bytes);
  }
  absl::Status UnpinHostMemory(void* data) override { return target_->UnpinHostMemory(data); }
  bool memory_on_host() const override { return target_->memory_on_host(); }
  CollectiveEngine* collectives() override { return target_->collectives(); }
  absl::StatusOr<HostMemoryView> AccessOnHost(DeviceIndex device, uint64_t address,
                                              uint64_t bytes) override {
    return target_->AccessOnHost(device, address, bytes);
  }
  absl::StatusOr<StreamHold> HoldStream(BackendStream stream,
                                        absl::AnyInvocable<void() &&> reached) override {
    return target_->HoldStream(stream, std::move(reached));
  }

 private:
  DeviceBackend* target_;
};

}  // namespace gpumux
