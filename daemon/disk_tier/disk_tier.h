// The disk tier: snapshot files in one or more spool directories (NVMe), each with a byte
// budget that the tier cannot exceed.
//
// Layout (docs/architecture.md, "Disk tier"): `<spool>/run-<run_id>/<name>`, one file per
// snapshot, named by the store (the name is recorded in the catalog, so a restart finds the
// file from the record). A file holds the snapshot's raw bytes padded to a 4 KiB multiple;
// nothing else, so `dd`/numpy can read it. Writes go to `<name>.tmp`, are made durable
// (fdatasync), renamed into place and the directory synced: a file under its final name is
// always complete. I/O is O_DIRECT from/to page-aligned host-tier memory where the
// filesystem supports it (tmpfs does not: buffered I/O there). Every filesystem call the tier
// makes, on its files and its directories, goes through one SpoolIo (disk_tier/spool_io.h).
//
// Errors (ClassifySpoolError, the one place that tells them apart): a transient error
// (EINTR, EAGAIN, ENOMEM, ...) is retried a few times with exponential backoff (bounded, well
// under a second); a full filesystem (ENOSPC, EDQUOT) is RESOURCE_EXHAUSTED, as the budget is;
// anything else on the write path (EROFS, EIO, ENODEV, a failed fdatasync, a transient error
// that persists) means the spool's device failed: the spool is marked failed with the errno
// and the path, leaves the rotation (Reserve picks the others), and a prober thread re-probes
// it (write, fdatasync and unlink of a small file) with backoff until it is writable again.
// A read error or a short read is the loss of that one file (DATA_LOSS naming the path and
// errno), except where the file may be intact but out of reach: an error saying the
// filesystem's servers cannot be reached (ENOTCONN, ETIMEDOUT, ESTALE, EHOSTDOWN, ...: a shared
// filesystem's brick or server gone), or a file missing while its spool is failed, or missing
// from a shared spool that a probe then finds failing (GlusterFS reports the files of a dead
// brick as missing). Those fail the spool and are UNAVAILABLE: the step stays recorded and is
// served once a probe brings the spool back. No call is made with the tier's mutex held: a call
// that hangs (a network filesystem's server that stopped answering) holds up its own caller
// only, and the other spools, Reserve and the state queries go on.
//
// Thread-safety: every method is thread-safe; Write/Read/Remove block in the kernel and are
// meant for I/O threads, never for the UCX progress thread or a gRPC reactor. The prober
// thread calls the state listener with no lock held.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "disk_tier/spool_io.h"
#include "adjsnap/status.h"
#include "adjsnap/thread_annotations.h"
#include "adjsnap/transfer_fit.h"

namespace adjsnap {

struct DiskTierOptions {
  std::vector<std::string> spools;  // created if missing
  uint64_t budget_bytes = 0;        // over `spools`, split evenly; 0 = budget_perc
  double budget_perc = 0.7;         // of each spool filesystem's free space at start
  SpoolIo* io = nullptr;  // the tier's every filesystem call; null: the kernel's (SpoolIo::System)
  // A failed spool is re-probed after probe_min, then after twice as long each time it is
  // still failing, up to probe_max.
  std::chrono::milliseconds probe_min{1000};
  std::chrono::milliseconds probe_max{60000};
  // Spools of class shared: a site's parallel filesystem, larger and slower than the node's
  // own disks; they hold a run's oldest steps (Tiering). Numbered after `spools`.
  std::vector<std::string> shared_spools = {};
  uint64_t shared_budget_bytes = 0;  // over `shared_spools`, split evenly; 0 = budget_perc
};

// Where a spool lies: the node's own disks, or a filesystem shared by the nodes.
enum class SpoolClass { kLocal, kShared };
const char* SpoolClassName(SpoolClass c);  // "local", "shared"

// What a spool I/O error means (ClassifySpoolError).
enum class SpoolError {
  kTransient,     // EINTR, EAGAIN, ENOMEM, EMFILE, ENFILE, EBUSY: retry after a pause
  kFull,          // ENOSPC, EDQUOT: the filesystem is full
  kUnreachable,   // ENOTCONN, ETIMEDOUT, ESTALE, EHOSTDOWN, ...: its servers cannot be reached
  kDeviceFailed,  // anything else: EROFS, EIO, ENODEV, ENXIO, EACCES, ...
};
SpoolError ClassifySpoolError(int err);
// "EROFS", "EIO", ...; the number for an errno without a name here.
std::string ErrnoName(int err);

// One spool as Stats reports it.
struct SpoolStatus {
  std::string dir;
  SpoolClass spool_class = SpoolClass::kLocal;
  bool failed = false;
  int error = 0;         // the errno that failed it (failed only)
  std::string reason;    // "writing <path>: Read-only file system (EROFS)" (failed only)
  int64_t failed_unix_ms = 0;
  int64_t next_probe_ms = 0;  // from now (failed only)
  uint64_t budget = 0;
  uint64_t used = 0;
  uint64_t failures = 0;     // times it was marked failed since start
  uint64_t read_errors = 0;  // reads that failed (each a lost step)
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
  // Files a probe of a shared spool writes (Probe): names spread over a distributed
  // filesystem's servers, so a spool comes back only when all of them take writes.
  static constexpr int kSharedProbeFiles = 16;
  static uint64_t FileBytes(uint64_t raw) { return (raw + kAlignment - 1) / kAlignment * kAlignment; }

  static Result<std::unique_ptr<DiskTier>> Open(const DiskTierOptions& options);
  ~DiskTier();  // stops the prober

  // Room for one file in one spool, taken by Reserve and handed to Write.
  struct Space {
    uint32_t spool = 0;
    uint64_t bytes = 0;  // FileBytes of what may be written
  };
  // Accounts FileBytes(raw) in the working spool of class `want` with the most room, else
  // (none of that class works or has room) in the other class's: a failed or full class fails
  // over. RESOURCE_EXHAUSTED, naming use and budget, when no working spool has room;
  // UNAVAILABLE, naming each failed spool and its errno, when every spool has failed.
  // (Here and below, `raw` is what the file holds before padding: a snapshot's stored bytes.)
  // The tier is the one owner of its accounting: a reservation ends in Write (which keeps what
  // the file takes) and a file in Remove; Adopt accounts a file found at start.
  // With `fail_over` false, only a spool of class `want` will do (the errors then speak of that
  // class's spools alone).
  Result<Space> Reserve(uint64_t raw, SpoolClass want = SpoolClass::kLocal, bool fail_over = true)
      ADJSNAP_EXCLUDES(mu_);

  // Writes FileBytes(raw) bytes from `data` (readable that far, 4 KiB-aligned for O_DIRECT)
  // durably under `name`, in the room `space` reserved (raw may be less than was reserved: a
  // compressed copy; the rest returns to the budget). On failure nothing is left under `name`
  // or `name.tmp` and all of `space` returns to the budget; a full filesystem is
  // RESOURCE_EXHAUSTED, a failed device UNAVAILABLE (the spool is marked failed).
  Status Write(const Space& space, uint64_t run_id, const std::string& name, const void* data,
               uint64_t raw) ADJSNAP_EXCLUDES(mu_);
  // Copies the file `name` of `run_id` from spool `from` to the room `to` reserved (of another
  // spool), under the same name, as Write writes it: durable when this returns OK, nothing left
  // in `to` otherwise. The source is left as it is; an error reading it (UNAVAILABLE, naming the
  // path) fails the copy, not either spool.
  Status Copy(uint32_t from, uint64_t run_id, const std::string& name, uint64_t raw,
              const Space& to) ADJSNAP_EXCLUDES(mu_);
  // Reads the file into `data` (writable for FileBytes(raw) bytes). DATA_LOSS, naming the path
  // and the errno, if the file is missing, shorter than recorded or cannot be read (EIO);
  // UNAVAILABLE if a transient error persisted (the file may be fine).
  Status Read(uint32_t spool, uint64_t run_id, const std::string& name, void* data, uint64_t raw);
  // Unlinks the file and returns its bytes to the budget.
  void Remove(uint32_t spool, uint64_t run_id, const std::string& name, uint64_t raw)
      ADJSNAP_EXCLUDES(mu_);

  // Recovery. Adopt: the file a catalog record names is present and complete; accounts it.
  // DATA_LOSS when it is missing or shorter than recorded. A file out of reach (its spool not
  // mounted at start, see Claim; a look-up failing ENOTCONN, ESTALE, ...; missing from a shared
  // spool that a probe finds failing) is accounted unread, the spool failed, and OK returned: the
  // step stays recorded, and its reads are UNAVAILABLE until a probe brings the spool back.
  Status Adopt(uint32_t spool, uint64_t run_id, const std::string& name, uint64_t raw)
      ADJSNAP_EXCLUDES(mu_);
  // Moves a damaged file aside, out of the budget, to `<spool>/quarantine/run-<id>/<name>`, where
  // an operator can look at it: evidence is never deleted. `accounted_raw`: what the file holds
  // as the budget counts it (0: not accounted, e.g. a file Adopt refused). Returns the new path,
  // or the error (the file then stays where it was).
  Result<std::string> Quarantine(uint32_t spool, uint64_t run_id, const std::string& name,
                                 uint64_t accounted_raw) ADJSNAP_EXCLUDES(mu_);
  // Closes what the tier keeps open of a deleted run (its directories in shared spools).
  void ForgetRunDirs(uint64_t run_id) ADJSNAP_EXCLUDES(mu_);
  // The file that says a spool directory is the one adjsnapd spooled to, in each spool.
  static constexpr const char* kMarker = ".adjsnap-spool";
  struct RecordedFile {
    uint32_t spool = 0;
    uint64_t run_id = 0;
    std::string name;
  };
  // At start, once the catalog is read and before Adopt: each spool gets its marker, unless it
  // has none and not one of the files recorded in it is there. Such a spool is not the
  // filesystem adjsnapd wrote them to (a shared filesystem not mounted, a disk not attached; its
  // directory was made anew on whatever is mounted below): it fails (ENOENT), its steps stay
  // recorded (UNAVAILABLE when read), and a probe brings it back once its marker is there.
  // Probes of a claimed spool want its marker. A spool whose marker cannot be looked at because
  // its servers cannot be reached (ENOTCONN, ...) fails with that errno and is left alone too.
  void Claim(const std::vector<RecordedFile>& recorded) ADJSNAP_EXCLUDES(mu_);
  // Deletes what writes a crash interrupted: files no record names (half written, or written
  // and not yet recorded; `.tmp` files of earlier versions), with empty run directories. Never
  // a file `keep` ("<spool>/run-<id>/<name>" relative keys, see Key) names, whatever state its
  // record is in. Nothing is removed from a spool out of the rotation, nor from a directory whose
  // listing fails, even part-way (EIO, ENOTCONN; a warning names it and the errno): the next
  // start tries again. Returns the paths removed.
  std::vector<std::string> RemoveOrphans(const std::set<std::string>& keep);
  static std::string Key(uint32_t spool, uint64_t run_id, const std::string& name);
  // A file name adjsnapd writes: one path component, not "." or "..". The catalog's names are
  // checked against it before any of them becomes a path: a damaged record must not make adjsnapd
  // read, move or delete a file outside the run's spool directory.
  static bool PlainName(const std::string& name);

  // Spool health. A spool is marked failed by the write path (see the class comment) and
  // comes back when a probe succeeds.
  std::vector<SpoolStatus> SpoolStates() const ADJSNAP_EXCLUDES(mu_);
  // At least one spool works.
  bool usable() const { return usable_.load(std::memory_order_acquire); }
  // No spool is failed.
  bool all_working() const { return all_working_.load(std::memory_order_acquire); }
  // What a refusal says when no spool works: each spool, what failed it and its errno.
  std::string FailedSpools() const ADJSNAP_EXCLUDES(mu_);
  // Probes every failed spool now (`adjsnap spool probe`), on the caller's thread; returns how
  // many came back.
  int ProbeNow() ADJSNAP_EXCLUDES(mu_);
  // `listener` is called (with no lock held, on whichever thread saw it) whenever a spool fails
  // or comes back. It must stay callable as long as the tier lives.
  void AddStateListener(std::function<void()> listener) ADJSNAP_EXCLUDES(mu_);
  // Counts the spools' failures and recoveries: a change says the room may have changed.
  uint64_t changes() const { return changes_.load(std::memory_order_acquire); }
  size_t spools() const { return spools_.size(); }
  SpoolClass ClassOf(uint32_t spool) const {
    return spool < spools_.size() ? spools_[spool]->spool_class : SpoolClass::kLocal;
  }
  bool has_shared() const { return has_shared_; }
  // The working spools of `c`: bytes not yet used of their budgets.
  uint64_t room(SpoolClass c) const ADJSNAP_EXCLUDES(mu_);
  std::vector<std::string> spool_dirs() const;
  uint64_t budget() const { return budget_; }
  uint64_t used() const ADJSNAP_EXCLUDES(mu_);
  DiskIoCounters writes() const ADJSNAP_EXCLUDES(mu_);
  DiskIoCounters reads() const ADJSNAP_EXCLUDES(mu_);
  // One spool class's: its budget, use and transfers.
  uint64_t budget(SpoolClass c) const;
  uint64_t used(SpoolClass c) const ADJSNAP_EXCLUDES(mu_);
  DiskIoCounters writes(SpoolClass c) const ADJSNAP_EXCLUDES(mu_);
  DiskIoCounters reads(SpoolClass c) const ADJSNAP_EXCLUDES(mu_);
  // One spool class's cost per step file written and read (TransferSamples).
  TransferFit write_fit(SpoolClass c) const { return class_write_samples_[int(c)].Fit(); }
  TransferFit read_fit(SpoolClass c) const { return class_read_samples_[int(c)].Fit(); }

 private:
  // A descriptor closed through the seam when it goes.
  class Fd {
   public:
    Fd(SpoolIo* io, int fd) : io_(io), fd_(fd) {}
    ~Fd() {
      if (fd_ >= 0) io_->Close(fd_);
    }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    int Get() const { return fd_; }

   private:
    SpoolIo* io_;
    int fd_;
  };
  // Largest single pread/pwrite; the kernel caps one call near 2 GiB anyway.
  static constexpr uint64_t kMaxIo = 1ull << 30;
  // Copy's buffer.
  static constexpr uint64_t kCopyChunk = 8ull << 20;
  // Run directories kept open per shared spool (RunDir): those of the newest runs.
  static constexpr size_t kRunDirsKept = 64;
  struct Spool {
    std::string dir;
    SpoolClass spool_class = SpoolClass::kLocal;  // set at Open, never changed
    // Its filesystem's device at Open: a file on another means the mount went. A probe that
    // finds the spool's marker takes the device it is on then (a network filesystem mounted
    // again gets a new device number).
    std::atomic<dev_t> dev{0};
    // Claim found or wrote its marker: probes want it there.
    std::atomic<bool> claimed{false};
    // Claim failed it: its marker and every file recorded in it missing at start. Its steps
    // are accounted unread (Adopt) and its directory left alone (RemoveOrphans).
    std::atomic<bool> unmounted{false};
    uint64_t budget = 0;
    uint64_t used = 0;
    std::atomic<bool> direct{true};  // cleared the first time O_DIRECT is refused
    // Health, guarded by the tier's mu_.
    bool failed = false;
    int error = 0;
    std::string reason;
    int64_t failed_unix_ms = 0;
    std::chrono::steady_clock::time_point next_probe;
    std::chrono::milliseconds backoff{0};
    uint64_t failures = 0;
    uint64_t read_errors = 0;
    // Shared spools: run directories made in this spool, each open for the syncs of the files
    // created in it: a write costs no mkdir and no open of its directory after the run's first
    // (on a network filesystem, a round trip to its servers each). Emptied when the spool
    // fails; a run's go when it is deleted (ForgetRunDirs).
    std::map<uint64_t, std::shared_ptr<Fd>> run_dirs;
  };
  // Busy-time accounting for one direction.
  struct Busy {
    DiskIoCounters counters;
    int in_flight = 0;
    int64_t since_ns = 0;
  };
  DiskTier(std::vector<std::unique_ptr<Spool>> spools, uint64_t budget,
           const DiskTierOptions& options);
  // The write path's error: RESOURCE_EXHAUSTED when full; otherwise marks the spool failed
  // (logging it once) and returns UNAVAILABLE naming the spool, `what`, `path` and the errno.
  // FailedSpools with mu_ held (Reserve's refusals name them too).
  std::string FailedSpoolsLocked() const ADJSNAP_REQUIRES(mu_);
  Status WriteError(uint32_t spool, const char* what, const std::string& path, int err)
      ADJSNAP_EXCLUDES(mu_);
  // Marks the spool failed for `reason` (logging it once) and returns UNAVAILABLE naming the
  // spool and the reason.
  Status FailSpool(uint32_t spool, const std::string& reason, int err) ADJSNAP_EXCLUDES(mu_);
  // The read path's error for a file that may be intact but cannot be reached now (see the
  // class comment); nullopt when the error is the file's loss.
  std::optional<Status> ReadUnreachable(uint32_t spool, const char* what, const std::string& path,
                                        int err) ADJSNAP_EXCLUDES(mu_);
  // "PATH is on device M:N, not on the filesystem of DIR at start (M:N): its mount is gone".
  static std::string MovedMessage(const Spool& spool, const std::string& path, dev_t now);
  // Writes, syncs and removes a small file in the spool through the seam (files of several
  // names on a shared spool); `error`, if given, gets the errno of a failure.
  Status Probe(uint32_t spool, int* error = nullptr);
  // Marks the spool working again after a probe succeeded.
  void Recovered(uint32_t spool) ADJSNAP_EXCLUDES(mu_);
  void ProbeLoop() ADJSNAP_EXCLUDES(mu_);
  void NotifyListener() ADJSNAP_EXCLUDES(mu_);
  void UpdateUsable() ADJSNAP_REQUIRES(mu_);
  // Returns `bytes` of what the spool has accounted to its budget.
  void Unaccount(uint32_t spool, uint64_t bytes) ADJSNAP_EXCLUDES(mu_);
  std::string Path(uint32_t spool, uint64_t run_id, const std::string& name) const;
  static std::string MarkerPath(const Spool& spool) { return spool.dir + "/" + kMarker; }
  // BeginIo returns when the transfer began, for EndIo's sample of its time; EndIo takes no
  // sample when `began_ns` < 0 or nothing was moved.
  int64_t BeginIo(bool write, SpoolClass c) ADJSNAP_EXCLUDES(mu_);
  void EndIo(bool write, SpoolClass c, uint64_t bytes, int64_t began_ns) ADJSNAP_EXCLUDES(mu_);
  // Supplies the bytes [offset, offset + len) of a file being written: a pointer to them, or
  // the error that ends the write without failing the spool written to.
  using Source = std::function<Result<const char*>(uint64_t offset, uint64_t len)>;
  // Write's body, with the bytes from `source` in pieces of at most `chunk`.
  Status WriteFrom(const Space& space, uint64_t run_id, const std::string& name, uint64_t raw,
                   const Source& source, uint64_t chunk = kMaxIo) ADJSNAP_EXCLUDES(mu_);
  // The run's directory in the spool, made if it is not (null, errno set, when that fails),
  // open (Get() < 0 when it cannot be opened; then not kept).
  std::shared_ptr<Fd> RunDir(uint32_t spool, uint64_t run_id, const std::string& dir)
      ADJSNAP_EXCLUDES(mu_);
  void ForgetRunDir(uint32_t spool, uint64_t run_id) ADJSNAP_EXCLUDES(mu_);
  // Opens `path` with O_DIRECT when the spool allows it, falling back once to buffered I/O.
  int OpenFile(Spool& spool, const std::string& path, int flags);

  const std::vector<std::unique_ptr<Spool>> spools_;
  const uint64_t budget_;
  const bool has_shared_;
  SpoolIo* const io_;
  const std::chrono::milliseconds probe_min_;
  const std::chrono::milliseconds probe_max_;
  mutable Mutex mu_;  // guards Spool::used, the spools' health and the Busy records
  Busy writes_ ADJSNAP_GUARDED_BY(mu_);
  Busy reads_ ADJSNAP_GUARDED_BY(mu_);
  // The same per spool class (SpoolClass as the index): each class its own rates.
  Busy class_writes_[2] ADJSNAP_GUARDED_BY(mu_);
  Busy class_reads_[2] ADJSNAP_GUARDED_BY(mu_);
  TransferSamples class_write_samples_[2];
  TransferSamples class_read_samples_[2];
  std::atomic<bool> usable_{true};
  std::atomic<bool> all_working_{true};
  std::atomic<uint64_t> changes_{0};
  std::vector<std::function<void()>> listeners_ ADJSNAP_GUARDED_BY(mu_);
  bool stop_ ADJSNAP_GUARDED_BY(mu_) = false;
  CondVar probe_cv_;  // a spool failed, or stop_
  std::thread prober_;  // last: started once the rest is built
};

}  // namespace adjsnap
