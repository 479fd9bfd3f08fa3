// Byte sizes as people write them ("64M", "4GiB", "1073741824") and back.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "adjsnap/status.h"

namespace adjsnap {

// Accepts an integer with an optional binary suffix K, M, G, T (with optional "i"/"iB"/"B").
Result<uint64_t> ParseBytes(const std::string& text);
// "64.0 MiB"
std::string FormatBytes(uint64_t bytes);
// A count as people write it on a command line: decimal digits only (no sign, no space, no
// suffix) within uint64_t. False otherwise: "-3" is refused, not wrapped around.
bool ParseCount(std::string_view text, uint64_t* value);

}  // namespace adjsnap
