#include "metrics/metrics.h"

#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

#include "metrics/latency_histogram.h"

namespace adjsnap {
namespace {

v1::StatsResponse Sample() {
  v1::StatsResponse s;
  s.set_version("0.1.0");
  s.set_wire_version(2);
  s.set_uptime_ms(61500);
  s.set_sessions(2);
  s.set_runs(3);
  s.set_pushes(40);
  s.set_refused_pushes(1);
  s.set_demand_reads(5);
  s.set_prefetch_hits(7);
  v1::TierStats* host = s.add_tiers();
  host->set_tier(v1::TIER_HOST);
  host->set_budget_bytes(1 << 30);
  host->set_used_bytes(1234);
  host->set_peak_used_bytes(5678);
  host->set_resident_bytes(4321);
  v1::TierStats* disk = s.add_tiers();
  disk->set_tier(v1::TIER_DISK);
  disk->set_used_bytes(1000);
  disk->set_raw_bytes(3000);
  disk->set_write_bytes(4096);
  // Pushes of 0.3 ms, 0.3 ms and 2 s, bucketed as LatencyHistogram does.
  LatencyHistogram pushes;
  for (double seconds : {3e-4, 3e-4, 2.0}) pushes.Observe(seconds);
  pushes.Fill(s.mutable_push_seconds());
  for (auto [surface, reason, count] :
       {std::tuple{"data_plane", "unknown_am_id", 65534},
        std::tuple{"data_plane", "wrong_token", 0},
        std::tuple{"control_plane", "invalid_argument", 2}, std::tuple{"store", "no_room", 1}}) {
    v1::RejectionCount* r = s.add_rejections();
    r->set_surface(surface);
    r->set_reason(reason);
    r->set_count(count);
  }
  return s;
}

TEST(Metrics, EverySampleFollowsThePrometheusTextFormatUnderItsHelpAndType) {
  std::string text = RenderMetrics(Sample());
  std::istringstream in(text);
  const std::regex sample(R"(([a-z_]+)(\{[a-z]+="[^"]*"(,[a-z]+="[^"]*")*\})? -?[0-9.e+-]+)");
  std::set<std::string> typed;
  int samples = 0;
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (line.rfind("# HELP ", 0) == 0) continue;
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream t(line.substr(7));
      std::string name, type;
      t >> name >> type;
      EXPECT_TRUE(type == "gauge" || type == "counter" || type == "histogram") << line;
      EXPECT_TRUE(type != "counter" || (name.size() > 6 && name.substr(name.size() - 6) == "_total"))
          << line;
      typed.insert(name);
      continue;
    }
    ASSERT_TRUE(std::regex_match(line, m, sample)) << line;
    // A histogram's samples are its name with _bucket (le="..."), _sum or _count.
    std::string family = std::regex_replace(std::string(m[1]), std::regex("_(bucket|sum|count)$"), "");
    EXPECT_TRUE(typed.count(m[1]) || typed.count(family)) << "no TYPE before " << line;
    ++samples;
  }
  EXPECT_GT(samples, 20);
}

// One counter family, a sample per (surface, reason), zeros included: rate() works from the
// first scrape, and no reason's series appears out of nowhere.
TEST(Metrics, RejectionsAreOneCounterLabelledBySurfaceAndReason) {
  std::string text = RenderMetrics(Sample());
  EXPECT_NE(text.find("# TYPE adjsnap_rejections_total counter\n"), std::string::npos) << text;
  for (const char* line : {
           "adjsnap_rejections_total{surface=\"data_plane\",reason=\"unknown_am_id\"} 65534\n",
           "adjsnap_rejections_total{surface=\"data_plane\",reason=\"wrong_token\"} 0\n",
           "adjsnap_rejections_total{surface=\"control_plane\",reason=\"invalid_argument\"} 2\n",
           "adjsnap_rejections_total{surface=\"store\",reason=\"no_room\"} 1\n",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "in\n" << text;
  }
  v1::StatsResponse odd;
  v1::RejectionCount* r = odd.add_rejections();
  r->set_surface("a\"b");
  r->set_reason("c\\d\ne");
  EXPECT_NE(RenderMetrics(odd).find(
                "adjsnap_rejections_total{surface=\"a\\\"b\",reason=\"c\\\\d\\ne\"} 0\n"),
            std::string::npos)
      << RenderMetrics(odd);
}

TEST(Metrics, FiguresComeFromTheStatsPerTier) {
  std::string text = RenderMetrics(Sample());
  for (const char* line : {
           "adjsnap_tier_used_bytes{tier=\"host\"} 1234\n",
           "adjsnap_tier_used_bytes{tier=\"disk\"} 1000\n",
           "adjsnap_host_peak_used_bytes 5678\n",
           "adjsnap_host_resident_bytes 4321\n",
           "adjsnap_spill_bytes_total 4096\n",
           "adjsnap_disk_compression_ratio 3\n",
           "adjsnap_pushes_total 40\n",
           "adjsnap_refused_pushes_total 1\n",
           "adjsnap_prefetch_misses_total 5\n",
           "adjsnap_prefetch_hits_total 7\n",
           "adjsnap_uptime_seconds 61.5\n",
           "adjsnap_info{version=\"0.1.0\",wire=\"2\"} 1\n",
           "# TYPE adjsnap_push_seconds histogram\n",
           "adjsnap_push_seconds_bucket{le=\"0.00025\"} 0\n",
           "adjsnap_push_seconds_bucket{le=\"0.0005\"} 2\n",
           "adjsnap_push_seconds_bucket{le=\"1\"} 2\n",
           "adjsnap_push_seconds_bucket{le=\"2.5\"} 3\n",
           "adjsnap_push_seconds_bucket{le=\"+Inf\"} 3\n",
           "adjsnap_push_seconds_count 3\n",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "in\n" << text;
  }
}

}  // namespace
}  // namespace adjsnap
