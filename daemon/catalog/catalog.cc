#include "catalog/catalog.h"

#include <pwd.h>
#include <rocksdb/write_batch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "adjsnap/thread_name.h"

namespace adjsnap {
namespace {

void AppendBe64(std::string* s, uint64_t v) {
  for (int i = 7; i >= 0; --i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t ReadBe64(const std::string& s) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8 && i < s.size(); ++i) v = (v << 8) | static_cast<unsigned char>(s[i]);
  return v;
}

std::string RunKey(uint64_t run_id) {
  std::string k = "r:";
  AppendBe64(&k, run_id);
  return k;
}

std::string SnapshotPrefix(uint64_t run_id) {
  std::string k = "s:";
  AppendBe64(&k, run_id);
  return k;
}

std::string SnapshotKey(uint64_t run_id, uint64_t step) {
  std::string k = SnapshotPrefix(run_id);
  AppendBe64(&k, step);
  return k;
}

Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::Ok();
  return Status::Internal("catalog " + what + " failed: " + s.ToString());
}

// The name of `uid`, or its number for a uid the system has no name for.
std::string UserName(uid_t uid) {
  struct passwd pw;
  struct passwd* found = nullptr;
  char buf[4096];
  if (getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found != nullptr) return found->pw_name;
  return std::to_string(uid);
}

// "NAME (uid N)".
std::string Who(uid_t uid) {
  std::string name = UserName(uid);
  return name == std::to_string(uid) ? "uid " + name : name + " (uid " + std::to_string(uid) + ")";
}

// The first path opening a catalog at `dir` needs and this process may not use: `dir` (or,
// while it does not exist, the nearest directory above it, where it is to be created), then
// each file in it, which RocksDB opens for writing. Empty when there is none.
std::string NotAccessible(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::path p = dir;
  while (p.has_relative_path() && !std::filesystem::exists(p, ec)) p = p.parent_path();
  if (access(p.c_str(), R_OK | W_OK | X_OK) != 0 && errno == EACCES) return p.string();
  if (p != dir) return "";
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (access(e.path().c_str(), R_OK | W_OK) != 0 && errno == EACCES) return e.path().string();
  }
  return "";
}

// Why opening the catalog at `dir` failed, for the operator: a permission problem names the
// path and its owner (a catalog left by an adjsnapd run as root, say, in the state_dir of the
// service's user); a lock RocksDB could not take means another adjsnapd holds the catalog.
Status OpenFailure(const std::string& dir, const rocksdb::Status& s) {
  const std::string what = "opening catalog at '" + dir + "' failed: ";
  std::string denied = NotAccessible(dir);
  struct stat st {};
  if (!denied.empty() && stat(denied.c_str(), &st) == 0) {
    return Status::PermissionDenied(what + "permission denied: '" + denied + "' belongs to " +
                                    Who(st.st_uid) + ", and this adjsnapd runs as " +
                                    Who(geteuid()) + "; chown -R the state_dir to " +
                                    UserName(geteuid()) + ", or choose another state_dir (" +
                                    s.ToString() + ")");
  }
  std::string text = s.ToString();
  bool lock = s.IsIOError() && (text.find("lock") != std::string::npos ||
                                text.find("LOCK") != std::string::npos);
  return Status::Unavailable(what + text +
                             (lock ? " (is another adjsnapd using this state_dir?)" : ""));
}

}  // namespace

Result<std::unique_ptr<Catalog>> Catalog::Open(const std::string& dir) {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.paranoid_checks = true;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, dir, &raw);
  if (!s.ok()) return OpenFailure(dir, s);
  std::unique_ptr<rocksdb::DB> db(raw);
  std::string value;
  s = db->Get(rocksdb::ReadOptions(), "m:format", &value);
  if (!s.ok() && !s.IsNotFound()) return FromRocks(s, "read of m:format");
  uint64_t format = kFormatVersion;  // a new catalog
  if (s.ok()) {
    format = ReadBe64(value);
  } else {
    // No marker: new, or written by an adjsnapd from before format versions (format 1).
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
    it->SeekToFirst();
    if (it->Valid()) format = 1;
    ADJSNAP_RETURN_IF_ERROR(FromRocks(it->status(), "scan"));
  }
  if (format > kFormatVersion) {
    return Status::FailedPrecondition(
        "catalog at '" + dir + "' has format version " + std::to_string(format) +
        ", newer than this adjsnapd's " + std::to_string(kFormatVersion) +
        " (a newer adjsnapd wrote it): run that adjsnapd or a newer one, or move the state_dir aside "
        "to start empty");
  }
  if (format != kFormatVersion || !s.ok()) {
    std::string encoded;
    AppendBe64(&encoded, kFormatVersion);
    rocksdb::WriteOptions w;
    w.sync = true;
    ADJSNAP_RETURN_IF_ERROR(FromRocks(db->Put(w, "m:format", encoded), "write of m:format"));
  }
  return std::unique_ptr<Catalog>(new Catalog(std::move(db), format));
}

Catalog::Catalog(std::unique_ptr<rocksdb::DB> db, uint64_t opened_format)
    : db_(std::move(db)),
      opened_format_(opened_format),
      writer_(NamedThread("adjsnap-catalog", [this] { WriterLoop(); })) {}

Catalog::~Catalog() {
  {
    MutexLock lock(writer_mu_);
    stopping_ = true;
  }
  writer_cv_.NotifyAll();
  writer_.join();  // after writing what was queued
}

void Catalog::Enqueue(Write w) {
  {
    MutexLock lock(writer_mu_);
    queue_.push_back(std::move(w));
    ++counts_.queued;
  }
  writer_cv_.NotifyAll();
}

namespace {

void AddOps(rocksdb::WriteBatch* wb, const std::vector<Catalog::Op>& ops) {
  for (const Catalog::Op& op : ops) {
    switch (op.kind) {
      case Catalog::Op::kPut:
        wb->Put(op.key, op.value);
        break;
      case Catalog::Op::kDelete:
        wb->Delete(op.key);
        break;
      case Catalog::Op::kDeleteRange:
        wb->DeleteRange(op.key, op.value);
        break;
    }
  }
}

}  // namespace

Status Catalog::Apply(std::vector<Op> ops, bool sync, std::string what) {
  {
    MutexLock lock(writer_mu_);
    if (!writing_ && queue_.empty()) {
      // Nothing queued nor being written: this write is next in order, and makes itself
      // rather than wake the writer thread and wait for it (one RocksDB write, not two thread
      // hand-offs as well).
      writing_ = true;
      ++counts_.queued;
      lock.Unlock();
      rocksdb::WriteBatch wb;
      AddOps(&wb, ops);
      rocksdb::WriteOptions options;
      options.sync = sync;
      Status written = FromRocks(db_->Write(options, &wb), what);
      lock.Lock();
      writing_ = false;
      ++counts_.written;
      ++counts_.batches;
      writer_cv_.NotifyAll();  // the writer thread, for what queued meanwhile; Flush
      return written;
    }
  }
  Status result;
  bool answered = false;
  Mutex mu;
  CondVar cv;
  Enqueue(Write{std::move(ops), sync, std::move(what), [&](Status s) {
                  MutexLock lock(mu);
                  result = std::move(s);
                  answered = true;
                  cv.NotifyAll();
                }});
  MutexLock lock(mu);
  cv.Wait(mu, [&]() ADJSNAP_REQUIRES(mu) { return answered; });
  return result;
}

void Catalog::WriterLoop() {
  MutexLock lock(writer_mu_);
  for (;;) {
    writer_cv_.Wait(writer_mu_, [&]() ADJSNAP_REQUIRES(writer_mu_) {
      return !writing_ && (stopping_ || !queue_.empty());
    });
    if (queue_.empty()) return;  // stopping, and everything queued is written
    std::deque<Write> batch;
    batch.swap(queue_);
    writing_ = true;
    lock.Unlock();
    rocksdb::WriteBatch wb;
    rocksdb::WriteOptions options;
    for (const Write& w : batch) {
      options.sync = options.sync || w.sync;
      AddOps(&wb, w.ops);
    }
    rocksdb::Status written = db_->Write(options, &wb);
    for (Write& w : batch) w.done(FromRocks(written, w.what));
    lock.Lock();
    writing_ = false;
    counts_.written += batch.size();
    ++counts_.batches;
    writer_cv_.NotifyAll();  // Flush; a waiting write that makes itself
  }
}

void Catalog::Flush() {
  MutexLock lock(writer_mu_);
  uint64_t target = counts_.queued;
  writer_cv_.Wait(writer_mu_,
                  [&]() ADJSNAP_REQUIRES(writer_mu_) { return counts_.written >= target; });
}

Catalog::WriterCounts Catalog::writer_counts() {
  MutexLock lock(writer_mu_);
  return counts_;
}

Status Catalog::PutHostTierKept(const v1::HostTierKept& kept,
                                const std::vector<v1::SnapshotRecord>& snapshots) {
  std::vector<Op> ops;
  for (const auto& snap : snapshots) {
    ops.push_back({Op::kPut, SnapshotKey(snap.run_id(), snap.step()), snap.SerializeAsString()});
  }
  ops.push_back({Op::kPut, "m:host_tier", kept.SerializeAsString()});
  return Apply(std::move(ops), /*sync=*/true, "write of the kept host tier");
}

Result<std::optional<v1::HostTierKept>> Catalog::TakeHostTierKept() {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), "m:host_tier", &value);
  if (s.IsNotFound()) return std::optional<v1::HostTierKept>();
  ADJSNAP_RETURN_IF_ERROR(FromRocks(s, "read of m:host_tier"));
  v1::HostTierKept kept;
  if (!kept.ParseFromString(value)) {
    return Status::DataLoss("catalog key m:host_tier does not parse");
  }
  rocksdb::WriteOptions w;
  w.sync = true;
  ADJSNAP_RETURN_IF_ERROR(FromRocks(db_->Delete(w, "m:host_tier"), "delete of m:host_tier"));
  return std::optional<v1::HostTierKept>(std::move(kept));
}

Result<uint64_t> Catalog::Increment(const std::string& key) {
  MutexLock lock(mu_);
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), key, &value);
  if (!s.ok() && !s.IsNotFound()) return FromRocks(s, "read of " + key);
  uint64_t next = (s.ok() ? ReadBe64(value) : 0) + 1;
  std::string encoded;
  AppendBe64(&encoded, next);
  rocksdb::WriteOptions w;
  w.sync = true;  // ids and epochs must never repeat after a crash
  ADJSNAP_RETURN_IF_ERROR(FromRocks(db_->Put(w, key, encoded), "write of " + key));
  return next;
}

Result<uint64_t> Catalog::BeginEpoch() { return Increment("m:epoch"); }
Result<uint64_t> Catalog::AllocateRunId() { return Increment("m:next_run_id"); }

namespace {

std::string RunName(uint64_t run_id) { return "run " + std::to_string(run_id); }
std::string SnapshotName(uint64_t run_id, uint64_t step) {
  return "snapshot " + std::to_string(run_id) + "/" + std::to_string(step);
}

}  // namespace

Status Catalog::PutRun(const v1::RunRecord& run) {
  return Apply({{Op::kPut, RunKey(run.run_id()), run.SerializeAsString()}}, false,
               "write of " + RunName(run.run_id()));
}

Status Catalog::PutSnapshot(const v1::SnapshotRecord& snap) {
  return Apply({{Op::kPut, SnapshotKey(snap.run_id(), snap.step()), snap.SerializeAsString()}},
               false, "write of " + SnapshotName(snap.run_id(), snap.step()));
}

void Catalog::PutRunThen(const v1::RunRecord& run, Done done) {
  Enqueue(Write{{{Op::kPut, RunKey(run.run_id()), run.SerializeAsString()}},
                false,
                "write of " + RunName(run.run_id()),
                std::move(done)});
}

void Catalog::PutSnapshotThen(const v1::SnapshotRecord& snap, Done done) {
  Enqueue(Write{{{Op::kPut, SnapshotKey(snap.run_id(), snap.step()), snap.SerializeAsString()}},
                false,
                "write of " + SnapshotName(snap.run_id(), snap.step()),
                std::move(done)});
}

namespace {

std::vector<Catalog::Op> RunDeletion(uint64_t run_id) {
  return {{Catalog::Op::kDelete, RunKey(run_id), {}},
          {Catalog::Op::kDeleteRange, SnapshotPrefix(run_id), SnapshotPrefix(run_id + 1)}};
}

}  // namespace

Status Catalog::DeleteRun(uint64_t run_id) {
  return Apply(RunDeletion(run_id), false, "delete of " + RunName(run_id));
}

void Catalog::DeleteRunThen(uint64_t run_id, Done done) {
  Enqueue(Write{RunDeletion(run_id), false, "delete of " + RunName(run_id), std::move(done)});
}

void Catalog::DeleteSnapshotThen(uint64_t run_id, uint64_t step, Done done) {
  Enqueue(Write{{{Op::kDelete, SnapshotKey(run_id, step), {}}},
                false,
                "delete of " + SnapshotName(run_id, step),
                std::move(done)});
}

Status Catalog::LoadAll(std::vector<v1::RunRecord>* runs,
                        std::vector<v1::SnapshotRecord>* snapshots) {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek("r:"); it->Valid() && it->key().starts_with("r:"); it->Next()) {
    v1::RunRecord r;
    if (!r.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return Status::DataLoss("catalog run record at key " + it->key().ToString(true) +
                              " does not parse");
    }
    runs->push_back(std::move(r));
  }
  for (it->Seek("s:"); it->Valid() && it->key().starts_with("s:"); it->Next()) {
    v1::SnapshotRecord s;
    if (!s.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return Status::DataLoss("catalog snapshot record at key " + it->key().ToString(true) +
                              " does not parse");
    }
    snapshots->push_back(std::move(s));
  }
  return FromRocks(it->status(), "scan");
}

}  // namespace adjsnap
