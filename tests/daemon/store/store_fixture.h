// The Store as the store tests use it (store_test.cc, store_compression_test.cc,
// store_runs_test.cc): a real catalog, host tier and spool in a temporary directory, with a
// fault-injecting SpoolIo, and synchronous views of the asynchronous push and fetch.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "faulty_spool_io.h"
#include "adjsnap/checksum.h"
#include "store/store.h"
#include "temp_dir.h"

namespace adjsnap {

// Synchronous views of the store's asynchronous push and fetch, for tests. The answer is moved
// out of the callback: one given on another thread (a push whose pages were populated there)
// must hold no reference to the block once the caller has it.
inline Result<Store::PushTicket> Reserve(Store& store, uint64_t run_id, uint64_t step,
                                         uint64_t bytes, const Tenant& who = Tenant::Admin()) {
  auto promise = std::make_shared<std::promise<Result<Store::PushTicket>>>();
  store.BeginPush(
      run_id, step, bytes,
      [promise](Result<Store::PushTicket> t) { promise->set_value(std::move(t)); }, who);
  return promise->get_future().get();
}

inline Result<Store::FetchGrant> Fetch(Store& store, uint64_t run_id, uint64_t step, uint64_t bytes,
                                       const Tenant& who = Tenant::Admin()) {
  auto promise = std::make_shared<std::promise<Result<Store::FetchGrant>>>();
  store.BeginFetch(
      run_id, step, bytes, /*backward=*/true,
      [promise](Result<Store::FetchGrant> g) { promise->set_value(std::move(g)); }, who);
  return promise->get_future().get();
}

// Holds the catalog's writer until Release(): writes queued meanwhile wait, unwritten.
class CatalogStall {
 public:
  explicit CatalogStall(Catalog& catalog) {
    std::promise<void> inside;
    catalog.DeleteSnapshotThen(~0ull, 0, [&inside, held = release_.get_future().share()](Status) {
      inside.set_value();
      held.wait();
    });
    inside.get_future().wait();
  }
  ~CatalogStall() { Release(); }
  void Release() {
    if (!released_) release_.set_value();
    released_ = true;
  }

 private:
  std::promise<void> release_;
  bool released_ = false;
};

inline char Pattern(uint64_t step, size_t i) { return static_cast<char>(step * 31 + i % 251); }

class StoreTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kHostBytes = 1 << 20;

  void SetUp() override { Open(); }
  void TearDown() override {
    store_.reset();
    disk_.reset();
    catalog_.reset();
  }
  void Open(uint64_t disk_bytes = 64 << 20, SpoolIo* io = nullptr) {
    store_.reset();
    disk_.reset();
    catalog_.reset();
    catalog_ = std::move(Catalog::Open(dir_ + "/catalog").value());
    if (!tier_) tier_ = std::move(HostTier::Create(kHostBytes).value());
    if (disk_bytes) {
      DiskTierOptions disk_options{{dir_ + "/spool"}, disk_bytes, 0.7, io};
      if (shared_bytes_) {  // a shared spool class beside the local spool
        disk_options.shared_spools = {dir_ + "/shared"};
        disk_options.shared_budget_bytes = shared_bytes_;
      }
      disk_ = std::move(DiskTier::Open(disk_options).value());
    }
    StoreOptions options = StoreOptions::From(DefaultConfig());
    options.epoch = catalog_->BeginEpoch().value();
    options.tenant_host_share = host_share_;
    options.on_hash = on_hash_;
    options.wait_warn_after = wait_warn_after_;
    store_ = std::move(Store::Open(catalog_.get(), tier_.get(), disk_.get(), options).value());
  }
  uint64_t OpenRun(const std::string& name, uint64_t steps, uint64_t bytes,
                   v1::Layers layers = v1::LAYERS_DEFAULT, bool keep = true) {
    v1::RunSpec spec;
    spec.set_name(name);
    spec.set_steps(steps);
    spec.set_bytes_per_step(bytes);
    spec.set_layers(layers);
    spec.set_keep(keep);
    bool created = false;
    auto run = store_->OpenRun(spec, 0, &created);
    EXPECT_TRUE(run.ok()) << run.status().ToString();
    return run.ok() ? run->run_id() : 0;
  }
  // Pushes one step filled with Pattern(step, i) and commits it.
  Status Push(uint64_t id, uint64_t step, uint64_t bytes) {
    ADJSNAP_ASSIGN_OR_RETURN(Store::PushTicket t, Reserve(*store_, id, step, bytes));
    char* p = static_cast<char*>(t.block->data());
    for (size_t i = 0; i < bytes; ++i) p[i] = Pattern(step, i);
    return store_->CommitPush(t);
  }
  // Fetches one step and checks its bytes.
  Status FetchExact(uint64_t id, uint64_t step, uint64_t bytes) {
    ADJSNAP_ASSIGN_OR_RETURN(Store::FetchGrant g, Fetch(*store_, id, step, bytes));
    const char* p = static_cast<const char*>(g.block->data());
    for (size_t i = 0; i < bytes; ++i) {
      if (p[i] != Pattern(step, i)) {
        return Status::DataLoss("step " + std::to_string(step) + " byte " + std::to_string(i));
      }
    }
    store_->Consumed(id, step, g.generation);
    return Status::Ok();
  }
  v1::Tier TierOf(const std::string& run, uint64_t step) {
    auto where = store_->Locate(run, step);
    return where.ok() ? where->tier() : v1::TIER_UNSPECIFIED;
  }
  // Flips bits of byte `offset` of the (only) snapshot file in the spool; false if none.
  bool FlipSpoolByte(std::streamoff offset) {
    std::string file;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir_ + "/spool")) {
      if (e.is_regular_file() && e.path().filename() != DiskTier::kMarker) file = e.path();
    }
    if (file.empty()) return false;
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(offset);
    char c = 0;
    f.get(c);
    f.seekp(offset);
    f.put(static_cast<char>(c ^ 0x20));
    return f.good();
  }
  bool OnDisk(const std::string& run, uint64_t step) {
    auto where = store_->Locate(run, step);
    return where.ok() && where->on_disk();
  }

  testing::TempDir tmp_;
  const std::string dir_ = tmp_.path();
  // For Open(..., &faulty_io_): a member, so it outlives the store and the quarantine jobs
  // its IoPool may still run when the test body returns.
  testing::FaultySpoolIo faulty_io_;
  std::unique_ptr<HostTier> tier_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<DiskTier> disk_;
  double host_share_ = 1.0;                             // StoreOptions.tenant_host_share for Open()
  uint64_t shared_bytes_ = 0;  // for Open(): a shared spool of this budget (0: none)
  std::function<void(const void*, uint64_t)> on_hash_;  // StoreOptions.on_hash for Open()
  // StoreOptions.wait_warn_after for Open(): its deadline also wakes the tiering thread.
  std::chrono::milliseconds wait_warn_after_{10000};
  std::unique_ptr<Store> store_;
};

}  // namespace adjsnap
