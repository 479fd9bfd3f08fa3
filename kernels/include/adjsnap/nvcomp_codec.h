// The nvCOMP codecs (bitcomp, bitcomp-lossy, ans): what each takes, and Bitcomp on the CPU.
//
// libadjsnap applies these codecs on the solver's GPU, chunk by chunk, into a chunk frame
// (adjsnap/chunk_frame.h). nvCOMP also ships Bitcomp's coder for the host, with the same
// bitstream: CompressFrameOnHost and DecompressFrameOnHost use it, so a frame can be made and
// read where there is no GPU (tests, and `adjsnap dump` on a node without one). ANS has no host
// coder; its frames decode on a GPU only, and these functions say so.
//
// adjsnapd is built with nvCOMP when CMake finds it (ADJSNAP_WITH_NVCOMP; docs/install.md); without
// it every function here refuses the nvCOMP codecs by name (FAILED_PRECONDITION).
//
// Thread-safety: the functions are pure; concurrent calls on distinct buffers are safe.
#pragma once

#include <cstdint>

#include "adjsnap/chunk_frame.h"
#include "adjsnap/status.h"
#include "adjsnap/zfp_codec.h"

namespace adjsnap::compress {

// True when this build links nvCOMP.
bool NvcompBuiltIn();

// CheckGpuCodec (adjsnap/zfp_codec.h), then FAILED_PRECONDITION when this build has no nvCOMP.
Status ValidateGpuCodec(const CodecSpec& codec, const FieldSpec& field);

// Frames `field.bytes` bytes at `raw` in chunks of `chunk_bytes`, each compressed on the CPU
// with Bitcomp (lossless or lossy); a chunk that does not shrink is stored raw. `out` holds at
// least MaxFramedBytes(field.bytes, chunk_bytes), 8-byte aligned. Returns the frame's bytes.
Result<uint64_t> CompressFrameOnHost(const CodecSpec& codec, const FieldSpec& field,
                                     const void* raw, uint32_t chunk_bytes, void* out,
                                     uint64_t out_bytes);

// Decodes a frame (checked by ReadFrame, then each chunk's Bitcomp header against the frame's
// table) into `raw` (`field.bytes` bytes). DATA_LOSS naming the chunk when the bytes are not a
// well-formed frame of this field; FAILED_PRECONDITION for ans, which decodes on a GPU only.
Status DecompressFrameOnHost(const CodecSpec& codec, const FieldSpec& field, const void* frame,
                             uint64_t bytes, void* raw);

}  // namespace adjsnap::compress
