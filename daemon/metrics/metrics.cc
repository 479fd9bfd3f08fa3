#include "metrics/metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "log.h"
#include "adjsnap/thread_name.h"

namespace adjsnap {

namespace {

class Exposition {
 public:
  // One metric family: its HELP and TYPE lines, then `samples` as {labels, value}.
  void Family(const char* name, const char* type, const char* help,
              const std::vector<std::pair<std::string, double>>& samples) {
    out_ += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    for (const auto& [labels, value] : samples) Sample(std::string(name) + labels, value);
  }
  void One(const char* name, const char* type, const char* help, double value) {
    Family(name, type, help, {{"", value}});
  }
  // A histogram family: NAME_bucket{le=...} per bound and +Inf, NAME_sum, NAME_count.
  void Histogram(const char* name, const char* help, const v1::Histogram& h) {
    out_ += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " histogram\n";
    for (int i = 0; i < h.upper_bounds_size() && i < h.cumulative_counts_size(); ++i) {
      char bound[32];  // as written in the bound table: 0.0005, not 0.00050000000000000001
      std::snprintf(bound, sizeof bound, "%.6g", h.upper_bounds(i));
      Sample(std::string(name) + "_bucket{le=\"" + bound + "\"}",
             static_cast<double>(h.cumulative_counts(i)));
    }
    Sample(std::string(name) + "_bucket{le=\"+Inf\"}", static_cast<double>(h.count()));
    Sample(std::string(name) + "_sum", h.sum_seconds());
    Sample(std::string(name) + "_count", static_cast<double>(h.count()));
  }
  std::string Take() { return std::move(out_); }

 private:
  static std::string Number(double value) {
    char number[64];
    std::snprintf(number, sizeof number, "%.17g", value);
    return number;
  }
  void Sample(const std::string& name_and_labels, double value) {
    out_ += name_and_labels + " " + Number(value) + "\n";
  }

  std::string out_;
};

// A label value in the text format: backslash, double quote and newline escaped. (adjsnapd's
// labels are fixed names; this keeps the file well-formed whatever Stats holds.)
std::string LabelValue(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

const v1::TierStats* Tier(const v1::StatsResponse& s, v1::Tier tier) {
  for (const auto& t : s.tiers()) {
    if (t.tier() == tier) return &t;
  }
  return nullptr;
}

}  // namespace

std::string RenderMetrics(const v1::StatsResponse& s) {
  Exposition e;
  e.Family("adjsnap_info", "gauge", "adjsnapd's version and data-plane wire version.",
           {{"{version=\"" + s.version() + "\",wire=\"" + std::to_string(s.wire_version()) +
                 "\"}",
             1}});
  e.One("adjsnap_uptime_seconds", "gauge", "Seconds since adjsnapd started.", s.uptime_ms() / 1e3);
  e.One("adjsnap_sessions", "gauge", "Open client sessions.", static_cast<double>(s.sessions()));
  e.One("adjsnap_runs", "gauge", "Runs in the catalog.", static_cast<double>(s.runs()));
  const v1::TierStats* host = Tier(s, v1::TIER_HOST);
  // The disk tier: one entry, or one per spool class (local, shared).
  std::vector<const v1::TierStats*> disks;
  for (const auto& t : s.tiers()) {
    if (t.tier() == v1::TIER_DISK) disks.push_back(&t);
  }
  // One sample per tier adjsnapd has, labelled tier="host", tier="disk" (the local spools) or
  // tier="shared_disk" (shared_spool_dirs).
  auto per_tier = [&](const char* name, const char* type, const char* help,
                      double (*value)(const v1::TierStats&)) {
    std::vector<std::pair<std::string, double>> samples;
    if (host) samples.push_back({"{tier=\"host\"}", value(*host)});
    for (const v1::TierStats* d : disks) {
      samples.push_back(
          {d->spool_class() == "shared" ? "{tier=\"shared_disk\"}" : "{tier=\"disk\"}", value(*d)});
    }
    e.Family(name, type, help, samples);
  };
  per_tier("adjsnap_tier_budget_bytes", "gauge", "Bytes the tier may hold.",
           [](const v1::TierStats& t) { return static_cast<double>(t.budget_bytes()); });
  per_tier("adjsnap_tier_used_bytes", "gauge", "Bytes the tier holds now.",
           [](const v1::TierStats& t) { return static_cast<double>(t.used_bytes()); });
  per_tier("adjsnap_tier_raw_bytes", "gauge",
           "Raw (uncompressed) size of the snapshots the tier holds.",
           [](const v1::TierStats& t) { return static_cast<double>(t.raw_bytes()); });
  per_tier("adjsnap_tier_snapshots", "gauge", "Snapshots whose bytes are in the tier.",
           [](const v1::TierStats& t) { return static_cast<double>(t.snapshots()); });
  per_tier("adjsnap_tier_write_bytes_per_second", "gauge",
           "Measured write bandwidth into the tier since start.",
           [](const v1::TierStats& t) { return t.write_bytes_per_second(); });
  per_tier("adjsnap_tier_read_bytes_per_second", "gauge",
           "Measured read bandwidth out of the tier since start.",
           [](const v1::TierStats& t) { return t.read_bytes_per_second(); });
  std::string out = e.Take();
  Exposition c;
  if (host) {
    c.One("adjsnap_host_peak_used_bytes", "gauge", "The most the host tier has held since start.",
          static_cast<double>(host->peak_used_bytes()));
    c.One("adjsnap_host_resident_bytes", "gauge",
          "RAM the host tier holds now, free pages kept for reuse included.",
          static_cast<double>(host->resident_bytes()));
  }
  if (!disks.empty()) {  // over every spool class
    double written = 0, read = 0, raw = 0, used = 0;
    for (const v1::TierStats* d : disks) {
      written += static_cast<double>(d->write_bytes());
      read += static_cast<double>(d->read_bytes());
      raw += static_cast<double>(d->raw_bytes());
      used += static_cast<double>(d->used_bytes());
    }
    c.One("adjsnap_spill_bytes_total", "counter", "Bytes written to the disk tier.", written);
    c.One("adjsnap_disk_read_bytes_total", "counter", "Bytes read from the disk tier.", read);
    c.One("adjsnap_disk_compression_ratio", "gauge",
          "Raw bytes over stored bytes of the disk tier's snapshots (1 = none compressed).",
          used > 0 ? raw / used : 1);
  }
  c.One("adjsnap_pushes_total", "counter", "Pushes stored.", static_cast<double>(s.pushes()));
  c.Histogram("adjsnap_push_seconds",
              "Seconds from a push reaching adjsnapd to its reply that it is stored.",
              s.push_seconds());
  c.One("adjsnap_fetches_total", "counter", "Fetches served.", static_cast<double>(s.fetches()));
  c.One("adjsnap_refused_pushes_total", "counter",
        "Pushes refused because host and disk together had no room.",
        static_cast<double>(s.refused_pushes()));
  c.One("adjsnap_rejected_messages_total", "counter",
        "Data-plane messages rejected as malformed or unauthenticated.",
        static_cast<double>(s.rejected_messages()));
  std::vector<std::pair<std::string, double>> rejections;
  for (const v1::RejectionCount& r : s.rejections()) {
    rejections.push_back(
        {"{surface=\"" + LabelValue(r.surface()) + "\",reason=\"" + LabelValue(r.reason()) + "\"}",
         static_cast<double>(r.count())});
  }
  c.Family("adjsnap_rejections_total", "counter",
           "Requests and messages refused for what a peer sent or asked, by where and why.",
           rejections);
  c.One("adjsnap_demotions_total", "counter", "Steps written from host memory to disk.",
        static_cast<double>(s.demotions()));
  c.One("adjsnap_moves_to_shared_total", "counter",
        "Disk files moved from a local spool to a shared one to make local room.",
        static_cast<double>(s.moves_to_shared()));
  c.One("adjsnap_prefetch_hits_total", "counter",
        "Fetches of a disk-tier step that found it already read ahead.",
        static_cast<double>(s.prefetch_hits()));
  c.One("adjsnap_prefetch_misses_total", "counter", "Fetches that had to wait for a disk read.",
        static_cast<double>(s.demand_reads()));
  c.One("adjsnap_compactions_total", "counter",
        "Host-tier blocks moved to merge free room (mixed step sizes).",
        static_cast<double>(s.compactions()));
  c.One("adjsnap_released_total", "counter", "Read-once steps released after their fetch.",
        static_cast<double>(s.released()));
  c.One("adjsnap_lost_snapshots", "gauge",
        "Snapshots lost to a restart, a failed checksum or a failed read (fetches answer "
        "DATA_LOSS).",
        static_cast<double>(s.lost_snapshots()));
  if (s.spools_size() > 0) {
    std::vector<std::pair<std::string, double>> failed, read_errors, failures;
    for (const v1::SpoolState& sp : s.spools()) {
      std::string label = "{spool=\"" + std::to_string(sp.index()) + "\"}";
      failed.push_back({label, sp.state() == "failed" ? 1.0 : 0.0});
      failures.push_back({label, static_cast<double>(sp.failures())});
      read_errors.push_back({label, static_cast<double>(sp.read_errors())});
    }
    c.Family("adjsnap_spool_failed", "gauge",
             "1 while the spool (by its place in spool_dirs) is out of the rotation because its "
             "device failed; adjsnap status says why.",
             failed);
    c.Family("adjsnap_spool_failures_total", "counter", "Times the spool was marked failed.",
             failures);
    c.Family("adjsnap_spool_read_errors_total", "counter",
             "Reads of the spool's files that failed, each a lost step.", read_errors);
  }
  c.One("adjsnap_unavailable_pushes_total", "counter",
        "Pushes that needed the disk tier and failed (UNAVAILABLE) because no spool worked.",
        static_cast<double>(s.unavailable_pushes()));
  c.One("adjsnap_unavailable_pushes_fast_total", "counter",
        "Of those, pushes failed at once: an earlier push had already waited "
        "spool_failure_timeout and no spool has worked since.",
        static_cast<double>(s.unavailable_pushes_fast()));
  c.One("adjsnap_waiting_pushes", "gauge",
        "Pushes parked now for host room (adjsnap status lists each, with what it waits for).",
        static_cast<double>(s.waiting_pushes()));
  c.One("adjsnap_waiting_fetches", "gauge",
        "Fetches waiting now for a disk read or decode of their step.",
        static_cast<double>(s.waiting_fetches()));
  c.One("adjsnap_oldest_wait_seconds", "gauge",
        "How long the oldest push or fetch that waits now has waited; 0 when none waits.",
        s.oldest_wait_seconds());
  c.One("adjsnap_scrubbed_files_total", "counter",
        "Spool files re-verified against their checksums (recovery, background, on demand).",
        static_cast<double>(s.scrubbed_files()));
  return out + c.Take();
}

Result<std::unique_ptr<MetricsFile>> MetricsFile::Start(
    std::string path, std::chrono::seconds interval, std::function<v1::StatsResponse()> collect) {
  std::unique_ptr<MetricsFile> m(new MetricsFile(std::move(path), interval, std::move(collect)));
  ADJSNAP_RETURN_IF_ERROR(m->WriteOnce());
  MetricsFile* raw = m.get();
  m->thread_ = NamedThread("adjsnap-metrics", [raw] {
    MutexLock lock(raw->mu_);
    while (!raw->cv_.WaitFor(raw->mu_, raw->interval_,
                             [raw]() ADJSNAP_REQUIRES(raw->mu_) { return raw->stop_; })) {
      lock.Unlock();
      Status s = raw->WriteOnce();
      if (!s.ok()) ADJSNAP_LOG_WARN("metrics_textfile: %s", s.ToString().c_str());
      lock.Lock();
    }
  });
  return m;
}

MetricsFile::MetricsFile(std::string path, std::chrono::seconds interval,
                         std::function<v1::StatsResponse()> collect)
    : path_(std::move(path)), interval_(interval), collect_(std::move(collect)) {}

MetricsFile::~MetricsFile() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

Status MetricsFile::WriteOnce() {
  std::string text = RenderMetrics(collect_());
  std::string tmp = path_ + ".tmp";
  // 0644: node_exporter reads it as its own user; it holds node-wide figures only.
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return Status::FailedPrecondition("metrics_textfile: creating " + tmp + ": " +
                                      std::strerror(errno));
  }
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  int err = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path_.c_str()) != 0) {
    if (ok) err = errno;
    ::unlink(tmp.c_str());
    return Status::FailedPrecondition("metrics_textfile: writing " + path_ + ": " +
                                      std::strerror(err));
  }
  return Status::Ok();
}

}  // namespace adjsnap
