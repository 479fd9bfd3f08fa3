// libadjsnap: the solver-side client of adjsnapd.
//
// A solver connects once, opens a run per adjoint computation, pushes one snapshot per time
// step during the forward pass and fetches them back in reverse during the backward pass.
//
//   auto client = adjsnap::Client::Connect().value();
//   auto run = client->OpenRun({.name = "shot-17", .steps = n, .bytes_per_step = bytes}).value();
//   for (t = 0; t < n; ++t) { step(u); client->Push(run.run_id, t, u, bytes)->WaitReleased(); }
//   for (t = n; t-- > 0;)   { client->Fetch(run.run_id, t, u, bytes); adjoint_step(u); }
//
// Thread-safety: every Client method may be called from any thread concurrently. Calls are
// handed to the client's one UCX progress thread; the calling thread blocks only in Wait*()
// and in the synchronous calls (Fetch, control-plane calls). The client never prints: every
// failure is a Status whose message says what was wrong.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "adjsnap/status.h"

namespace adjsnap {

enum class Dtype { kUnspecified = 0, kFloat32 = 1, kFloat64 = 2, kInt32 = 3, kInt64 = 4, kUint8 = 5 };
// kInFlight (Locate only): pushed, and released to the solver, but not stored yet; it is stored
// in a moment, or its push fails and says why.
enum class Tier { kUnspecified = 0, kDevice = 1, kHost = 2, kDisk = 3, kLost = 4, kInFlight = 5 };
// Compression of a run's steps (values as in the protocol). zfp: on adjsnapd's CPUs, on their way
// to the disk tier. nvCOMP (bitcomp, bitcomp-lossy, ans): where the solver is, before the push,
// into chunk frames that adjsnapd stores, moves and serves as they are (Push, FetchHandle::
// frame_bytes). libadjsnap does not compress device snapshots on the GPU yet: they go raw
// (docs/architecture.md, "Compression on the GPU").
enum class Codec {
  kNone = 0,
  kZfpReversible = 1,  // lossless, bit-exact
  kZfpRate = 2,        // codec_param: bits per value
  kZfpPrecision = 3,   // codec_param: bit planes kept
  kZfpAccuracy = 4,    // codec_param: absolute error tolerance
  kBitcomp = 5,        // lossless, bit-exact
  kBitcompLossy = 6,   // codec_param: absolute error bound (finite, > 0)
  kAns = 7,            // lossless; for fields with few distinct values
};
const char* TierName(Tier tier);

struct RunSpec {
  std::string name;             // unique per user on the node: [A-Za-z0-9._-]{1,128}
  uint64_t steps = 0;           // declared step count; 0 = unknown
  uint64_t bytes_per_step = 0;  // every push and fetch moves exactly this many bytes
  Dtype dtype = Dtype::kUnspecified;
  std::vector<uint64_t> shape = {};  // optional; must agree with bytes_per_step and dtype
  // Tiers the run may use, as DevitoPRO names them: "DiskHostDevice", "HostDevice", "DiskHost",
  // "Host", "Device", "Disk", "NoLayers". Empty: DiskHost when the daemon has a disk tier,
  // else Host. The device layer is this client's GPU pool (ClientOptions.device_mem_*): the
  // newest steps [device_boundary, N) stay there and never leave the GPU; older steps go to
  // the daemon. Needs a usable GPU (FAILED_PRECONDITION otherwise).
  std::string layers = {};
  // false: a step is released once fetched (read-once backward pass). true: steps stay until
  // deleted (checkpoint schedules read a step more than once).
  bool keep = false;
  // With both host and disk tiers full: false, a push fails; true, it waits for room.
  bool block_when_full = false;
  // zfp compression of the steps (float32/float64; reversible also int32/int64).
  Codec codec = Codec::kNone;
  double codec_param = 0;
  // false: compress as steps move to disk. true: compress each step right after it is stored
  // (the host tier then holds more steps; a fetch decodes first).
  bool compress_at_ingest = false;
  // The batch job the run belongs to; empty: $SLURM_JOB_ID when set. The Slurm epilog deletes
  // a job's runs when it ends (deploy/slurm).
  std::string job = {};
  // Scan each push for NaN and infinities (dtype float32 or float64; on the GPU for device
  // pushes) and refuse it with INVALID_ARGUMENT naming the step and the element.
  bool check_finite = false;
  // A push of a step already stored replaces it in the same request (no DeleteSnapshot round
  // trip): for checkpoint slots a schedule reuses. Not with a Device layer.
  bool overwrite = false;
  // Which spool class of the disk tier takes the steps (needs a Disk layer): "" adjsnapd's
  // reverse-order placement over both; "local" the node's spools; "shared" the shared spools.
  // A preference: a step goes to the other class when the named one is full or failed.
  std::string spool_class = {};
};

struct RunInfo {
  uint64_t run_id = 0;
  RunSpec spec;
  bool closed = false;
  bool created = false;  // OpenRun: false when it attached to an existing run
  uint64_t snapshots = 0;
  uint64_t stored_bytes = 0;
  // Steps below this go to disk, the rest stay in host memory (reverse-order placement;
  // 0 without a declared step count or a disk layer).
  uint64_t host_boundary = 0;
  // Device layers: steps [device_boundary, N) stay in the GPU pool of the client that created
  // the run. N when none do; 0 with N unknown (the pool then keeps the newest steps pushed).
  uint64_t device_boundary = 0;
  uint64_t lost_snapshots = 0;  // snapshots whose bytes are gone (counted in `snapshots`)
  // Snapshots stored compressed with the run's codec; 0 with a codec set and snapshots stored:
  // the codec was never applied (on-demotion compression, and no step left host memory).
  uint64_t compressed_snapshots = 0;
  // Empty while the run is whole; else the first refused push or lost step since adjsnapd started.
  std::string failure;
};

struct Location {
  uint64_t step = 0;
  Tier tier = Tier::kUnspecified;
  uint64_t raw_bytes = 0;
  uint64_t stored_bytes = 0;
  uint64_t checksum = 0;  // valid when checksum_recorded
  bool checksum_recorded = false;
  bool on_disk = false;   // a durable copy is in the daemon's disk spool
  uint64_t device_session = 0;  // kDevice: the session whose GPU pool holds the step
  Codec codec = Codec::kNone;  // how that copy is compressed (stored_bytes is its size)
};

// A tier's cost per transfer in one direction, `latency_seconds + bytes / bytes_per_second`,
// fitted by the daemon over the tier's last `samples` transfers (at most 64), of min_bytes to
// max_bytes each. samples 0: none yet.
struct TransferCost {
  double latency_seconds = 0;
  double bytes_per_second = 0;
  uint64_t samples = 0;
  uint64_t min_bytes = 0;
  uint64_t max_bytes = 0;
  // The fit speaks for `bytes`: within 2x of the sizes it came from (a rate taken from tiny
  // transfers is mostly their latency and says nothing of large ones).
  bool Covers(uint64_t bytes) const;
  // Seconds to move `bytes`; meaningful where Covers(bytes).
  double Seconds(uint64_t bytes) const;
};

// One of the daemon's tiers as `Client::Tiers` reports it.
struct TierInfo {
  Tier tier = Tier::kUnspecified;
  uint64_t budget_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t snapshots = 0;
  // Measured by the daemon over every transfer since it started; 0 until the first one: bytes
  // over the time they took, whatever their sizes. write_fit and read_fit price a snapshot of
  // a given size.
  double write_bytes_per_second = 0;
  double read_bytes_per_second = 0;
  // Disk tiers: "local" or "shared" (a node with shared spools reports one TierInfo per class).
  std::string spool_class = {};
  TransferCost write_fit = {};
  TransferCost read_fit = {};
};

struct ClientOptions {
  std::string socket_path;  // empty: $ADJSNAP_SOCKET, else /run/adjsnap/adjsnap.sock if it exists, else
                            // the per-user default (see docs/operations.md)
  std::string client_name;  // shown in daemon logs
  // Map the daemon's host tier when it allows (same node, same uid) and copy snapshots
  // straight into it; otherwise, or when false, bytes travel as UCX messages (one copy by the
  // transport). ADJSNAP_DATA_PATH=ucx in the environment also turns mapping off.
  bool map_host_tier = true;
  // The device tier's pool of GPU memory, allocated when the first run with a device layer
  // opens: device_mem_bytes when nonzero, else device_mem_perc of the GPU's free memory then.
  // ADJSNAP_DEVICE_MEM ("0.5" or "8G") overrides both.
  double device_mem_perc = 0.7;
  uint64_t device_mem_bytes = 0;
  // When adjsnapd goes away (a restart, an upgrade), how long a push or fetch waits for libadjsnap
  // to reconnect, from when it began waiting, before it fails with UNAVAILABLE naming the
  // socket. Meanwhile it waits and is sent again on the new session: the caller sees a delay.
  // libadjsnap itself goes on reconnecting, with backoff, until a session is open (its new
  // session names the client's runs, which adjsnapd would otherwise remove as orphans). 0 = fail
  // at once, and no reconnect. ADJSNAP_RECONNECT_TIMEOUT (seconds) overrides it.
  double reconnect_timeout_s = 60;
  // Threads that copy one host push into the mapped tier, or one fetch out of it, when it is
  // 4 MiB or more (the calling library's loop thread included): 0 = min(4, the cores this
  // process may run on); at most 64. ADJSNAP_COPY_THREADS overrides it. docs/architecture.md,
  // "Copy threads".
  int copy_threads = 0;
  // How long PushHandle::WaitReleased/WaitStored, FetchHandle::Wait and Fetch wait when the
  // caller gives no limit, before they fail DEADLINE_EXCEEDED saying what adjsnapd reports the
  // step waits for; 0 = for ever. ADJSNAP_WAIT_TIMEOUT (seconds) overrides it.
  double wait_timeout_s = 600;
};

// A wait with no time limit (PushHandle::WaitReleased(kWaitForever), ...).
inline constexpr std::chrono::milliseconds kWaitForever = std::chrono::milliseconds::max();

// How a client's snapshot bytes travel.
enum class DataPath {
  kMappedHostTier,  // one memcpy into/out of daemon tier memory mapped in this process
  kUcx,             // UCX active-message rendezvous (CMA on the same node, tcp across nodes)
};

namespace detail {
struct OpState;
}

// The two completions of a push. *Released*: the caller's buffer may be overwritten.
// *Stored*: the snapshot is in its tier and in the catalog. A solver waits only on released.
// Copyable; all copies observe the same push.
class PushHandle {
 public:
  PushHandle() = default;
  explicit PushHandle(std::shared_ptr<detail::OpState> state) : state_(std::move(state)) {}
  // Blocks until the buffer is reusable; an error means the push failed before its bytes left.
  // At most ClientOptions.wait_timeout_s, or `timeout` (kWaitForever: no limit): past it,
  // DEADLINE_EXCEEDED naming the step and what adjsnapd reports the push waits for (host room,
  // and what will make it). The push goes on: its buffer stays in use until a wait returns OK
  // or another error (or the client is destroyed).
  Status WaitReleased() const;
  Status WaitReleased(std::chrono::milliseconds timeout) const;
  // Blocks until the daemon stored the snapshot or rejected it (the status says why); the same
  // limits.
  Status WaitStored() const;
  Status WaitStored(std::chrono::milliseconds timeout) const;
  bool released() const;
  bool stored() const;

 private:
  std::shared_ptr<detail::OpState> state_;
};

// An asynchronous fetch; the caller's buffer is filled when Wait() returns OK.
class FetchHandle {
 public:
  FetchHandle() = default;
  explicit FetchHandle(std::shared_ptr<detail::OpState> state) : state_(std::move(state)) {}
  // At most ClientOptions.wait_timeout_s, or `timeout` (kWaitForever: no limit): past it,
  // DEADLINE_EXCEEDED naming the step and what adjsnapd reports the fetch waits for (a disk read,
  // host room for it). The fetch goes on: it may still write the buffer until a wait returns
  // OK or another error (or the client is destroyed).
  Status Wait() const;
  Status Wait(std::chrono::milliseconds timeout) const;
  bool done() const;
  // After Wait() returned OK: 0 when the buffer holds the raw step; for a step of an nvCOMP
  // run (Codec::kBitcomp, ...) that was pushed as a chunk frame, the frame's size, which the
  // buffer's first bytes hold (proto/adjsnap/chunk_frame.h) for the caller to decode.
  uint64_t frame_bytes() const;

 private:
  std::shared_ptr<detail::OpState> state_;
};

class Client {
 public:
  // Opens a control-plane session and a UCX endpoint bound to it. UNAVAILABLE, with how to
  // start adjsnapd, when no daemon answers on the socket.
  static Result<std::unique_ptr<Client>> Connect(const ClientOptions& options = {});
  // Closes the session. Pushes not yet stored may be dropped; wait on them first.
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  Result<RunInfo> OpenRun(const RunSpec& spec);
  Status CloseRun(const std::string& name);
  Status DeleteRun(const std::string& name);
  // Removes one snapshot; the step may be pushed again afterwards.
  Status DeleteSnapshot(const std::string& name, uint64_t step);
  Result<std::vector<RunInfo>> ListRuns();
  Result<Location> Locate(const std::string& name, uint64_t step);
  // Every stored step of a run, in step order.
  Result<std::vector<Location>> ListSnapshots(const std::string& name);
  // Asks the daemon to read these steps from disk into host memory ahead of their fetches
  // (it also reads ahead by itself, from the backward pace). Returns the reads started.
  Result<uint64_t> Prefetch(const std::string& name, const std::vector<uint64_t>& steps);
  // The daemon's tiers (host, then disk when it has one): budgets, use, measured bandwidths;
  // then this client's device pool once a device-layer run allocated it (used = slots
  // reserved by runs, snapshots = steps held; no bandwidths).
  Result<std::vector<TierInfo>> Tiers();

  // Starts a push of `bytes` bytes at `data` as step `step`. `data` must stay untouched until
  // the handle is released. Host memory crosses with at most one CPU copy. For a run of an
  // nvCOMP codec, `bytes` may be fewer than bytes_per_step: a chunk frame of the run's codec
  // (proto/adjsnap/chunk_frame.h), which adjsnapd checks, stores and serves back as it is
  // (FetchHandle::frame_bytes); a step that did not shrink is pushed raw.
  Result<PushHandle> Push(uint64_t run_id, uint64_t step, const void* data, size_t bytes);
  // Starts a fetch of step `step` into `data` (exactly bytes_per_step bytes). A step this
  // client is still pushing is fetched once that push is stored: a client reads what it wrote.
  Result<FetchHandle> FetchAsync(uint64_t run_id, uint64_t step, void* data, size_t bytes);
  // FetchAsync + Wait (within ClientOptions.wait_timeout_s; past it the fetch may still write
  // `data`, until the client is destroyed).
  Status Fetch(uint64_t run_id, uint64_t step, void* data, size_t bytes);

  // GPU (CUDA) memory. `stream` is the cudaStream_t the solver works on (null: the legacy
  // default stream); the copy is ordered after the work already on it. With the host tier
  // mapped, the GPU's copy engine moves the bytes straight to or from daemon tier memory
  // (registered with cudaHostRegister on first use): no CPU copy; a push is *released* and a
  // fetch complete when the copy on the stream finished. Without the mapping (another uid,
  // ADJSNAP_DATA_PATH=ucx) the bytes go over UCX, which takes the device buffer itself where it
  // is CUDA-aware (the libucx-cu13 wheel's UCX, on a node with the NVIDIA driver), else through
  // host memory; the call returns once released (push) or filled (fetch).
  // FAILED_PRECONDITION from a libadjsnap built without CUDA.
  Result<PushHandle> PushDevice(uint64_t run_id, uint64_t step, const void* device_data,
                                size_t bytes, void* stream = nullptr);
  Result<FetchHandle> FetchDeviceAsync(uint64_t run_id, uint64_t step, void* device_data,
                                       size_t bytes, void* stream = nullptr);

  const std::string& socket_path() const;
  // See ClientOptions.reconnect_timeout_s; from now on.
  void set_reconnect_timeout(double seconds);
  DataPath data_path() const;
  // Why the host tier is not mapped ("" when it is).
  const std::string& data_path_reason() const;
  // The link to adjsnapd's data plane now: for a copied-path client, the UCX transports its
  // endpoint uses, one "transport/device" per lane, comma-separated ("sysv/memory", "tcp/lo"),
  // as UCX reports its lanes (ucp_ep_print_info); for a mapped client "unix/session-socket"
  // (its messages go over its session socket, with no UCX endpoint); "" when none is open.
  std::string data_transports() const;
  // How many threads copy a large host push or fetch on the mapped path (ClientOptions).
  int copy_threads() const;

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace adjsnap
