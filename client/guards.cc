#include "gpumux/guards.h"

#include "client/client_impl.h"
#include "gpumux/client.h"

namespace gpumux {

StreamGuard::StreamGuard(const Stream& stream)
    : client_(*stream.client()),
      previous_device_(client_.impl_->current_.device()),
      stream_device_(stream.device()),
      previous_on_previous_device_(client_.impl_->current_.stream(previous_device_)),
      previous_on_stream_device_(client_.impl_->current_.stream(stream_device_)) {
  client_.impl_->current_.set_stream(stream_device_, {stream.id(), stream.priority()});
  client_.impl_->current_.set_device(stream_device_);
}

StreamGuard::~StreamGuard() {
  client_.impl_->current_.set_stream(stream_device_, previous_on_stream_device_);
  client_.impl_->current_.set_stream(previous_device_, previous_on_previous_device_);
  client_.impl_->current_.set_device(previous_device_);
}

DeviceGuard::DeviceGuard(Client& client, DeviceIndex device)
    : client_(client), previous_device_(client.impl_->current_.device()) {
  if (device.value() >= 0) client_.impl_->current_.set_device(device);
}

DeviceGuard::~DeviceGuard() { client_.impl_->current_.set_device(previous_device_); }

DeviceOf::DeviceOf(Client& client, const DeviceBuffer& buffer)
    : guard_(client, buffer.valid() ? buffer.device() : client.CurrentDevice()) {}

}  // namespace gpumux
