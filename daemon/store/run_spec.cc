// What a run's spec may say (ValidateRunSpec) and the sizes of its dtypes.
#include "store/store.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "log.h"
#include "adjsnap/checksum.h"
#include "adjsnap/layers.h"
#include "adjsnap/units.h"
#include "tiering/placement.h"
#include "tiering/snapshot_io.h"

namespace adjsnap {

namespace {

constexpr size_t kMaxRunName = 128;

}  // namespace

Status CheckSpoolClass(const v1::RunSpec& spec, const DiskTier* disk) {
  if (spec.spool_class().empty()) return Status::Ok();
  const std::string& name = spec.name();
  const bool shared = spec.spool_class() == "shared";
  if (!UsesDisk(spec.layers()) || disk == nullptr) {
    return Status::InvalidArgument("run '" + name + "': spool_class " + spec.spool_class() +
                                   " places steps on disk, and layers " +
                                   LayersName(spec.layers()) + " have no Disk layer");
  }
  if (disk->budget(shared ? SpoolClass::kShared : SpoolClass::kLocal) == 0) {
    return Status::FailedPrecondition(
        "run '" + name + "': spool_class " + spec.spool_class() + ", and this adjsnapd has no " +
        (shared ? "shared spools (shared_spool_dirs)" : "local spools (spool_dirs)") +
        "; leave spool_class empty or start adjsnapd with them");
  }
  return Status::Ok();
}

uint64_t DtypeBytes(v1::Dtype dtype) {
  switch (dtype) {
    case v1::DTYPE_FLOAT32:
    case v1::DTYPE_INT32:
      return 4;
    case v1::DTYPE_FLOAT64:
    case v1::DTYPE_INT64:
      return 8;
    default:
      return 1;
  }
}

Status ValidateRunSpec(const v1::RunSpec& spec) {
  const std::string& name = spec.name();
  if (name.empty() || name.size() > kMaxRunName) {
    return Status::InvalidArgument("run name must be 1 to 128 characters, got " +
                                   std::to_string(name.size()));
  }
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) {
      // The name is not echoed: it may hold control characters.
      return Status::InvalidArgument("run name may contain only letters, digits, '.', '_' and "
                                     "'-' (found byte " +
                                     std::to_string(static_cast<unsigned char>(c)) + ")");
    }
  }
  // Names become file names (dump) and command-line arguments (adjsnap rm NAME): '.', '..',
  // hidden names and option-like names such as "-rf" are refused.
  if (name[0] == '.' || name[0] == '-') {
    return Status::InvalidArgument("run name '" + name +
                                   "' must begin with a letter, a digit or '_'");
  }
  if (spec.job().size() > 64) {
    return Status::InvalidArgument("run '" + name + "': job must be at most 64 characters, got " +
                                   std::to_string(spec.job().size()));
  }
  if (!v1::Layers_IsValid(spec.layers())) {
    return Status::InvalidArgument("run '" + name + "': unknown layers " +
                                   std::to_string(spec.layers()));
  }
  if (std::string why = spec.overwrite() ? OverwriteWithDeviceLayers(name, spec.layers()) : "";
      !why.empty()) {
    return Status::InvalidArgument(why);
  }
  if (!spec.spool_class().empty() && spec.spool_class() != "local" &&
      spec.spool_class() != "shared") {
    return Status::InvalidArgument("run '" + name + "': spool_class must be \"\", \"local\" or "
                                   "\"shared\", got a string of " +
                                   std::to_string(spec.spool_class().size()) + " bytes");
  }
  if (!v1::Dtype_IsValid(spec.dtype())) {
    return Status::InvalidArgument("run '" + name + "': unknown dtype " +
                                   std::to_string(spec.dtype()));
  }
  if (!v1::Codec_IsValid(spec.codec())) {
    return Status::InvalidArgument("run '" + name + "': unknown codec " +
                                   std::to_string(spec.codec()));
  }
  if (!v1::CompressWhen_IsValid(spec.compress_when())) {
    return Status::InvalidArgument("run '" + name + "': unknown compress_when " +
                                   std::to_string(spec.compress_when()));
  }
  if (spec.bytes_per_step() == 0) {
    return Status::InvalidArgument("run '" + name + "': bytes_per_step must be > 0");
  }
  if (spec.bytes_per_step() % DtypeBytes(spec.dtype()) != 0) {
    return Status::InvalidArgument("run '" + name + "': bytes_per_step " +
                                   std::to_string(spec.bytes_per_step()) +
                                   " is not a multiple of the " + v1::Dtype_Name(spec.dtype()) +
                                   " element size");
  }
  // Each product is checked against 2^64 before the next, so no count wraps.
  constexpr unsigned __int128 kU64Max = UINT64_MAX;
  if (static_cast<unsigned __int128>(spec.steps()) * spec.bytes_per_step() > kU64Max) {
    return Status::InvalidArgument("run '" + name + "': " + std::to_string(spec.steps()) +
                                   " steps of " + std::to_string(spec.bytes_per_step()) +
                                   " bytes is more than 2^64 bytes");
  }
  if (spec.shape_size() > 0) {
    unsigned __int128 elements = 1;
    for (uint64_t d : spec.shape()) {
      elements *= d;
      if (elements > kU64Max) {
        return Status::InvalidArgument("run '" + name + "': shape has more than 2^64 elements");
      }
    }
    unsigned __int128 bytes = elements * DtypeBytes(spec.dtype());
    if (bytes > kU64Max) {
      return Status::InvalidArgument("run '" + name + "': shape holds more than 2^64 bytes");
    }
    if (bytes != spec.bytes_per_step()) {
      return Status::InvalidArgument("run '" + name + "': shape holds " +
                                     std::to_string(static_cast<uint64_t>(bytes)) +
                                     " bytes of " + v1::Dtype_Name(spec.dtype()) +
                                     " but bytes_per_step is " +
                                     std::to_string(spec.bytes_per_step()));
    }
  }
  return Status::Ok();
}

}  // namespace adjsnap
