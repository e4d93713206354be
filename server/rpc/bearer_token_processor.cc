#include "server/rpc/bearer_token_processor.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace gpumux {
namespace {

constexpr absl::string_view kHowToAuthenticate =
    "every call to gpumuxd's TCP listener carries 'authorization: Bearer <token>' with the "
    "daemon's token (gpumux --auth-token-file, or GPUMUX_AUTH_TOKEN_FILE)";

std::array<unsigned char, 32> Digest(absl::string_view text) {
  std::array<unsigned char, 32> digest{};
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest.data());
  return digest;
}

grpc::Status Unauthenticated(absl::string_view what) {
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      std::string(what) + ": " + std::string(kHowToAuthenticate));
}

absl::string_view View(grpc::string_ref ref) { return absl::string_view(ref.data(), ref.size()); }

}  // namespace

BearerTokenProcessor::BearerTokenProcessor(const std::string& token) : digest_(Digest(token)) {}

grpc::Status BearerTokenProcessor::Process(const InputMetadata& auth_metadata,
                                           grpc::AuthContext* /*context*/,
                                           OutputMetadata* consumed_auth_metadata,
                                           OutputMetadata* /*response_metadata*/) {
  // :path is the method the server routes the call to, so the exemption
  // cannot be had for any other method.
  auto path = auth_metadata.find(":path");
  if (path != auth_metadata.end() && View(path->second) == kExemptMethod) {
    return grpc::Status::OK;
  }
  const size_t entries = auth_metadata.count("authorization");
  if (entries == 0) return Unauthenticated("the call carries no 'authorization' metadata");
  if (entries > 1) return Unauthenticated("the call carries more than one 'authorization' entry");
  const absl::string_view value = View(auth_metadata.find("authorization")->second);
  constexpr absl::string_view kScheme = "bearer";
  if (value.size() < kScheme.size() ||
      !absl::EqualsIgnoreCase(value.substr(0, kScheme.size()), kScheme) ||
      (value.size() > kScheme.size() && value[kScheme.size()] != ' ')) {
    return Unauthenticated("the 'authorization' metadata is not of the form 'Bearer <token>'");
  }
  const absl::string_view presented =
      absl::StripAsciiWhitespace(value.substr(std::min(value.size(), kScheme.size() + 1)));
  if (presented.empty()) {
    return Unauthenticated("the 'authorization' metadata carries an empty bearer token");
  }
  const std::array<unsigned char, 32> digest = Digest(presented);
  if (CRYPTO_memcmp(digest.data(), digest_.data(), digest.size()) != 0) {
    return Unauthenticated("the bearer token is wrong");
  }
  consumed_auth_metadata->insert({"authorization", std::string(value)});
  return grpc::Status::OK;
}

}  // namespace gpumux
