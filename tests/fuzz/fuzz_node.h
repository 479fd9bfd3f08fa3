// The parts of one adjsnapd, in the fuzzing process: the same objects daemon/main.cc builds
// (catalog, host tier, optional disk tier, store, session table, and on request the data
// plane, the arena socket and the gRPC control service on a unix socket), over a private
// temporary directory. The fuzz targets feed them bytes through the same entry points a
// client reaches; no adjsnapd process is started.
//
// Threading: built and torn down on the fuzzing thread; the parts run their own threads as
// they do in the daemon.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "catalog/catalog.h"
#include "control/control_service.h"
#include "control/peer_listener.h"
#include "data_plane/arena_socket.h"
#include "data_plane/data_plane.h"
#include "disk_tier/disk_tier.h"
#include "host_tier/host_tier.h"
#include "sessions/sessions.h"
#include "store/store.h"

namespace adjsnap::fuzz {

// Prints `what` and aborts when `s` is not OK: set-up failures are the harness's, and must not
// read as findings about the input.
void Check(const Status& s, const char* what);
template <typename T>
T Take(Result<T> r, const char* what) {
  Check(r.status(), what);
  return std::move(r).value();
}

// A fresh private directory under $TMPDIR (or /tmp); removed with its contents by RemoveTree.
std::string MakeTempDir(const char* tag);
void RemoveTree(const std::string& dir);

// Logs below WARN are dropped (a fuzzer's millions of refusals would fill the terminal), and
// UCX's own warnings are silenced; set ADJSNAP_FUZZ_VERBOSE=1 to see everything.
void QuietLogs();

struct NodeOptions {
  uint64_t host_bytes = 64ull << 20;
  bool disk = false;               // a disk tier with one spool in dir/spool
  uint64_t disk_bytes = 64ull << 20;
  bool data_plane = false;
  bool arena_socket = false;
  bool control = false;            // the gRPC service on dir/adjsnap.sock, accepted by PeerListener
  std::string dir;                 // empty: a new temporary directory
};

class Node {
 public:
  static std::unique_ptr<Node> Start(const NodeOptions& options);
  ~Node();

  const std::string& dir() const { return dir_; }
  Store* store() { return store_.get(); }
  HostTier* host() { return host_.get(); }
  DiskTier* disk() { return disk_.get(); }
  SessionTable* sessions() { return &sessions_; }
  DataPlane* data_plane() { return data_plane_.get(); }
  ArenaSocket* arena() { return arena_.get(); }
  const std::string& control_socket() const { return control_socket_; }

 private:
  Node() = default;
  std::string dir_;
  bool own_dir_ = false;
  // Declaration order is construction order; destruction runs backwards, as in main.cc.
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<HostTier> host_;
  std::unique_ptr<DiskTier> disk_;
  std::unique_ptr<Store> store_;
  SessionTable sessions_;
  std::unique_ptr<DataPlane> data_plane_;
  std::unique_ptr<ArenaSocket> arena_;
  std::string control_socket_;
  std::unique_ptr<ControlService> service_;
  std::atomic<int64_t> calls_in_flight_{0};
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<PeerListener> listener_;
};

}  // namespace adjsnap::fuzz

namespace adjsnap::fuzz {

// A start of adjsnapd over the state in `dir` (catalog in dir/catalog, one spool in dir/spool),
// by the calls daemon/main.cc makes in its order: Catalog::Open, BeginEpoch, TakeHostTierKept,
// a host tier (a fresh one: `host_adopted` says whether the start "took back" the kept tier,
// so the catalog's host copies are claimed and checked against it), DiskTier::Open and
// Store::Open, which loads every record, adopts, quarantines and removes spool files. Then
// every run is scrubbed and every step fetched, as a solver's backward pass would, which reads
// and decodes the spool files. Returns the status of the start (a refusal is an answer, not a
// finding); aborts if a scrub or fetch is not answered within 10 s.
Status StartFrom(const std::string& dir, bool host_adopted);

// For the seed writers: a real run's steps, stored as a client's pushes store them.
// A smooth field of ny x nx values of `dtype` for `step` (what a wave solver pushes).
std::string Field(v1::Dtype dtype, uint64_t ny, uint64_t nx, uint64_t step);
// Pushes `bytes` as step `step` of run `run_id` through BeginPush/CommitPush; aborts on error.
void PushStep(Store* store, uint64_t run_id, uint64_t step, const std::string& bytes);
// Waits (at most 10 s, then aborts) until steps [0, steps) of run `name` ("UID:name") are on
// disk: written, synced and recorded TIER_DISK.
void WaitOnDisk(Store* store, const std::string& name, uint64_t steps);

}  // namespace adjsnap::fuzz
