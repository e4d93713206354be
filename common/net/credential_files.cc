#include "common/net/credential_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gpumux/common/unique_fd.h"

namespace gpumux {
namespace {

absl::Status Refuse(absl::string_view what, const std::string& path, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat(what, " '", path, "': ", reason));
}

}  // namespace

absl::StatusOr<std::string> ReadCredentialFile(const std::string& path, absl::string_view what) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": the path is empty"));
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return Refuse(what, path, std::strerror(errno));
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return Refuse(what, path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return Refuse(what, path, "not a regular file");
  std::string text;
  char buffer[16384];
  for (;;) {
    const ssize_t n = read(fd.get(), buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Refuse(what, path, std::strerror(errno));
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
    if (text.size() > kMaxCredentialFileBytes) {
      return Refuse(what, path, absl::StrCat("larger than ", kMaxCredentialFileBytes, " bytes"));
    }
  }
  return text;
}

absl::StatusOr<std::string> ReadAuthTokenFile(const std::string& path, absl::string_view what) {
  absl::StatusOr<std::string> text = ReadCredentialFile(path, what);
  if (!text.ok()) return text.status();
  std::string token = *std::move(text);
  if (absl::EndsWith(token, "\n")) token.pop_back();
  if (absl::EndsWith(token, "\r")) token.pop_back();
  if (token.empty()) return Refuse(what, path, "the token is empty");
  if (token.size() > kMaxAuthTokenBytes) {
    return Refuse(what, path,
                  absl::StrCat("the token is ", token.size(), " bytes long; at most ",
                               kMaxAuthTokenBytes, " are allowed"));
  }
  for (size_t i = 0; i < token.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(token[i]);
    if (c < 0x21 || c > 0x7e) {
      return Refuse(
          what, path,
          absl::StrCat("byte ", i, " of the token is ",
                       c == ' ' || c == '\n' || c == '\r' || c == '\t' ? "white space"
                                                                       : "not printable ASCII",
                       " (a token is one line of printable ASCII without spaces)"));
    }
  }
  return token;
}

bool HoldsPemBlock(absl::string_view text, absl::string_view label) {
  for (size_t at = text.find("-----BEGIN "); at != absl::string_view::npos;
       at = text.find("-----BEGIN ", at + 1)) {
    const size_t end = text.find("-----", at + 11);
    if (end == absl::string_view::npos) return false;
    if (absl::EndsWith(text.substr(at + 11, end - at - 11), label)) return true;
  }
  return false;
}

}  // namespace gpumux
