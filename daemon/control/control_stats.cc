// The Stats call's answer: the tiers, the spools, the counters, the sessions and what waits,
// as the caller may see them (a tenant its own runs' share; an admin the node).
#include <chrono>
#include <cstring>
#include <string>
#include <utility>

#include "control/control_service.h"

namespace adjsnap {

namespace {
constexpr size_t kMaxWaitsListed = 64;  // StatsResponse.waits

void FillFit(const TransferFit& fit, v1::TransferFit* out) {
  out->set_latency_seconds(fit.latency_seconds);
  out->set_bytes_per_second(fit.bytes_per_second);
  out->set_samples(fit.samples);
  out->set_min_bytes(fit.min_bytes);
  out->set_max_bytes(fit.max_bytes);
}
}  // namespace

void FillSpools(const DiskTier& disk, bool admin,
                google::protobuf::RepeatedPtrField<v1::SpoolState>* out) {
  uint32_t index = 0;
  for (const SpoolStatus& st : disk.SpoolStates()) {
    v1::SpoolState* s = out->Add();
    s->set_index(index++);
    s->set_state(st.failed ? "failed" : "ok");
    s->set_spool_class(SpoolClassName(st.spool_class));
    if (st.failed) {
      // Paths name the spool and the runs on it: an admin's business.
      s->set_reason(admin ? st.reason : std::string(std::strerror(st.error)));
      s->set_error_number(st.error);
      s->set_error_name(ErrnoName(st.error));
      s->set_failed_unix_ms(st.failed_unix_ms);
      s->set_next_probe_ms(st.next_probe_ms);
    }
    if (admin) s->set_dir(st.dir);
    s->set_budget_bytes(st.budget);
    s->set_used_bytes(st.used);
    s->set_failures(st.failures);
    s->set_read_errors(st.read_errors);
  }
}

void ControlService::CollectStats(const Tenant* who, v1::StatsResponse* resp) const {
  const bool admin = who && who->admin;
  StoreCounters c = store_->Counters();
  resp->set_version(ADJSNAP_VERSION);
  resp->set_wire_version(wire::kVersion);
  resp->set_uptime_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - started_)
                          .count());
  resp->set_runs(c.runs);
  resp->set_sessions(sessions_->size());
  v1::TierStats* host = resp->add_tiers();
  host->set_tier(v1::TIER_HOST);
  host->set_budget_bytes(store_->host_budget());
  host->set_used_bytes(store_->host_used());
  host->set_snapshots(c.host_snapshots);
  host->set_raw_bytes(store_->host_used());  // host copies are never compressed
  host->set_peak_used_bytes(store_->host_peak_used());
  host->set_pages(store_->host_pages());
  host->set_prefaulted_bytes(store_->host_prefaulted());
  host->set_resident_bytes(store_->host_resident());
  resp->set_data_plane_address(data_plane_->Describe());
  resp->set_control_socket("unix:" + control_socket_);
  const DataPlaneCounters& d = data_plane_->counters();
  auto rate = [](uint64_t bytes, uint64_t ns) {
    return ns ? static_cast<double>(bytes) * 1e9 / static_cast<double>(ns) : 0.0;
  };
  host->set_write_bytes_per_second(rate(d.write_bytes.load(), d.write_ns.load()));
  host->set_read_bytes_per_second(rate(d.read_bytes.load(), d.read_ns.load()));
  FillFit(d.write_samples.Fit(), host->mutable_write_fit());
  FillFit(d.read_samples.Fit(), host->mutable_read_fit());
  d.push_seconds.Fill(resp->mutable_push_seconds());
  if (const DiskTier* disk = store_->disk()) {
    // One entry per spool class present: local (all of the disk tier on most nodes), then
    // shared.
    for (SpoolClass cls : {SpoolClass::kLocal, SpoolClass::kShared}) {
      const bool shared = cls == SpoolClass::kShared;
      if (shared && !disk->has_shared()) break;
      if (!shared && disk->budget(cls) == 0 && disk->has_shared()) continue;  // shared only
      v1::TierStats* t = resp->add_tiers();
      t->set_tier(v1::TIER_DISK);
      t->set_spool_class(SpoolClassName(cls));
      t->set_budget_bytes(disk->budget(cls));
      t->set_used_bytes(disk->used(cls));
      t->set_snapshots(shared ? c.shared_disk_snapshots
                              : c.disk_snapshots - c.shared_disk_snapshots);
      t->set_raw_bytes(shared ? c.shared_disk_raw_bytes
                              : c.disk_raw_bytes - c.shared_disk_raw_bytes);
      DiskIoCounters w = disk->writes(cls), r = disk->reads(cls);
      t->set_write_bytes_per_second(rate(w.bytes, w.busy_ns));
      t->set_read_bytes_per_second(rate(r.bytes, r.busy_ns));
      t->set_write_bytes(w.bytes);
      t->set_write_busy_ns(w.busy_ns);
      t->set_read_bytes(r.bytes);
      t->set_read_busy_ns(r.busy_ns);
      FillFit(disk->write_fit(cls), t->mutable_write_fit());
      FillFit(disk->read_fit(cls), t->mutable_read_fit());
    }
    if (admin) {
      for (const std::string& dir : disk->spool_dirs()) resp->add_spool_dirs(dir);
    }
    FillSpools(*disk, admin, resp->mutable_spools());
  }
  resp->set_demotions(c.demotions);
  resp->set_moves_to_shared(c.moves_to_shared);
  resp->set_disk_reads(c.disk_reads);
  resp->set_prefetch_hits(c.prefetch_hits);
  resp->set_demand_reads(c.demand_reads);
  resp->set_released(c.released);
  resp->set_pushes(d.pushes.load());
  resp->set_fetches(d.fetches.load());
  resp->set_rejected_messages(d.rejected.load());
  resp->set_lost_snapshots(c.lost_snapshots);
  resp->set_refused_pushes(c.refused_pushes);
  for (const log::RejectionCount& r : log::RejectionCounts()) {
    v1::RejectionCount* out = resp->add_rejections();
    out->set_surface(r.surface);
    out->set_reason(r.reason);
    out->set_count(r.count);
  }
  // The store counts its own refusals (pushes with no room in host and disk together).
  v1::RejectionCount* store = resp->add_rejections();
  store->set_surface("store");
  store->set_reason("no_room");
  store->set_count(c.refused_pushes);
  resp->set_compactions(c.compactions);
  resp->set_unavailable_pushes(c.unavailable_pushes);
  resp->set_unavailable_pushes_fast(c.unavailable_pushes_fast);
  resp->set_scrubbed_files(c.scrubbed);
  Store::Waits waits = store_->Waiting(who ? *who : Tenant::User(0), who ? kMaxWaitsListed : 0);
  for (v1::Wait& w : waits.waits) *resp->add_waits() = std::move(w);
  resp->set_waiting_pushes(waits.pushes);
  resp->set_waiting_fetches(waits.fetches);
  resp->set_oldest_wait_seconds(waits.oldest_seconds);
}

}  // namespace adjsnap
