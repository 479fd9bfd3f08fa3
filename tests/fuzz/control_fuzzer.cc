// Fuzzes the gRPC control plane after the transport: request bodies of every adjsnap.v1.Control
// method, sent as raw bytes over the unix control socket to the real ControlService (with the
// interceptor that names undecodable requests, daemon/control/request_errors.cc), so each is
// decoded by protobuf and then validated by the service and the Store: run names and specs
// (ValidateRunSpec), shapes, sizes, enums, "UID:name" references, session ids and tokens, step
// lists. The caller is this process's uid (SO_PEERCRED through PeerListener), as for adjsnap.
//
// Input: calls, each u8 method, u16 length, that many bytes of request body. Method (mod 18)
// indexes kMethods; Shutdown is left out (it stops the process, as SIGTERM does). Dump is a
// server stream: its body is parsed here as a DumpRequest and sent with the generated stub.
// Every call must be answered within 30 s. After each input every run is deleted.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <cstring>
#include <future>

#include "data_plane/address_check.h"
#include "fuzz_node.h"
#include "seeds.h"
#include "adjsnap/ucx.h"
#include "adjsnap/v1/control.grpc.pb.h"

namespace {

using namespace adjsnap;

constexpr const char* kMethods[] = {
    "OpenSession", "CloseSession", "OpenRun",   "CloseRun",    "DeleteRun",     "DeleteSnapshot",
    "Locate",      "HoldDeviceStep", "ListRuns", "ListSnapshots", "Stats",      "Prefetch",
    "Drain",       "Dump",         "Quota",     "PurgeRuns",   "ProbeSpools",   "ScrubRun"};
constexpr size_t kMethodCount = sizeof kMethods / sizeof kMethods[0];

struct World {
  std::unique_ptr<fuzz::Node> node;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<grpc::GenericStub> generic;
  std::unique_ptr<v1::Control::Stub> stub;
};
World* world = nullptr;

// Over the longest a call may take by design: OpenSession vets a client's UCX address in a
// child process for up to 10 s (data_plane/address_check.h).
constexpr auto kWedged = std::chrono::seconds(30);

std::chrono::system_clock::time_point Deadline() { return std::chrono::system_clock::now() + kWedged; }

[[noreturn]] void Wedged(const std::string& method) {
  std::fprintf(stderr, "control plane: %s unanswered within 30 s\n", method.c_str());
  std::abort();
}

void CallUnary(const std::string& method, const uint8_t* body, size_t length) {
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline());
  grpc::Slice slice(body, length);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  world->generic->UnaryCall(&ctx, "/adjsnap.v1.Control/" + method, grpc::StubOptions(), &request,
                            &response, [&done](grpc::Status s) { done.set_value(s); });
  grpc::Status s = done.get_future().get();
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) Wedged(method);
}

void CallDump(const uint8_t* body, size_t length) {
  v1::DumpRequest req;
  if (!req.ParseFromArray(body, static_cast<int>(length))) return;
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline());
  auto reader = world->stub->Dump(&ctx, req);
  v1::DumpChunk chunk;
  while (reader->Read(&chunk)) {
  }
  if (reader->Finish().error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) Wedged("Dump");
}

}  // namespace

std::string Call(const char* method, const google::protobuf::Message& m) {
  size_t i = 0;
  while (std::string(kMethods[i]) != method) ++i;
  std::string body = m.SerializeAsString();
  return std::string(1, char(i)) + fuzz::U16(body.size()) + body;
}

void WriteSeeds() {
  v1::OpenRunRequest open;
  v1::RunSpec* spec = open.mutable_spec();
  spec->set_name("shot-17");
  spec->set_steps(100);
  spec->set_bytes_per_step(4 * 64 * 32);
  spec->set_dtype(v1::DTYPE_FLOAT32);
  spec->add_shape(64);
  spec->add_shape(32);
  spec->set_layers(v1::LAYERS_DISK_HOST);
  spec->set_codec(v1::CODEC_ZFP_RATE);
  spec->set_codec_param(8);
  spec->set_job("4242");
  v1::LocateRequest locate;
  locate.set_name("shot-17");
  locate.set_step(3);
  v1::ListSnapshotsRequest list;
  list.set_name("0:shot-17");
  v1::HoldDeviceStepRequest hold;
  hold.set_run_id(1);
  hold.set_step(99);
  hold.set_bytes(4 * 64 * 32);
  hold.set_held(true);
  v1::PrefetchRequest prefetch;
  prefetch.set_name("shot-17");
  prefetch.add_steps(5);
  v1::DeleteSnapshotRequest del;
  del.set_name("shot-17");
  del.set_step(0);
  v1::QuotaRequest quota;
  quota.set_uid(1000);
  quota.set_set(true);
  quota.set_quota_bytes(1 << 20);
  v1::PurgeRunsRequest purge;
  purge.set_uid(0);
  purge.set_job("4242");
  v1::ScrubRunRequest scrub;
  scrub.set_name("shot-17");
  v1::DumpRequest dump;
  dump.set_name("shot-17");
  v1::OpenSessionRequest session;
  session.set_client_name("fuzz");
  // A real client worker's address (the worker is gone by the time the seed is used).
  auto client = fuzz::Take(ucx::WorkerLoop::Create("fuzz-seed-client"), "client WorkerLoop");
  session.set_ucx_address(client->address());
  fuzz::WriteSeed("open_run", Call("OpenRun", open));
  fuzz::WriteSeed("open_locate_list", Call("OpenRun", open) + Call("Locate", locate) +
                                          Call("ListSnapshots", list) + Call("ListRuns", v1::ListRunsRequest()));
  fuzz::WriteSeed("hold_prefetch_delete", Call("OpenRun", open) + Call("HoldDeviceStep", hold) +
                                              Call("Prefetch", prefetch) +
                                              Call("DeleteSnapshot", del));
  fuzz::WriteSeed("stats_quota_purge", Call("Stats", v1::StatsRequest()) + Call("Quota", quota) +
                                           Call("PurgeRuns", purge));
  fuzz::WriteSeed("scrub_dump_drain", Call("OpenRun", open) + Call("ScrubRun", scrub) +
                                          Call("Dump", dump) + Call("Drain", v1::DrainRequest()) +
                                          Call("ProbeSpools", v1::ProbeSpoolsRequest()));
  fuzz::WriteSeed("open_session", Call("OpenSession", session));
}

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  // OpenSession vets the client's address by running this binary again with this flag, as
  // adjsnapd's main() does.
  if (*argc == 2 && std::strcmp((*argv)[1], kCheckUcxAddressFlag) == 0) RunUcxAddressCheck();
  if (fuzz::SeedDir()) {
    WriteSeeds();
    std::exit(0);
  }
  fuzz::QuietLogs();
  world = new World;
  fuzz::NodeOptions o;
  o.control = true;
  o.disk = true;
  o.host_bytes = 16ull << 20;
  o.disk_bytes = 16ull << 20;
  world->node = fuzz::Node::Start(o);
  world->channel = grpc::CreateChannel("unix:" + world->node->control_socket(),
                                       grpc::InsecureChannelCredentials());
  world->generic = std::make_unique<grpc::GenericStub>(world->channel);
  world->stub = v1::Control::NewStub(world->channel);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  size_t at = 0;
  while (at + 3 <= size) {
    const std::string method = kMethods[bytes[at] % kMethodCount];
    size_t length = bytes[at + 1] | (size_t{bytes[at + 2]} << 8);
    at += 3;
    length = std::min(length, size - at);
    if (method == "Dump") {
      CallDump(bytes + at, length);
    } else {
      CallUnary(method, bytes + at, length);
    }
    at += length;
  }
  Store* store = world->node->store();
  for (const v1::RunInfo& run : store->ListRuns()) {
    (void)store->DeleteRun(std::to_string(run.owner_uid()) + ":" + run.spec().name());
  }
  return 0;
}
