#include "gpumux/device_buffer.h"

#include <utility>

#include "client/client_impl.h"
#include "client/host_profiler.h"
#include "gpumux/client.h"

namespace gpumux {

DeviceBuffer::DeviceBuffer(Client* client, const Info& info, void* data)
    : client_(client),
      id_(info.id),
      device_(info.device),
      size_(info.size),
      allocated_size_(info.allocated_size),
      address_(info.address),
      data_(data),
      segment_id_(info.segment_id),
      offset_(info.offset),
      cuda_device_(info.cuda_device),
      local_(info.local),
      lease_(info.lease),
      local_stream_(info.local_stream) {}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : client_(std::exchange(other.client_, nullptr)),
      id_(other.id_),
      device_(other.device_),
      size_(other.size_),
      allocated_size_(other.allocated_size_),
      address_(other.address_),
      data_(std::exchange(other.data_, nullptr)),
      segment_id_(other.segment_id_),
      offset_(other.offset_),
      cuda_device_(other.cuda_device_),
      local_(other.local_),
      lease_(other.lease_),
      local_stream_(other.local_stream_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this == &other) return *this;
  Reset();
  client_ = std::exchange(other.client_, nullptr);
  id_ = other.id_;
  device_ = other.device_;
  size_ = other.size_;
  allocated_size_ = other.allocated_size_;
  address_ = other.address_;
  data_ = std::exchange(other.data_, nullptr);
  segment_id_ = other.segment_id_;
  offset_ = other.offset_;
  cuda_device_ = other.cuda_device_;
  local_ = other.local_;
  lease_ = other.lease_;
  local_stream_ = other.local_stream_;
  return *this;
}

DeviceBuffer::~DeviceBuffer() { Reset(); }

AllocationId DeviceBuffer::Detach() {
  // A local block's lease holds the mapping.
  if (data_ != nullptr && !local_) client_->impl_->mapper_.Release(device_, segment_id_);
  client_ = nullptr;
  data_ = nullptr;
  return id_;
}

void DeviceBuffer::Reset() {
  if (client_ == nullptr) return;
  GPUMUX_PROFILED("DeviceBuffer::Reset");  // the free of a buffer dropped or reset
  Client* client = client_;
  if (local_) {
    Detach();
    client->impl_->FreeLocal(device_, address_, local_stream_);
    return;
  }
  client->impl_->EnqueueFree(Detach(), device_, cuda_device_);
}

}  // namespace gpumux
