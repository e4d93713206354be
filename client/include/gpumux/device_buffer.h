#pragma once

// Device memory allocated through the daemon: the move-only owner of one
// allocation, like the storage behind a torch tensor. Destroying it frees the
// allocation the way `del x` does in torch: the free is queued and leaves with
// the client's next request (see FreeBatcher), and stats the client asks for
// afterwards reflect it.
//
// A DeviceBuffer must not outlive the Client that made it. Not thread-safe:
// one owner at a time, like any value type.

#include <cstdint>

#include "gpumux/common/ids.h"
#include "gpumux/local_streams.h"

namespace gpumux {

class Client;

class DeviceBuffer {
 public:
  // Owns nothing: valid() is false, data() null.
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  // Frees (queues) what this buffer held, then takes over `other`'s.
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  // Queues the free.
  ~DeviceBuffer();

  // False once moved from, released or freed.
  bool valid() const { return client_ != nullptr; }
  explicit operator bool() const { return valid(); }

  // The daemon's allocation id; for a block of the client's own allocator
  // (AllocationMode::kLocal) an id the client assigns, with the top bit set
  // so that it never equals a daemon's. Unique within the Client.
  AllocationId id() const { return id_; }
  // A block of the client's own allocator, carved from a leased segment.
  bool local() const { return local_; }
  DeviceIndex device() const { return device_; }
  // The size asked for.
  uint64_t size() const { return size_; }
  // The block's size after PyTorch's rounding.
  uint64_t allocated_size() const { return allocated_size_; }
  // The device address, as memory snapshots report it.
  uint64_t address() const { return address_; }
  // This process's pointer to the memory: into the mapped shared-memory
  // segment on the host backend (base + offset). Null where the segment cannot
  // be mapped in this build (CUDA IPC handles without CUDA support).
  void* data() const { return data_; }
  // This process's CUDA device ordinal data() points into (it may differ
  // from device() under CUDA_VISIBLE_DEVICES); -1 for host memory or no
  // mapping. What DLPack and __cuda_array_interface__ consumers are told.
  int cuda_device() const { return cuda_device_; }
  SegmentId segment_id() const { return segment_id_; }
  // Offset of the block in its segment.
  uint64_t offset() const { return offset_; }

 private:
  friend class Client;

  // What the daemon reported about the allocation (v1::Allocation).
  struct Info {
    AllocationId id;
    DeviceIndex device;
    uint64_t size = 0;
    uint64_t allocated_size = 0;
    uint64_t address = 0;
    SegmentId segment_id;
    uint64_t offset = 0;
    // This process's CUDA ordinal the segment is mapped on; -1 for host
    // memory or no mapping.
    int cuda_device = -1;
    bool local = false;
    AllocationId lease;        // a local block's lease
    LocalStream local_stream;  // and its pool's stream
  };

  DeviceBuffer(Client* client, const Info& info, void* data);
  // Gives the allocation up without freeing it (and its use of the segment's
  // mapping); returns its id.
  AllocationId Detach();
  // Queues the free of what this buffer holds and empties it.
  void Reset();

  Client* client_ = nullptr;
  AllocationId id_;
  DeviceIndex device_;
  uint64_t size_ = 0;
  uint64_t allocated_size_ = 0;
  uint64_t address_ = 0;
  void* data_ = nullptr;
  SegmentId segment_id_;
  uint64_t offset_ = 0;
  // Where a free fence is recorded (Info::cuda_device).
  int cuda_device_ = -1;
  bool local_ = false;
  // The lease a local block lies in: how the daemon names its memory.
  AllocationId lease_;
  // The stream of this process whose pool a local block came from.
  LocalStream local_stream_;
};

}  // namespace gpumux
