#include "adjsnap/nvcomp_codec.h"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#if ADJSNAP_WITH_NVCOMP
#include <nvcomp/native/bitcomp.h>
#endif

namespace adjsnap::compress {

#if ADJSNAP_WITH_NVCOMP
namespace {

struct PlanDeleter {
  void operator()(bitcompHandle_t h) const { bitcompDestroyPlan(h); }
};
using Plan = std::unique_ptr<std::remove_pointer_t<bitcompHandle_t>, PlanDeleter>;

bitcompDataType_t BitcompType(const CodecSpec& c, v1::Dtype d) {
  bool wide = d == v1::DTYPE_FLOAT64 || d == v1::DTYPE_INT64;
  if (c.codec == v1::CODEC_BITCOMP_LOSSY) return wide ? BITCOMP_FP64_DATA : BITCOMP_FP32_DATA;
  if (d == v1::DTYPE_FLOAT32 || d == v1::DTYPE_INT32) return BITCOMP_UNSIGNED_32BIT;
  return wide ? BITCOMP_UNSIGNED_64BIT : BITCOMP_UNSIGNED_8BIT;
}

bitcompMode_t BitcompMode(const CodecSpec& c) {
  return c.codec == v1::CODEC_BITCOMP_LOSSY ? BITCOMP_LOSSY_FP_TO_SIGNED : BITCOMP_LOSSLESS;
}

Status FromBitcomp(bitcompResult_t r, const std::string& what) {
  if (r == BITCOMP_SUCCESS) return Status::Ok();
  return Status::Internal(what + ": nvCOMP bitcomp error " + std::to_string(static_cast<int>(r)));
}

Status HostOnly(const CodecSpec& c) {
  if (c.codec == v1::CODEC_ANS) {
    return Status::FailedPrecondition(
        "ans has no CPU coder in nvCOMP: its steps compress and decode on a GPU only");
  }
  return Status::Ok();
}

// Each chunk is coded from and to 8-byte aligned scratch, so nvCOMP reads nothing past a chunk's
// own bytes whatever a damaged frame says (its decoder trusts its input).
std::vector<uint64_t> Scratch(uint64_t bytes) { return std::vector<uint64_t>(bytes / 8 + 1); }

}  // namespace

bool NvcompBuiltIn() { return true; }

Status ValidateGpuCodec(const CodecSpec& c, const FieldSpec& f) { return CheckGpuCodec(c, f); }

Result<uint64_t> CompressFrameOnHost(const CodecSpec& c, const FieldSpec& f, const void* raw,
                                     uint32_t chunk_bytes, void* out, uint64_t out_bytes) {
  ADJSNAP_RETURN_IF_ERROR(ValidateGpuCodec(c, f));
  ADJSNAP_RETURN_IF_ERROR(HostOnly(c));
  ADJSNAP_RETURN_IF_ERROR(CheckChunking(f.bytes, chunk_bytes));
  if (out_bytes < MaxFramedBytes(f.bytes, chunk_bytes)) {
    return Status::InvalidArgument(
        "a frame buffer of " + std::to_string(out_bytes) + " bytes, under the " +
        std::to_string(MaxFramedBytes(f.bytes, chunk_bytes)) + " a frame of this step may need");
  }
  uint32_t chunks = ChunkCount(f.bytes, chunk_bytes);
  std::vector<uint64_t> compressed = Scratch(bitcompMaxBuflen(chunk_bytes));
  std::vector<std::vector<char>> coded(chunks);
  std::vector<uint64_t> stored(chunks);
  const char* in = static_cast<const char*>(raw);
  for (uint32_t i = 0; i < chunks; ++i) {
    uint64_t n = std::min<uint64_t>(chunk_bytes, f.bytes - uint64_t{i} * chunk_bytes);
    bitcompHandle_t h = nullptr;
    ADJSNAP_RETURN_IF_ERROR(FromBitcomp(
        bitcompCreatePlan(&h, n, BitcompType(c, f.dtype), BitcompMode(c), BITCOMP_DEFAULT_ALGO),
        "bitcompCreatePlan"));
    Plan plan(h);
    std::vector<uint64_t> input = Scratch(n);  // aligned for the dtype
    std::memcpy(input.data(), in + uint64_t{i} * chunk_bytes, n);
    bitcompResult_t r;
    if (c.codec == v1::CODEC_BITCOMP) {
      r = bitcompHostCompressLossless(h, input.data(), compressed.data());
    } else if (f.dtype == v1::DTYPE_FLOAT32) {
      r = bitcompHostCompressLossy_fp32(h, reinterpret_cast<const float*>(input.data()),
                                        compressed.data(),
                                        static_cast<float>(BitcompDelta(c.param)));
    } else {
      r = bitcompHostCompressLossy_fp64(h, reinterpret_cast<const double*>(input.data()),
                                        compressed.data(), BitcompDelta(c.param));
    }
    ADJSNAP_RETURN_IF_ERROR(FromBitcomp(r, "bitcomp compress of chunk " + std::to_string(i)));
    size_t size = 0;
    ADJSNAP_RETURN_IF_ERROR(FromBitcomp(bitcompGetCompressedSize(compressed.data(), &size),
                                      "bitcompGetCompressedSize"));
    stored[i] = size;
    if (size < n) {
      coded[i].assign(reinterpret_cast<const char*>(compressed.data()),
                      reinterpret_cast<const char*>(compressed.data()) + size);
    }
  }
  ADJSNAP_ASSIGN_OR_RETURN(FrameLayout layout,
                         LayOut(static_cast<uint16_t>(c.codec), f.bytes, chunk_bytes, stored));
  char* frame = static_cast<char*>(out);
  WriteFrameHead(layout, frame);
  for (uint32_t i = 0; i < chunks; ++i) {
    const FrameLayout::Chunk& k = layout.chunks[i];
    std::memcpy(frame + k.offset, k.stored_raw ? in + uint64_t{i} * chunk_bytes : coded[i].data(),
                k.stored_bytes);
  }
  ZeroPadding(layout, frame);
  return layout.framed_bytes;
}

Status DecompressFrameOnHost(const CodecSpec& c, const FieldSpec& f, const void* frame,
                             uint64_t bytes, void* raw) {
  ADJSNAP_RETURN_IF_ERROR(ValidateGpuCodec(c, f));
  ADJSNAP_RETURN_IF_ERROR(HostOnly(c));
  ADJSNAP_ASSIGN_OR_RETURN(FrameLayout layout,
                         ReadFrame(frame, bytes, static_cast<uint16_t>(c.codec), f.bytes));
  const char* in = static_cast<const char*>(frame);
  char* to = static_cast<char*>(raw);
  uint64_t at = 0;
  std::vector<uint64_t> output = Scratch(layout.header.chunk_bytes);
  for (uint32_t i = 0; i < layout.chunks.size(); ++i) {
    const FrameLayout::Chunk& k = layout.chunks[i];
    std::string chunk = "compressed frame: chunk " + std::to_string(i) + " of " +
                        std::to_string(layout.chunks.size());
    if (k.stored_raw) {
      std::memcpy(to + at, in + k.offset, k.raw_bytes);
      at += k.raw_bytes;
      continue;
    }
    // Bitcomp's header is read from a zero-padded copy: a short chunk reads zeros, not past.
    std::vector<uint64_t> input = Scratch(std::max<uint64_t>(k.stored_bytes, 256));
    std::memcpy(input.data(), in + k.offset, k.stored_bytes);
    size_t compressed = k.stored_bytes, uncompressed = 0;  // in: the bytes it may read
    bitcompDataType_t type;
    bitcompMode_t mode;
    bitcompAlgorithm_t algo;
    if (bitcompGetCompressedInfo(input.data(), &compressed, &uncompressed, &type, &mode, &algo) !=
            BITCOMP_SUCCESS ||
        compressed != k.stored_bytes || uncompressed != k.raw_bytes ||
        type != BitcompType(c, f.dtype) || mode != BitcompMode(c)) {
      return Status::DataLoss(
          chunk + ": its Bitcomp header does not match the frame (" + std::to_string(compressed) +
          " bytes decoding to " + std::to_string(uncompressed) + ", the frame says " +
          std::to_string(k.stored_bytes) + " to " + std::to_string(k.raw_bytes) + ")");
    }
    bitcompHandle_t h = nullptr;
    if (bitcompCreatePlanFromCompressedData(&h, input.data()) != BITCOMP_SUCCESS) {
      return Status::DataLoss(chunk + ": Bitcomp cannot plan its decoding");
    }
    Plan plan(h);
    if (bitcompHostUncompress(h, input.data(), output.data()) != BITCOMP_SUCCESS) {
      return Status::DataLoss(chunk + ": Bitcomp cannot decode it");
    }
    std::memcpy(to + at, output.data(), k.raw_bytes);
    at += k.raw_bytes;
  }
  return Status::Ok();
}

#else  // !ADJSNAP_WITH_NVCOMP

namespace {
Status NotBuiltIn(const CodecSpec& c) {
  return Status::FailedPrecondition(CodecName(c) +
                                    " needs nvCOMP, and this adjsnapd was built without it "
                                    "(docs/install.md, \"nvCOMP\")");
}
}  // namespace

bool NvcompBuiltIn() { return false; }

Status ValidateGpuCodec(const CodecSpec& c, const FieldSpec& f) {
  ADJSNAP_RETURN_IF_ERROR(CheckGpuCodec(c, f));
  return NotBuiltIn(c);
}

Result<uint64_t> CompressFrameOnHost(const CodecSpec& c, const FieldSpec&, const void*, uint32_t,
                                     void*, uint64_t) {
  return NotBuiltIn(c);
}

Status DecompressFrameOnHost(const CodecSpec& c, const FieldSpec&, const void*, uint64_t, void*) {
  return NotBuiltIn(c);
}

#endif

}  // namespace adjsnap::compress
