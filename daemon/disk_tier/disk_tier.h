// The disk tier: snapshot files in one or more spool directories (NVMe), each with a byte
// budget that the tier cannot exceed.
//
// Layout (docs/architecture.md, "Disk tier"): `<spool>/run-<run_id>/<name>`, one file per
// snapshot, named by the store (the name is recorded in the catalog, so a restart finds the
// file from the record). A file holds the snapshot's raw bytes padded to a 4 KiB multiple;
// nothing else, so `dd`/numpy can read it. Writes go to `<name>.tmp`, are made durable
// (fdatasync), renamed into place and the directory synced: a file under its final name is
// always complete. I/O is O_DIRECT from/to page-aligned host-tier memory where the
// filesystem supports it (tmpfs does not: buffered I/O there).
//
// Thread-safety: every method is thread-safe; Write/Read/Remove block in the kernel and are
// meant for I/O threads, never for the UCX progress thread or a gRPC reactor.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "disk_tier/spool_io.h"
#include "snapd/status.h"
#include "snapd/thread_annotations.h"

namespace snapd {

struct DiskTierOptions {
  std::vector<std::string> spools;  // created if missing
  uint64_t budget_bytes = 0;        // whole tier, split evenly over spools; 0 = budget_perc
  double budget_perc = 0.7;         // of each spool filesystem's free space at start
  SpoolIo* io = nullptr;  // the snapshot files' I/O; null = the kernel's (SpoolIo::System)
};

// Bytes and busy wall time (time with at least one transfer in flight) of one direction.
struct DiskIoCounters {
  uint64_t bytes = 0;
  uint64_t busy_ns = 0;
  uint64_t ops = 0;
};

class DiskTier {
 public:
  static constexpr uint64_t kAlignment = 4096;
  static uint64_t FileBytes(uint64_t raw) { return (raw + kAlignment - 1) / kAlignment * kAlignment; }

  static Result<std::unique_ptr<DiskTier>> Open(const DiskTierOptions& options);

  // Room for one file in one spool, taken by Reserve and handed to Write.
  struct Space {
    uint32_t spool = 0;
    uint64_t bytes = 0;  // FileBytes of what may be written
  };
  // Accounts FileBytes(raw) in the spool with the most room. RESOURCE_EXHAUSTED, naming use
  // and budget, when no spool has room.
  // (Here and below, `raw` is what the file holds before padding: a snapshot's stored bytes.)
  // The tier is the one owner of its accounting: a reservation ends in Write (which keeps what
  // the file takes) and a file in Remove; Adopt accounts a file found at start.
  Result<Space> Reserve(uint64_t raw) SNAPD_EXCLUDES(mu_);

  // Writes FileBytes(raw) bytes from `data` (readable that far, 4 KiB-aligned for O_DIRECT)
  // durably under `name`, in the room `space` reserved (raw may be less than was reserved: a
  // compressed copy; the rest returns to the budget). On failure nothing is left under `name`
  // or `name.tmp` and all of `space` returns to the budget; a full filesystem is
  // RESOURCE_EXHAUSTED.
  Status Write(const Space& space, uint64_t run_id, const std::string& name, const void* data,
               uint64_t raw) SNAPD_EXCLUDES(mu_);
  // Reads the file into `data` (writable for FileBytes(raw) bytes). DATA_LOSS if the file is
  // missing or shorter than recorded.
  Status Read(uint32_t spool, uint64_t run_id, const std::string& name, void* data, uint64_t raw);
  // Unlinks the file and returns its bytes to the budget.
  void Remove(uint32_t spool, uint64_t run_id, const std::string& name, uint64_t raw)
      SNAPD_EXCLUDES(mu_);

  // Recovery. Adopt: the file a catalog record names is present and complete; accounts it.
  Status Adopt(uint32_t spool, uint64_t run_id, const std::string& name, uint64_t raw)
      SNAPD_EXCLUDES(mu_);
  // Deletes every file and run directory in the spools that `keep` ("<spool>/run-<id>/<name>"
  // relative keys, see Key) does not name: leftovers of writes a crash interrupted.
  uint64_t RemoveOrphans(const std::set<std::string>& keep);
  static std::string Key(uint32_t spool, uint64_t run_id, const std::string& name);

  size_t spools() const { return spools_.size(); }
  std::vector<std::string> spool_dirs() const;
  uint64_t budget() const { return budget_; }
  uint64_t used() const SNAPD_EXCLUDES(mu_);
  DiskIoCounters writes() const SNAPD_EXCLUDES(mu_);
  DiskIoCounters reads() const SNAPD_EXCLUDES(mu_);

 private:
  struct Spool {
    std::string dir;
    uint64_t budget = 0;
    uint64_t used = 0;
    std::atomic<bool> direct{true};  // cleared the first time O_DIRECT is refused
  };
  // Busy-time accounting for one direction.
  struct Busy {
    DiskIoCounters counters;
    int in_flight = 0;
    int64_t since_ns = 0;
  };
  DiskTier(std::vector<std::unique_ptr<Spool>> spools, uint64_t budget, SpoolIo* io);
  // Returns `bytes` of what the spool has accounted to its budget.
  void Unaccount(uint32_t spool, uint64_t bytes) SNAPD_EXCLUDES(mu_);
  std::string Path(uint32_t spool, uint64_t run_id, const std::string& name) const;
  void BeginIo(bool write) SNAPD_EXCLUDES(mu_);
  void EndIo(bool write, uint64_t bytes) SNAPD_EXCLUDES(mu_);
  // Opens `path` with O_DIRECT when the spool allows it, falling back once to buffered I/O.
  int OpenFile(Spool& spool, const std::string& path, int flags);

  const std::vector<std::unique_ptr<Spool>> spools_;
  const uint64_t budget_;
  SpoolIo* const io_;
  mutable Mutex mu_;  // guards Spool::used and the Busy records
  Busy writes_ SNAPD_GUARDED_BY(mu_);
  Busy reads_ SNAPD_GUARDED_BY(mu_);
};

}  // namespace snapd
