// Seed corpora: each target writes its seeds, made with adjsnapd's own encoders (wire structs,
// protobuf serialization, the Catalog), when ADJSNAP_FUZZ_MAKE_CORPUS names a directory, then
// exits; tests/fuzz/make_corpus.sh runs them into tests/fuzz/corpus/<target>/.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace adjsnap::fuzz {

// The directory to write seeds to, or null when fuzzing.
inline const char* SeedDir() {
  const char* d = std::getenv("ADJSNAP_FUZZ_MAKE_CORPUS");
  return d && *d ? d : nullptr;
}

inline void WriteSeed(const std::string& name, const std::string& bytes) {
  std::ofstream f(std::string(SeedDir()) + "/" + name, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) {
    std::fprintf(stderr, "cannot write seed %s\n", name.c_str());
    std::exit(1);
  }
}

template <typename T>
std::string Raw(const T& v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof v);
}

inline std::string U16(size_t v) { return std::string{char(v & 0xff), char((v >> 8) & 0xff)}; }

}  // namespace adjsnap::fuzz
