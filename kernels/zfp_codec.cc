#include "adjsnap/zfp_codec.h"

#include <zfp.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <memory>

namespace adjsnap::compress {
namespace {

constexpr uint32_t kMagic = 0x31465a53;  // "SZF1"

bool IsFloat(v1::Dtype d) { return d == v1::DTYPE_FLOAT32 || d == v1::DTYPE_FLOAT64; }

zfp_type ZfpType(v1::Dtype d) {
  switch (d) {
    case v1::DTYPE_FLOAT32: return zfp_type_float;
    case v1::DTYPE_FLOAT64: return zfp_type_double;
    case v1::DTYPE_INT32: return zfp_type_int32;
    case v1::DTYPE_INT64: return zfp_type_int64;
    default: return zfp_type_none;
  }
}

uint64_t ElementBytes(v1::Dtype d) {
  return d == v1::DTYPE_FLOAT64 || d == v1::DTYPE_INT64 ? 8 : 4;
}

// The field as zfp dimensions, fastest first (zfp's nx), at most 4: leading C-order
// dimensions beyond the fourth fold into the slowest.
std::vector<size_t> ZfpDims(const FieldSpec& f) {
  uint64_t elements = f.bytes / ElementBytes(f.dtype);
  if (f.shape.empty()) return {static_cast<size_t>(elements)};
  std::vector<size_t> dims;
  for (auto it = f.shape.rbegin(); it != f.shape.rend(); ++it) dims.push_back(*it);
  while (dims.size() > 4) {
    dims[dims.size() - 2] *= dims.back();
    dims.pop_back();
  }
  return dims;
}

// Slab i covers slowest-dimension rows [first, first + rows).
struct Slab {
  size_t first;
  size_t rows;
};

std::vector<Slab> Slabs(const FieldSpec& f, const std::vector<size_t>& dims) {
  size_t slowest = dims.back();
  uint64_t row_bytes = f.bytes / slowest;
  size_t rows = std::max<uint64_t>(4, kSlabBytes / std::max<uint64_t>(row_bytes, 1) / 4 * 4);
  std::vector<Slab> slabs;
  for (size_t first = 0; first < slowest; first += rows) {
    slabs.push_back({first, std::min(rows, slowest - first)});
  }
  return slabs;
}

// A zfp field over `rows` slowest rows of the array at `data`; with no `data`, a field of the
// slab's shape only (for sizes: an offset from a null pointer is undefined behaviour).
zfp_field* SlabField(const FieldSpec& f, const std::vector<size_t>& dims, const Slab& s,
                     const void* data) {
  uint64_t row_bytes = f.bytes / dims.back();
  void* p = data ? const_cast<char*>(static_cast<const char*>(data)) + s.first * row_bytes
                 : nullptr;
  zfp_type t = ZfpType(f.dtype);
  switch (dims.size()) {
    case 1: return zfp_field_1d(p, t, s.rows);
    case 2: return zfp_field_2d(p, t, dims[0], s.rows);
    case 3: return zfp_field_3d(p, t, dims[0], dims[1], s.rows);
    default: return zfp_field_4d(p, t, dims[0], dims[1], dims[2], s.rows);
  }
}

struct StreamDeleter {
  void operator()(zfp_stream* z) const { zfp_stream_close(z); }
};
struct FieldDeleter {
  void operator()(zfp_field* f) const { zfp_field_free(f); }
};
struct BitstreamDeleter {
  void operator()(bitstream* b) const { stream_close(b); }
};
using StreamPtr = std::unique_ptr<zfp_stream, StreamDeleter>;
using FieldPtr = std::unique_ptr<zfp_field, FieldDeleter>;
using BitstreamPtr = std::unique_ptr<bitstream, BitstreamDeleter>;

StreamPtr OpenStream(const CodecSpec& c, const FieldSpec& f, size_t dims) {
  StreamPtr z(zfp_stream_open(nullptr));
  switch (c.codec) {
    case v1::CODEC_ZFP_REVERSIBLE: zfp_stream_set_reversible(z.get()); break;
    case v1::CODEC_ZFP_RATE:
      zfp_stream_set_rate(z.get(), c.param, ZfpType(f.dtype), static_cast<uint>(dims), zfp_false);
      break;
    case v1::CODEC_ZFP_PRECISION:
      zfp_stream_set_precision(z.get(), static_cast<uint>(c.param));
      break;
    default: zfp_stream_set_accuracy(z.get(), c.param); break;
  }
  return z;
}

uint64_t HeaderBytes(size_t slabs) { return 8 + 8 * slabs; }

}  // namespace

bool IsGpuCodec(v1::Codec codec) {
  return codec == v1::CODEC_BITCOMP || codec == v1::CODEC_BITCOMP_LOSSY || codec == v1::CODEC_ANS;
}

double BitcompDelta(double bound) { return 2 * bound; }

Status CheckGpuCodec(const CodecSpec& c, const FieldSpec& f) {
  std::string name = CodecName(c);
  if (!IsGpuCodec(c.codec)) return Status::InvalidArgument(name + " is not an nvCOMP codec");
  if (c.codec != v1::CODEC_BITCOMP_LOSSY) {
    if (c.param != 0) {
      return Status::InvalidArgument(name + " is lossless and takes no parameter, got " +
                                     std::to_string(c.param));
    }
    return Status::Ok();
  }
  if (!IsFloat(f.dtype)) {
    return Status::InvalidArgument(name + " is lossy and needs float32 or float64 data, not " +
                                   v1::Dtype_Name(f.dtype) + "; use bitcomp for it");
  }
  double smallest = f.dtype == v1::DTYPE_FLOAT32 ? FLT_MIN : DBL_MIN;
  double largest = f.dtype == v1::DTYPE_FLOAT32 ? FLT_MAX : DBL_MAX;
  if (!std::isfinite(c.param) || !(c.param > 0) || BitcompDelta(c.param) < smallest ||
      BitcompDelta(c.param) > largest) {
    return Status::InvalidArgument(name + ": the error bound must be finite and > 0, with " +
                                   "twice it a normal " + v1::Dtype_Name(f.dtype) + " number");
  }
  return Status::Ok();
}

std::string CodecName(const CodecSpec& c) {
  char param[32];
  std::snprintf(param, sizeof param, " %g", c.param);
  switch (c.codec) {
    case v1::CODEC_NONE: return "none";
    case v1::CODEC_ZFP_REVERSIBLE: return "zfp-reversible";
    case v1::CODEC_ZFP_RATE: return std::string("zfp-rate") + param;
    case v1::CODEC_ZFP_PRECISION: return std::string("zfp-precision") + param;
    case v1::CODEC_ZFP_ACCURACY: return std::string("zfp-accuracy") + param;
    case v1::CODEC_BITCOMP:
      return "bitcomp";
    case v1::CODEC_BITCOMP_LOSSY:
      return std::string("bitcomp-lossy") + param;
    case v1::CODEC_ANS:
      return "ans";
    default: return "codec " + std::to_string(c.codec);
  }
}

Status Validate(const CodecSpec& c, const FieldSpec& f) {
  if (c.codec == v1::CODEC_NONE) return Status::Ok();
  if (!v1::Codec_IsValid(c.codec)) {
    return Status::InvalidArgument("unknown codec " + std::to_string(c.codec));
  }
  std::string name = CodecName(c);
  if (IsGpuCodec(c.codec)) {
    return Status::InvalidArgument(name + " compresses on the GPU (nvCOMP), not with zfp");
  }
  if (ZfpType(f.dtype) == zfp_type_none) {
    return Status::InvalidArgument(name + " needs dtype float32, float64, int32 or int64, not " +
                                   v1::Dtype_Name(f.dtype));
  }
  if (c.codec != v1::CODEC_ZFP_REVERSIBLE && !IsFloat(f.dtype)) {
    return Status::InvalidArgument(name + " is lossy and needs float32 or float64 data; use "
                                   "zfp-reversible for " + v1::Dtype_Name(f.dtype));
  }
  bool ok = true;
  if (c.codec == v1::CODEC_ZFP_RATE) ok = c.param > 0 && c.param <= 64;
  if (c.codec == v1::CODEC_ZFP_PRECISION) ok = c.param >= 1 && c.param <= 64 &&
                                               c.param == std::floor(c.param);
  if (c.codec == v1::CODEC_ZFP_ACCURACY) ok = c.param > 0 && std::isfinite(c.param);
  if (!ok) {
    return Status::InvalidArgument(name + ": parameter out of range (rate: bits per value in "
                                   "(0, 64]; precision: integer bit planes 1..64; accuracy: "
                                   "a tolerance > 0)");
  }
  return Status::Ok();
}

Result<uint64_t> MaxCompressedBytes(const CodecSpec& c, const FieldSpec& f) {
  ADJSNAP_RETURN_IF_ERROR(Validate(c, f));
  std::vector<size_t> dims = ZfpDims(f);
  std::vector<Slab> slabs = Slabs(f, dims);
  StreamPtr z = OpenStream(c, f, dims.size());
  uint64_t total = HeaderBytes(slabs.size());
  for (const Slab& s : slabs) {
    FieldPtr field(SlabField(f, dims, s, nullptr));
    total += zfp_stream_maximum_size(z.get(), field.get());
  }
  return total;
}

Result<uint64_t> Compress(const CodecSpec& c, const FieldSpec& f, const void* raw, void* out,
                          uint64_t out_bytes, CompressPool* pool) {
  ADJSNAP_RETURN_IF_ERROR(Validate(c, f));
  std::vector<size_t> dims = ZfpDims(f);
  std::vector<Slab> slabs = Slabs(f, dims);
  // Each slab is coded into its own worst-case region, then the regions are packed.
  std::vector<uint64_t> region(slabs.size() + 1, HeaderBytes(slabs.size()));
  {
    StreamPtr z = OpenStream(c, f, dims.size());
    for (size_t i = 0; i < slabs.size(); ++i) {
      FieldPtr field(SlabField(f, dims, slabs[i], nullptr));
      region[i + 1] = region[i] + zfp_stream_maximum_size(z.get(), field.get());
    }
  }
  if (out_bytes < region.back()) {
    return Status::InvalidArgument("compression buffer of " + std::to_string(out_bytes) +
                                   " bytes; MaxCompressedBytes is " +
                                   std::to_string(region.back()));
  }
  char* o = static_cast<char*>(out);
  std::vector<uint64_t> sizes(slabs.size(), 0);
  auto code = [&](size_t i) {
    StreamPtr z = OpenStream(c, f, dims.size());
    FieldPtr field(SlabField(f, dims, slabs[i], raw));
    BitstreamPtr bits(stream_open(o + region[i], region[i + 1] - region[i]));
    zfp_stream_set_bit_stream(z.get(), bits.get());
    zfp_stream_rewind(z.get());
    sizes[i] = zfp_compress(z.get(), field.get());
  };
  if (pool) {
    pool->ParallelFor(slabs.size(), code);
  } else {
    for (size_t i = 0; i < slabs.size(); ++i) code(i);
  }
  uint32_t head[2] = {kMagic, static_cast<uint32_t>(slabs.size())};
  std::memcpy(o, head, sizeof head);
  uint64_t at = HeaderBytes(slabs.size());
  for (size_t i = 0; i < slabs.size(); ++i) {
    if (sizes[i] == 0) return Status::Internal("zfp_compress failed on slab " + std::to_string(i));
    std::memcpy(o + 8 + 8 * i, &sizes[i], 8);
    std::memmove(o + at, o + region[i], sizes[i]);  // regions only move down
    at += sizes[i];
  }
  return at;
}

Status Decompress(const CodecSpec& c, const FieldSpec& f, const void* in, uint64_t in_bytes,
                  void* raw, CompressPool* pool) {
  ADJSNAP_RETURN_IF_ERROR(Validate(c, f));
  std::vector<size_t> dims = ZfpDims(f);
  std::vector<Slab> slabs = Slabs(f, dims);
  const char* p = static_cast<const char*>(in);
  uint32_t head[2] = {};
  if (in_bytes < 8) return Status::DataLoss("compressed snapshot shorter than its header");
  std::memcpy(head, p, sizeof head);
  if (head[0] != kMagic || head[1] != slabs.size() || in_bytes < HeaderBytes(slabs.size())) {
    return Status::DataLoss("compressed snapshot header does not match the run's field (" +
                            std::to_string(head[1]) + " slabs, expected " +
                            std::to_string(slabs.size()) + ")");
  }
  std::vector<uint64_t> offset(slabs.size() + 1, HeaderBytes(slabs.size()));
  for (size_t i = 0; i < slabs.size(); ++i) {
    uint64_t n = 0;
    std::memcpy(&n, p + 8 + 8 * i, 8);
    if (n == 0 || n > in_bytes - offset[i]) {
      return Status::DataLoss("compressed slab " + std::to_string(i) + " overruns the snapshot");
    }
    offset[i + 1] = offset[i] + n;
  }
  std::vector<char> failed(slabs.size(), 0);
  auto decode = [&](size_t i) {
    StreamPtr z = OpenStream(c, f, dims.size());
    FieldPtr field(SlabField(f, dims, slabs[i], raw));
    BitstreamPtr bits(stream_open(const_cast<char*>(p) + offset[i], offset[i + 1] - offset[i]));
    zfp_stream_set_bit_stream(z.get(), bits.get());
    zfp_stream_rewind(z.get());
    failed[i] = zfp_decompress(z.get(), field.get()) == 0;
  };
  if (pool) {
    pool->ParallelFor(slabs.size(), decode);
  } else {
    for (size_t i = 0; i < slabs.size(); ++i) decode(i);
  }
  for (size_t i = 0; i < slabs.size(); ++i) {
    if (failed[i]) return Status::DataLoss("zfp could not decode slab " + std::to_string(i));
  }
  return Status::Ok();
}

}  // namespace adjsnap::compress
