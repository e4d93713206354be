#include "tests/fuzz/fuzz_service.h"

#include <filesystem>
#include <fstream>
#include <memory>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/text_format.h"

namespace gpumux::fuzz {
namespace {

constexpr absl::string_view kWriteSeedsFlag = "-write_seeds=";

void WriteSeeds(const std::vector<FuzzMethod>& methods, const std::string& dir) {
  std::filesystem::create_directories(dir);
  for (size_t m = 0; m < methods.size(); ++m) {
    for (size_t s = 0; s < methods[m].seeds.size(); ++s) {
      std::ofstream file(absl::StrCat(dir, "/", methods[m].name, "-", s),
                         std::ios::binary | std::ios::trunc);
      file.put(static_cast<char>(m));
      file << methods[m].seeds[s];
      if (!file.flush()) FuzzHarness::Fail(absl::StrCat("cannot write seeds into ", dir));
    }
  }
}

}  // namespace

FuzzService::FuzzService(absl::string_view service, std::vector<FuzzMethod> methods)
    : methods_(std::move(methods)) {
  const google::protobuf::ServiceDescriptor* descriptor =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(std::string(service));
  if (descriptor == nullptr) FuzzHarness::Fail(absl::StrCat("no service ", service));
  bool same = descriptor->method_count() == static_cast<int>(methods_.size());
  for (int i = 0; same && i < descriptor->method_count(); ++i)
    same = descriptor->method(i)->name() == methods_[i].name;
  if (!same) {
    std::string names;
    for (int i = 0; i < descriptor->method_count(); ++i)
      absl::StrAppend(&names, " ", descriptor->method(i)->name());
    FuzzHarness::Fail(
        absl::StrCat("the fuzz target must list the methods of ", service, " in order:", names));
  }
}

void FuzzService::Initialize(int argc, char** argv) const {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg.substr(0, kWriteSeedsFlag.size()) == kWriteSeedsFlag) {
      WriteSeeds(methods_, std::string(arg.substr(kWriteSeedsFlag.size())));
      exit(0);
    }
  }
}

void FuzzService::TestOneInput(const uint8_t* data, size_t size) const {
  if (size == 0) return;  // no method named
  FuzzHarness& harness = FuzzHarness::Get();
  methods_[data[0] % methods_.size()].call(
      harness, absl::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  harness.FinishInput();
}

std::vector<std::string> SerializeSeeds(const google::protobuf::Message& prototype,
                                        std::initializer_list<std::string> texts) {
  std::vector<std::string> seeds;
  for (const std::string& text : texts) {
    std::unique_ptr<google::protobuf::Message> message(prototype.New());
    if (!google::protobuf::TextFormat::ParseFromString(text, message.get())) {
      FuzzHarness::Fail(
          absl::StrCat("seed '", text, "' is not a ", prototype.GetTypeName(), " in text format"));
    }
    seeds.push_back(message->SerializeAsString());
  }
  return seeds;
}

}  // namespace gpumux::fuzz

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  gpumux::fuzz::TargetService().Initialize(*argc, *argv);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gpumux::fuzz::TargetService().TestOneInput(data, size);
  return 0;
}
