#include "server/group/gloo_transport.h"

#include <chrono>
#include <cstring>
#include <exception>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"

namespace gpumux {
namespace {

std::chrono::milliseconds Millis(absl::Duration duration) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(duration));
}

// Gloo reports failures as exceptions: a timeout, a peer that closed its
// connection or cannot be reached (IoException), or a broken invariant.
absl::Status FromGloo(const std::exception& e) {
  const absl::string_view what = e.what();
  if (absl::StrContains(what, "Timed out") || absl::StrContains(what, "timed out")) {
    return absl::DeadlineExceededError(absl::StrCat("gloo: ", what));
  }
  if (dynamic_cast<const gloo::IoException*>(&e) != nullptr) {
    return absl::UnavailableError(absl::StrCat("gloo: ", what));
  }
  return absl::InternalError(absl::StrCat("gloo: ", what));
}

// Runs `fn`, which calls Gloo, and returns what it threw as a status.
template <typename Fn>
absl::Status CallGloo(Fn&& fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return FromGloo(e);
  }
}

// Gloo's Store over a round of a RendezvousPoint. Gloo's store calls throw
// on failure, which ends connectFullMesh with that exception.
class RoundStore final : public gloo::rendezvous::Store {
 public:
  RoundStore(RendezvousPoint& point, std::string group, uint64_t generation, absl::Duration timeout)
      : point_(point), group_(std::move(group)), generation_(generation), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Check(point_.Set(group_, generation_, key, absl::string_view(data.data(), data.size())));
  }
  std::vector<char> get(const std::string& key) override {
    absl::StatusOr<std::string> value = point_.Get(group_, generation_, key, timeout_);
    Check(value.status());
    return std::vector<char>(value->begin(), value->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, Millis(timeout_)); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    for (const std::string& key : keys) {
      Check(point_.Get(group_, generation_, key, absl::Milliseconds(timeout.count())).status());
    }
  }

 private:
  static void Check(const absl::Status& status) {
    if (!status.ok()) throw gloo::IoException(absl::StrCat("rendezvous: ", status.message()));
  }

  RendezvousPoint& point_;
  const std::string group_;
  const uint64_t generation_;
  const absl::Duration timeout_;
};

// Gloo's typed calls need an element type of the dtype's size.
template <typename Fn>
void WithElementType(size_t element_size, Fn&& fn) {
  switch (element_size) {
    case 1:
      return fn(uint8_t{});
    case 2:
      return fn(uint16_t{});
    case 4:
      return fn(uint32_t{});
    default:
      return fn(uint64_t{});
  }
}

class GlooTransport final : public GroupTransport {
 public:
  GlooTransport(std::shared_ptr<gloo::rendezvous::Context> context, absl::Duration timeout)
      : context_(std::move(context)), timeout_(timeout) {}

  absl::Status AllReduce(void* data, uint64_t count, RngDtype dtype, ReduceOp op) override {
    if (context_->size > 1 && count > 0) {
      const size_t element = RngElementSize(dtype);
      const ReduceOp step = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
      absl::Status status = CallGloo([&] {
        gloo::AllreduceOptions options(context_);
        WithElementType(element, [&](auto type) {
          options.setOutput(static_cast<decltype(type)*>(data), count);
        });
        // out = a op b; `out` may be `a` (Gloo's contract) or `b`.
        options.setReduceFunction(
            [step, dtype, element](void* out, const void* a, const void* b, size_t n) {
              if (out == b) std::swap(a, b);
              if (out != a) std::memmove(out, a, n * element);
              Accumulate(step, dtype, out, b, n);
            });
        options.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        options.setTag(NextTag());
        options.setTimeout(Millis(timeout_));
        gloo::allreduce(options);
      });
      if (!status.ok()) return status;
    }
    if (op == ReduceOp::kAvg && count > 0) FinishAverage(dtype, data, count, context_->size);
    return absl::OkStatus();
  }

  absl::Status Broadcast(void* data, uint64_t bytes, int root) override {
    if (context_->size == 1 || bytes == 0) return absl::OkStatus();
    return CallGloo([&] {
      gloo::BroadcastOptions options(context_);
      options.setOutput(static_cast<uint8_t*>(data), bytes);
      options.setRoot(root);
      options.setTag(NextTag());
      options.setTimeout(Millis(timeout_));
      gloo::broadcast(options);
    });
  }

  absl::Status AllGather(const void* input, void* output, uint64_t bytes) override {
    char* mine = static_cast<char*>(output) + static_cast<uint64_t>(context_->rank) * bytes;
    if (input != mine) std::memmove(mine, input, bytes);
    if (context_->size == 1 || bytes == 0) return absl::OkStatus();
    return CallGloo([&] {
      gloo::AllgatherOptions options(context_);
      // In place: this rank's part is already in the output.
      options.setOutput(static_cast<uint8_t*>(output), bytes * context_->size);
      options.setTag(NextTag());
      options.setTimeout(Millis(timeout_));
      gloo::allgather(options);
    });
  }

 private:
  uint32_t NextTag() { return tag_++; }

  std::shared_ptr<gloo::rendezvous::Context> context_;
  const absl::Duration timeout_;
  uint32_t tag_ = 0;  // the registry runs one collective at a time
};

}  // namespace

GlooTransports::~GlooTransports() = default;

absl::StatusOr<std::unique_ptr<GroupTransport>> GlooTransports::Connect(RendezvousPoint& rendezvous,
                                                                        const GroupSpec& spec,
                                                                        uint64_t generation) {
  auto context = std::make_shared<gloo::rendezvous::Context>(spec.rank, spec.world_size);
  context->setTimeout(Millis(spec.timeout));
  // A group of one has no peers: no connection, no listening socket.
  if (spec.world_size == 1)
    return std::make_unique<GlooTransport>(std::move(context), spec.timeout);
  std::shared_ptr<gloo::transport::Device> device;
  {
    absl::MutexLock lock(&mu_);
    if (device_ == nullptr) {
      try {
        gloo::transport::tcp::attr attr;
        attr.hostname = host_;
        device_ = gloo::transport::tcp::CreateDevice(attr);
      } catch (const std::exception& e) {
        return absl::UnavailableError(
            absl::StrCat("cannot listen for group connections on ", host_, ": ", e.what()));
      }
    }
    device = device_;
  }
  RoundStore store(rendezvous, RendezvousName(GroupRef{spec.tenant, spec.name}), generation,
                   spec.timeout);
  absl::Status connected = CallGloo([&] { context->connectFullMesh(store, device); });
  if (!connected.ok()) return connected;
  return std::make_unique<GlooTransport>(std::move(context), spec.timeout);
}

}  // namespace gpumux
