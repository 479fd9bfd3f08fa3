// adjsnap-bench --codec: adjsnapd's zfp codec on the example solver's wavefield against one
// standalone zfp call (main.cc).
#include <fcntl.h>
#include <unistd.h>
#include <zfp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "acoustic_model.h"
#include "common.h"
#include "adjsnap/client.h"
#include "adjsnap/units.h"
#include "adjsnap/v1/control.grpc.pb.h"
#include "adjsnap/zfp_codec.h"

namespace adjsnap_bench {

// One standalone zfp call over the whole 2-D field (the reference); seconds of compress and
// decompress, best of `reps`.
bool StandaloneZfp(const adjsnap::compress::CodecSpec& c, std::vector<float>& field, int nx, int ny,
                   double* compress_s, double* decompress_s) {
  zfp_field* f = zfp_field_2d(field.data(), zfp_type_float, nx, ny);
  zfp_stream* z = zfp_stream_open(nullptr);
  switch (c.codec) {
    case adjsnap::v1::CODEC_ZFP_REVERSIBLE:
      zfp_stream_set_reversible(z);
      break;
    case adjsnap::v1::CODEC_ZFP_RATE:
      zfp_stream_set_rate(z, c.param, zfp_type_float, 2, zfp_false);
      break;
    case adjsnap::v1::CODEC_ZFP_PRECISION:
      zfp_stream_set_precision(z, static_cast<uint>(c.param));
      break;
    default:
      zfp_stream_set_accuracy(z, c.param);
      break;
  }
  std::vector<char> buf(zfp_stream_maximum_size(z, f));
  bitstream* bits = stream_open(buf.data(), buf.size());
  zfp_stream_set_bit_stream(z, bits);
  size_t n = 0;
  *compress_s = BestSeconds(3, [&] {
    zfp_stream_rewind(z);
    n = zfp_compress(z, f);
  });
  std::vector<float> out(field.size());
  zfp_field_set_pointer(f, out.data());
  *decompress_s = BestSeconds(3, [&] {
    zfp_stream_rewind(z);
    zfp_decompress(z, f);
  });
  stream_close(bits);
  zfp_stream_close(z);
  zfp_field_free(f);
  return n > 0;
}

int Codec(const Args& a) {
  constexpr int kN = 2048, kSteps = 1500;
  std::vector<float> field = acoustic::Wavefield(kN, kN, kSteps);
  float peak = 0;
  for (float v : field) peak = std::max(peak, std::fabs(v));
  int workers = a.workers ? a.workers : adjsnap::compress::DefaultCompressThreads();
  adjsnap::compress::CompressPool pool(workers);
  adjsnap::compress::FieldSpec spec{adjsnap::v1::DTYPE_FLOAT32, {kN, kN}, field.size() * 4};
  struct Mode {
    adjsnap::compress::CodecSpec codec;
  };
  const Mode modes[] = {{{adjsnap::v1::CODEC_ZFP_REVERSIBLE, 0}},
                        {{adjsnap::v1::CODEC_ZFP_RATE, 8}},
                        {{adjsnap::v1::CODEC_ZFP_PRECISION, 16}},
                        {{adjsnap::v1::CODEC_ZFP_ACCURACY, 1e-5 * peak}}};
  double raw = static_cast<double>(spec.bytes);
  if (!a.json) {
    std::printf(
        "adjsnap-bench --codec: acoustic wavefield %dx%d float32 (%s) after %d steps, %d "
        "worker(s)\n",
        kN, kN, adjsnap::FormatBytes(spec.bytes).c_str(), kSteps, workers);
    std::printf("%-26s %6s %9s %9s %9s %7s %7s %9s %9s %9s %7s\n", "mode", "ratio", "zfp GB/s",
                "1 wkr", "all wkrs", "1/zfp", "all/zfp", "unzfp", "1 wkr", "all wkrs", "1/zfp");
  } else {
    std::printf("[");
  }
  bool first = true;
  for (const Mode& m : modes) {
    auto max = adjsnap::compress::MaxCompressedBytes(m.codec, spec);
    if (!max.ok()) {
      std::fprintf(stderr, "adjsnap-bench --codec: %s\n", max.status().ToString().c_str());
      return 1;
    }
    std::vector<uint64_t> out(*max / 8 + 1);
    std::vector<float> back(field.size());
    uint64_t stored = 0;
    auto time_compress = [&](adjsnap::compress::CompressPool* p) {
      return BestSeconds(3, [&] {
        stored = *adjsnap::compress::Compress(m.codec, spec, field.data(), out.data(), *max, p);
      });
    };
    auto time_decompress = [&](adjsnap::compress::CompressPool* p) {
      return BestSeconds(3, [&] {
        (void)adjsnap::compress::Decompress(m.codec, spec, out.data(), stored, back.data(), p);
      });
    };
    double c1 = time_compress(nullptr), call = time_compress(&pool);
    double d1 = time_decompress(nullptr), dall = time_decompress(&pool);
    double zc = 0, zd = 0;
    if (!StandaloneZfp(m.codec, field, kN, kN, &zc, &zd)) {
      std::fprintf(stderr, "adjsnap-bench --codec: standalone zfp failed\n");
      return 1;
    }
    std::string name = adjsnap::compress::CodecName(m.codec);
    auto gbs = [&](double s) { return raw / s / 1e9; };
    if (a.json) {
      std::printf(
          "%s\n {\"mode\": \"%s\", \"ratio\": %.3f, \"zfp_compress_gbs\": %.3f, "
          "\"compress_1_worker_gbs\": %.3f, \"compress_all_workers_gbs\": %.3f, "
          "\"compress_1_worker_vs_zfp\": %.3f, \"zfp_decompress_gbs\": %.3f, "
          "\"decompress_1_worker_gbs\": %.3f, \"decompress_all_workers_gbs\": %.3f, "
          "\"decompress_1_worker_vs_zfp\": %.3f, \"workers\": %d}",
          first ? "" : ",", name.c_str(), raw / stored, gbs(zc), gbs(c1), gbs(call), zc / c1,
          gbs(zd), gbs(d1), gbs(dall), zd / d1, workers);
    } else {
      std::printf("%-26s %5.1fx %9.3f %9.3f %9.3f %7.2f %7.2f %9.3f %9.3f %9.3f %7.2f\n",
                  name.c_str(), raw / stored, gbs(zc), gbs(c1), gbs(call), zc / c1, zc / call,
                  gbs(zd), gbs(d1), gbs(dall), zd / d1);
    }
    first = false;
  }
  if (a.json) std::printf("\n]\n");
  return 0;
}

}  // namespace adjsnap_bench
