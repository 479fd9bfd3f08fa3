#include "adjsnap/units.h"

#include <cctype>
#include <charconv>
#include <cstdio>

namespace adjsnap {

Result<uint64_t> ParseBytes(const std::string& text) {
  size_t i = 0;
  uint64_t value = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    uint64_t next = value * 10 + static_cast<uint64_t>(text[i] - '0');
    if (next / 10 != value) return Status::InvalidArgument("size '" + text + "' overflows");
    value = next;
    ++i;
  }
  if (i == 0) {
    return Status::InvalidArgument("size '" + text + "' must start with digits (e.g. 64M, 4GiB)");
  }
  std::string suffix = text.substr(i);
  int shift = 0;
  if (!suffix.empty()) {
    switch (std::toupper(static_cast<unsigned char>(suffix[0]))) {
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      case 'T': shift = 40; break;
      case 'B': shift = 0; break;
      default:
        return Status::InvalidArgument("size '" + text + "' has unknown suffix '" + suffix +
                                       "' (use K, M, G or T)");
    }
    std::string rest = suffix.substr(1);
    if (!(rest.empty() || rest == "B" || rest == "i" || rest == "iB") ||
        (suffix[0] == 'B' && !rest.empty()) || (suffix[0] == 'b')) {
      return Status::InvalidArgument("size '" + text + "' has unknown suffix '" + suffix + "'");
    }
  }
  if (shift && (value >> (64 - shift)) != 0) {
    return Status::InvalidArgument("size '" + text + "' overflows");
  }
  return value << shift;
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[u]);
  }
  return buf;
}

bool ParseCount(std::string_view text, uint64_t* value) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  // from_chars takes no sign or space for an unsigned type; out of range is an error.
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return false;
  *value = v;
  return true;
}

}  // namespace adjsnap
