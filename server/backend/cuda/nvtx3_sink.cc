#include "server/backend/cuda/nvtx3_sink.h"

#include <nvtx3/nvToolsExt.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace gpumux {
namespace {

nvtxEventAttributes_t Attributes(const std::string& text) {
  nvtxEventAttributes_t attributes = {};
  attributes.version = NVTX_VERSION;
  attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attributes.message.ascii = text.c_str();
  return attributes;
}

}  // namespace

Nvtx3Sink::Nvtx3Sink() : domain_(nvtxDomainCreateA("gpumux")) {}

void Nvtx3Sink::Mark(SessionId session, absl::string_view message) {
  const std::string text = absl::StrCat("session ", session.value(), ": ", message);
  const nvtxEventAttributes_t attributes = Attributes(text);
  nvtxDomainMarkEx(static_cast<nvtxDomainHandle_t>(domain_), &attributes);
}

uint64_t Nvtx3Sink::RangeStart(SessionId session, absl::string_view message) {
  const std::string text = absl::StrCat("session ", session.value(), ": ", message);
  const nvtxEventAttributes_t attributes = Attributes(text);
  return nvtxDomainRangeStartEx(static_cast<nvtxDomainHandle_t>(domain_), &attributes);
}

void Nvtx3Sink::RangeEnd(uint64_t range) {
  nvtxDomainRangeEnd(static_cast<nvtxDomainHandle_t>(domain_), range);
}

}  // namespace gpumux
