// Text helpers the configuration's files share (config.cc, options.cc).
#pragma once

#include <string>

namespace adjsnap::config_text {

// `s` without leading and trailing blanks (spaces, tabs, CR).
std::string Trim(const std::string& s);
// `s` as a TOML basic string, quotes included.
std::string Quoted(const std::string& s);

}  // namespace adjsnap::config_text
