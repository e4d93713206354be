#pragma once

// Unguessable identifiers (session secrets, share tokens, shm names) from the
// kernel's random source.

#include <string>

namespace gpumux {

// `bytes` random bytes from getrandom(2), as 2*bytes lowercase hex digits.
std::string RandomHex(int bytes);

// True when `text` is exactly `digits` lowercase hex digits.
bool IsLowerHex(const std::string& text, size_t digits);

}  // namespace gpumux
