// Metrics for the monitoring an HPC site already runs: adjsnapd's counters (what Stats answers) in
// the Prometheus text format, written every `interval` to a file that node_exporter's textfile
// collector reads (docs/operations.md says why a file and not an HTTP port). The file is
// replaced atomically (written beside it, then renamed) and holds only node-wide numbers: no
// run names, paths or uids.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "adjsnap/status.h"
#include "adjsnap/v1/control.pb.h"
#include "adjsnap/thread_annotations.h"

namespace adjsnap {

// The Prometheus text exposition of `stats`.
std::string RenderMetrics(const v1::StatsResponse& stats);

class MetricsFile {
 public:
  // Writes once (so a path adjsnapd cannot write fails here, at start), then every `interval`.
  static Result<std::unique_ptr<MetricsFile>> Start(std::string path,
                                                    std::chrono::seconds interval,
                                                    std::function<v1::StatsResponse()> collect);
  ~MetricsFile();  // stops the writer; the file stays with the last figures

 private:
  MetricsFile(std::string path, std::chrono::seconds interval,
              std::function<v1::StatsResponse()> collect);
  Status WriteOnce();

  const std::string path_;
  const std::chrono::seconds interval_;
  const std::function<v1::StatsResponse()> collect_;
  Mutex mu_;
  CondVar cv_;
  bool stop_ ADJSNAP_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the members it uses exist
};

}  // namespace adjsnap
