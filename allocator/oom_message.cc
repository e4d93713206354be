#include "allocator/oom_message.h"

#include "absl/strings/str_cat.h"
#include "common/base/byte_size.h"

namespace gpumux {

std::string FormatOomMessage(const OomReport& r) {
  std::string allowed;
  if (r.client_limit > 0) allowed = absl::StrCat(FormatTorchSize(r.client_limit), " allowed; ");
  uint64_t unallocated =
      r.device_reserved > r.device_allocated ? r.device_reserved - r.device_allocated : 0;
  std::string message = absl::StrCat(
      "CUDA out of memory. Tried to allocate ", FormatTorchSize(r.attempted_segment_size), ". GPU ",
      r.device, " has a total capacity of ", FormatTorchSize(r.device_total), " of which ",
      r.device_free.ok()
          ? absl::StrCat(FormatTorchSize(*r.device_free), " is free. ")
          : absl::StrCat("the free part is unknown (", r.device_free.status().message(), "). "),
      allowed, "Of the allocated memory ", FormatTorchSize(r.device_allocated),
      " is allocated by PyTorch, and ", FormatTorchSize(unallocated),
      " is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
      "releasing cached memory (empty_cache, or `gpumux empty-cache`) or starting gpumuxd with "
      "--allocator-conf=max_split_size_mb:<MB> to avoid fragmentation.  See "
      "documentation for Memory Management  "
      "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)");
  absl::StrAppend(&message, " This session has ", FormatTorchSize(r.client_allocated),
                  " allocated and ", FormatTorchSize(r.client_reserved), " reserved on GPU ",
                  r.device);
  if (r.client_limit > 0)
    absl::StrAppend(&message, " of its ", FormatTorchSize(r.client_limit), " limit");
  absl::StrAppend(&message, ".");
  if (!r.tenant.empty()) {
    absl::StrAppend(&message, " Its tenant '", r.tenant, "' has ",
                    FormatTorchSize(r.tenant_reserved), " reserved on GPU ", r.device, " over ",
                    r.tenant_clients, r.tenant_clients == 1 ? " session" : " sessions", ", of its ",
                    FormatTorchSize(r.tenant_limit),
                    " limit for all of them together (`gpumux tenant-limit` changes it).");
  }
  return message;
}

}  // namespace gpumux
