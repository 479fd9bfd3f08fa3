// Tenancy with two real uids: a solver of root's and a second user created for the test, who
// runs tests/integration/tenant_probe.cc as a hostile tenant.
// Skipped, saying why, when the test is not root (creating a user and switching to it needs it).
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "raw_peer.h"
#include "sanitizer.h"
#include "adjsnap/client.h"
#include "adjsnap_fixture.h"

namespace adjsnap::testing {
namespace {

constexpr const char* kTenant = "adjsnap-tenant-b";

class TenancyTest : public AdjsnapTest {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(Start({})); }
  // (Re)starts adjsnapd with `args`.
  void Start(const std::vector<std::string>& args) {
    if (geteuid() != 0) GTEST_SKIP() << "creates a user and runs a client as it: needs root";
    std::optional<User> user = EnsureUser(kTenant);
    ASSERT_TRUE(user.has_value());
    uid_ = user->uid;
    gid_ = user->gid;
    ASSERT_EQ(chmod(dir().c_str(), 0711), 0);  // the tenant reaches the socket inside
    StartDaemon(Options("64M", args));
  }
  // Runs tenant_probe as the tenant; its fields.
  std::map<std::string, std::string> Probe(const std::vector<std::string>& args) {
    const bool failed_before = HasFailure();
    auto fields = ProbeAs(User{uid_, gid_}, daemon().socket(), args);
    if (!failed_before && HasFailure()) ADD_FAILURE() << "adjsnapd's log: " << daemon().Log();
    return fields;
  }

  // Root's solver pushes `steps` steps (pattern seed 1) and, unless `keep`, deletes them.
  void PushAndDeleteAVictimRun(Client* a, uint64_t steps, uint64_t bytes, bool keep = false) {
    RunSpec spec = Spec("victim", steps, bytes);
    spec.keep = true;
    RunInfo run = OpenRun(*a, spec);
    ASSERT_NE(run.run_id, 0u);
    std::vector<char> step(bytes);
    for (uint64_t t = 0; t < steps; ++t) {
      FillPattern(step.data(), bytes, 1, t);
      auto h = a->Push(run.run_id, t, step.data(), bytes);
      ASSERT_TRUE(h.ok() && h->WaitStored().ok());
    }
    if (!keep) {
      ASSERT_TRUE(a->DeleteRun("victim").ok());
    }
  }

  uid_t uid_ = 0;
  gid_t gid_ = 0;
};

// Per-uid arenas (the default): the tenant maps an arena of its own. It sends the mapped
// path's Reserve and Commit without copying anything, fetches what was "committed", pushes
// honestly into the blocks, and then reads its whole arena: none of root's freed bytes
// anywhere, only zeros and its own.
TEST_F(TenancyTest, EachUidMapsAnArenaThatHoldsOnlyItsOwnBytes) {
  ASSERT_NO_FATAL_FAILURE(Start({"--tenant-host-share", "1"}));
  constexpr uint64_t kSteps = 48, kBytes = 1 << 20;
  {
    Client* a = Connect();
    ASSERT_NE(a, nullptr);
    ASSERT_EQ(a->data_path(), DataPath::kMappedHostTier);
    ASSERT_NO_FATAL_FAILURE(PushAndDeleteAVictimRun(a, kSteps, kBytes));
    ReleaseClients();
  }
  auto f = Probe({"replay", std::to_string(kSteps), std::to_string(kBytes)});
  EXPECT_EQ(f["linked"], "1");  // a session socket: its own arena is its to map
  EXPECT_EQ(f["open_run"], "0");
  EXPECT_EQ(f["reserve_refused"], "0");  // its own arena: the mapped path is its to use
  EXPECT_EQ(f["mapped"], "1");           // the tenant's client maps its arena
  EXPECT_EQ(f["victim_fetched"], "0");   // what it "committed" without copying is not root's
  EXPECT_EQ(f["exact"], std::to_string(kSteps));
  auto scan = Probe({"scan", std::to_string(kSteps), std::to_string(kBytes)});
  EXPECT_EQ(scan["arena_code"], "0");
  EXPECT_EQ(scan["victim_pages"], "0");
  // The scan can see: its own last pushes are still in its arena.
  EXPECT_NE(scan["arena_nonzero_pages"], "0");
  // Root's live steps are not in the tenant's arena either.
  Client* a = Connect();
  ASSERT_NE(a, nullptr);
  ASSERT_NO_FATAL_FAILURE(PushAndDeleteAVictimRun(a, 8, kBytes, /*keep=*/true));
  scan = Probe({"scan", std::to_string(kSteps), std::to_string(kBytes)});
  EXPECT_EQ(scan["victim_pages"], "0");
}

// With host_arenas = "shared" (one arena for every tenant), the tenant may not use the mapped
// path at all: the arena socket refuses it a session socket, every mapped-path message on a
// UCX endpoint is refused, nothing is stored, and its own pushes into the reused blocks come
// back as its bytes only. Its copied path needs UCX's tcp transport, which adjsnapd and libadjsnap
// leave out unless UCX_TLS says otherwise (docs/operations.md, "Ports"): here it does.
TEST_F(TenancyTest, ASharedArenaRefusesTheMappedPathToAnotherUser) {
  setenv("UCX_TLS", "tcp", 1);  // the daemon and the probe inherit it
  struct Unset {
    ~Unset() { unsetenv("UCX_TLS"); }
  } unset;
  ASSERT_NO_FATAL_FAILURE(Start({"--tenant-host-share", "1", "--host-arenas", "shared"}));
  constexpr uint64_t kSteps = 48, kBytes = 1 << 20;
  {
    Client* a = Connect();
    ASSERT_NE(a, nullptr);
    ASSERT_EQ(a->data_path(), DataPath::kMappedHostTier);  // root maps the host tier
    ASSERT_NO_FATAL_FAILURE(PushAndDeleteAVictimRun(a, kSteps, kBytes));
    ReleaseClients();  // root's solver is gone before the tenant comes
  }
  auto f = Probe({"replay", std::to_string(kSteps), std::to_string(kBytes)});
  EXPECT_EQ(f["linked"], "0");
  EXPECT_NE(f["link_refused"].find("the mapped host tier is shared only with uid"),
            std::string::npos)
      << f["link_refused"];
  EXPECT_EQ(f["hello"], "0");
  EXPECT_EQ(f["open_run"], "0");
  EXPECT_EQ(f["reserve_refused"], std::to_string(kSteps));
  EXPECT_EQ(f["commit_refused"], std::to_string(kSteps));
  EXPECT_NE(f["reserve_message"].find("belongs to the mapped host-tier path"), std::string::npos)
      << f["reserve_message"];
  EXPECT_EQ(f["mapped"], "0");  // the tenant's client uses the copied path
  EXPECT_EQ(f["fetch_not_found"], std::to_string(kSteps));
  EXPECT_EQ(f["exact"], std::to_string(kSteps));
  EXPECT_NE(daemon().Log().find("rejected (mapped-path message from an untrusted uid)"),
            std::string::npos);
  auto scan = Probe({"scan", std::to_string(kSteps), std::to_string(kBytes)});
  EXPECT_EQ(scan["arena_code"], std::to_string(static_cast<int>(Code::kPermissionDenied)));
}

// A session token works only for the uid that opened the session: another user who learned it
// cannot close the session over gRPC nor use it over UCX, and the session keeps serving its
// owner.
TEST_F(TenancyTest, AnotherUserCannotCloseASessionWithItsToken) {
  std::string error;
  auto owner = RawPeer::Open(stub(), &error);
  ASSERT_NE(owner, nullptr) << error;
  auto f = Probe({"close", std::to_string(owner->session().session_id()),
                  std::to_string(owner->session().token())});
  EXPECT_EQ(f["close"], std::to_string(static_cast<int>(grpc::StatusCode::PERMISSION_DENIED)));
  EXPECT_NE(f["close_message"].find("belongs to another user"), std::string::npos)
      << f["close_message"];
  // On the data plane, the stolen id and token from the tenant's own endpoint: never answered.
  std::string hex;
  for (unsigned char c : owner->session().data_plane_worker_address()) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", c);
    hex += b;
  }
  auto h = Probe({"hello", hex, std::to_string(owner->session().session_id()),
                  std::to_string(owner->session().token())});
  EXPECT_EQ(h["replies"], "0");
  if (h["connected"] == "1") {  // UCX transports another uid can reach (UCX_TLS with tcp)
    EXPECT_NE(daemon().Log().find("rejected (from an endpoint that no session created)"),
              std::string::npos);
  }
  wire::HelloRequest hello{wire::MakeHeader(wire::kHello, owner->session().token(), 5),
                           owner->session().session_id()};
  owner->Send(wire::kHello, &hello, sizeof hello);
  auto r = owner->WaitReply(5);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->code, 0) << Message(*r);  // still open: the owner's Hello is answered
}

// What adjsnapd and adjsnap write is private: another user can read neither the catalog, the
// spool nor a dump (all as the owner left them, whatever the umask).
TEST_F(TenancyTest, AnotherUserCannotReadTheStateTheSpoolOrADump) {
  Client* a = Connect();
  ASSERT_NE(a, nullptr);
  RunSpec spec = Spec("secret", 2, 8192);
  spec.layers = "Disk";
  spec.keep = true;
  RunInfo run = OpenRun(*a, spec);
  ASSERT_NE(run.run_id, 0u);
  std::vector<char> step(8192, 's');
  for (uint64_t t = 0; t < 2; ++t) {
    auto h = a->Push(run.run_id, t, step.data(), step.size());
    ASSERT_TRUE(h.ok() && h->WaitStored().ok());
  }
  std::string dump = dir() + "/dump", out, err;
  mode_t old = umask(0);
  int rc = RunProgram(
      {ADJSNAP_BINARY, "--socket", daemon().socket(), "dump", "secret", "--to", dump}, &out, &err);
  umask(old);
  ASSERT_EQ(rc, 0) << err;
  std::string state = dir() + "/state";
  auto f = Probe({"read", state, state + "/catalog", state + "/spool", dump,
                  dump + "/manifest.json", dump + "/step-00000000.npy"});
  for (const std::string& path : {state, state + "/catalog", state + "/spool", dump,
                                  dump + "/manifest.json", dump + "/step-00000000.npy"}) {
    EXPECT_EQ(f["read " + path], std::to_string(EACCES)) << path;
  }
}

// A fair host tier: a tenant filling it with a host-only run stops at its share (half, here),
// and another user's host-only push still finds room.
TEST_F(TenancyTest, OneTenantFillingTheHostTierDoesNotRefuseAnothersPush) {
  ASSERT_NO_FATAL_FAILURE(Start({"--spool-dirs", "none", "--tenant-host-share", "0.5"}));
  auto f = Probe({"fill", "64", std::to_string(1 << 20)});  // 64 x 1 MiB into a 64 MiB tier
  EXPECT_EQ(f["stored"], "32");
  EXPECT_NE(f["refused"].find("its share is 32.0 MiB (tenant_host_share 0.50)"), std::string::npos)
      << f["refused"];
  Client* a = Connect();
  ASSERT_NE(a, nullptr);
  RunSpec spec = Spec("mine", 0, 4 << 20);
  spec.layers = "Host";
  spec.keep = true;
  RunInfo run = OpenRun(*a, spec);
  ASSERT_NE(run.run_id, 0u);
  std::vector<char> step(4 << 20, 'm'), back(4 << 20);
  for (uint64_t t = 0; t < 6; ++t) {  // 24 MiB beside the tenant's 32
    auto h = a->Push(run.run_id, t, step.data(), step.size());
    ASSERT_TRUE(h.ok());
    Status s = h->WaitStored();
    ASSERT_TRUE(s.ok()) << "step " << t << ": " << s.ToString();
  }
  ASSERT_TRUE(a->Fetch(run.run_id, 5, back.data(), back.size()).ok());
  EXPECT_EQ(back, step);
}

// A number of a cgroup v1 memory file ("memory.max_usage_in_bytes") or of a "key value" line
// of memory.stat; -1 if absent.
long long CgroupNumber(const std::string& dir, const std::string& file, const std::string& key) {
  std::ifstream in(dir + "/" + file);
  std::string k;
  long long v = -1;
  if (key.empty()) return (in >> v) ? v : -1;
  while (in >> k >> v) {
    if (k == key) return v;
  }
  return -1;
}

// A solver in a memory cgroup (as Slurm's ConstrainRAMSpace runs a job), limited to 512 MiB,
// pushes and fetches 2 GiB on the mapped path through a 1 GiB host tier that adjsnapd did not
// prefault. Every tier page is populated by adjsnapd before the solver touches it, so none is
// charged to the job: it is not killed, and its cgroup holds its own working set only.
TEST_F(TenancyTest, ASolverInAMemoryCgroupIsNotChargedForTheTier) {
  const std::string root = "/sys/fs/cgroup/memory";
  if (access((root + "/cgroup.procs").c_str(), W_OK) != 0) {
    GTEST_SKIP() << "no writable cgroup v1 memory controller at " << root;
  }
  ASSERT_NO_FATAL_FAILURE(Start({"--host-mem", "1G"}));
  const std::string cg = root + "/adjsnap-test-" + std::to_string(getpid());
  ASSERT_EQ(mkdir(cg.c_str(), 0755), 0) << std::strerror(errno);
  constexpr long long kLimit = 512ll << 20;
  { std::ofstream(cg + "/memory.limit_in_bytes") << kLimit; }
  ASSERT_EQ(CgroupNumber(cg, "memory.limit_in_bytes", ""), kLimit);
  constexpr uint64_t kSteps = 128, kBytes = 16 << 20;  // 2 GiB
  std::vector<std::string> argv = {
      "/bin/sh", "-c", "echo $$ > \"$0\"/cgroup.procs && exec \"$@\"", cg,
      "/usr/bin/setpriv", "--reuid=" + std::to_string(uid_), "--regid=" + std::to_string(gid_),
      "--clear-groups", TENANT_PROBE_BINARY, daemon().socket(), "roundtrip",
      std::to_string(kSteps), std::to_string(kBytes)};
  std::string out, err;
  int status = RunProgram(argv, &out, &err);
  const long long peak = CgroupNumber(cg, "memory.max_usage_in_bytes", "");
  const long long shmem = CgroupNumber(cg, "memory.stat", "total_shmem");
  const long long failcnt = CgroupNumber(cg, "memory.failcnt", "");
  rmdir(cg.c_str());
  EXPECT_EQ(status, 0) << "the solver did not finish (killed by the OOM killer?): " << out << err;
  std::map<std::string, std::string> f;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (size_t eq = line.find('='); eq != std::string::npos) {
      f[line.substr(0, eq)] = line.substr(eq + 1);
    }
  }
  EXPECT_EQ(f["mapped"], "1");  // the mapped path, where the solver touches tier pages
  EXPECT_EQ(f["exact"], std::to_string(kSteps));
  // Its own working set: two 16 MiB buffers, the libraries and UCX; not 1 GiB of tier. (Under
  // AddressSanitizer the solver's own memory grows by the sanitizer's shadow and quarantine.)
  EXPECT_LT(peak, (kAddressSanitizer ? 448ll : 256ll) << 20) << "peak usage of the job's cgroup";
  EXPECT_LT(shmem, 16ll << 20) << "shmem charged to the job's cgroup";
  EXPECT_EQ(failcnt, 0);
}

}  // namespace
}  // namespace adjsnap::testing
