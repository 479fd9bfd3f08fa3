// The C API: opaque handles over the C++ client; errors become codes + a thread-local message.
#include "adjsnap/adjsnap.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "adjsnap/client.h"

struct adjsnap_client {
  std::unique_ptr<adjsnap::Client> client;
};
struct adjsnap_push_handle {
  adjsnap::PushHandle handle;
};
struct adjsnap_fetch_handle {
  adjsnap::FetchHandle handle;
};

namespace {

thread_local std::string g_last_error;

adjsnap_code Report(const adjsnap::Status& s) {
  g_last_error = s.ok() ? "" : s.ToString();
  return static_cast<adjsnap_code>(s.code());
}

adjsnap_code NullArgument(const char* what) {
  return Report(adjsnap::Status::InvalidArgument(std::string(what) + " must not be NULL"));
}

// A C wait limit in seconds; nullopt unless >= 0 (BadLimit then says so).
std::optional<std::chrono::milliseconds> Limit(double seconds) {
  if (!(seconds >= 0)) return std::nullopt;
  if (seconds > 1e9) return adjsnap::kWaitForever;
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000)));
}

adjsnap_code BadLimit(double seconds) {
  return Report(adjsnap::Status::InvalidArgument("a wait limit must be a number of seconds >= 0, "
                                               "got " + std::to_string(seconds)));
}

}  // namespace

extern "C" {

const char* adjsnap_last_error(void) { return g_last_error.c_str(); }

adjsnap_code adjsnap_connect(const char* socket_path, adjsnap_client** out) {
  if (!out) return NullArgument("out");
  adjsnap::ClientOptions options;
  if (socket_path) options.socket_path = socket_path;
  auto client = adjsnap::Client::Connect(options);
  if (!client.ok()) return Report(client.status());
  *out = new adjsnap_client{std::move(client).value()};
  return ADJSNAP_OK;
}

void adjsnap_disconnect(adjsnap_client* client) { delete client; }

adjsnap_code adjsnap_set_reconnect_timeout(adjsnap_client* client, double seconds) {
  if (!client) return NullArgument("client");
  client->client->set_reconnect_timeout(seconds);
  return ADJSNAP_OK;
}

adjsnap_code adjsnap_open_run(adjsnap_client* client, const adjsnap_run_spec* spec, uint64_t* run_id) {
  if (!client || !spec || !run_id) return NullArgument("client, spec and run_id");
  if (!spec->shape && spec->ndim != 0) {
    return Report(adjsnap::Status::InvalidArgument("adjsnap_run_spec.shape is NULL but ndim is " +
                                                 std::to_string(spec->ndim) +
                                                 " (give ndim sizes, or ndim 0 for no shape)"));
  }
  adjsnap::RunSpec s;
  s.name = spec->name ? spec->name : "";
  s.steps = spec->steps;
  s.bytes_per_step = spec->bytes_per_step;
  s.dtype = static_cast<adjsnap::Dtype>(spec->dtype);
  if (spec->shape) s.shape.assign(spec->shape, spec->shape + spec->ndim);
  s.layers = spec->layers ? spec->layers : "";
  s.keep = spec->keep != 0;
  s.block_when_full = spec->block_when_full != 0;
  s.codec = static_cast<adjsnap::Codec>(spec->codec);
  s.codec_param = spec->codec_param;
  s.compress_at_ingest = spec->compress_at_ingest != 0;
  s.job = spec->job ? spec->job : "";
  s.check_finite = spec->check_finite != 0;
  auto run = client->client->OpenRun(s);
  if (!run.ok()) return Report(run.status());
  *run_id = run->run_id;
  return Report(adjsnap::Status::Ok());
}

adjsnap_code adjsnap_close_run(adjsnap_client* client, const char* name) {
  if (!client || !name) return NullArgument("client and name");
  return Report(client->client->CloseRun(name));
}

adjsnap_code adjsnap_delete_run(adjsnap_client* client, const char* name) {
  if (!client || !name) return NullArgument("client and name");
  return Report(client->client->DeleteRun(name));
}

adjsnap_code adjsnap_locate(adjsnap_client* client, const char* name, uint64_t step,
                        adjsnap_location* out) {
  if (!client || !name || !out) return NullArgument("client, name and out");
  auto loc = client->client->Locate(name, step);
  if (!loc.ok()) return Report(loc.status());
  *out =
      adjsnap_location{loc->step,     static_cast<int>(loc->tier), loc->raw_bytes, loc->stored_bytes,
                     loc->checksum, loc->checksum_recorded,      loc->on_disk};
  return Report(adjsnap::Status::Ok());
}

adjsnap_code adjsnap_delete_snapshot(adjsnap_client* client, const char* name, uint64_t step) {
  if (!client || !name) return NullArgument("client and name");
  return Report(client->client->DeleteSnapshot(name, step));
}

adjsnap_code adjsnap_list_runs(adjsnap_client* client, adjsnap_run_info** runs, size_t* count) {
  if (!client || !runs || !count) return NullArgument("client, runs and count");
  auto listed = client->client->ListRuns();
  if (!listed.ok()) return Report(listed.status());
  *count = listed->size();
  *runs = new adjsnap_run_info[listed->size()];
  for (size_t i = 0; i < listed->size(); ++i) {
    const adjsnap::RunInfo& r = (*listed)[i];
    char* name = new char[r.spec.name.size() + 1];
    std::memcpy(name, r.spec.name.c_str(), r.spec.name.size() + 1);
    (*runs)[i] = adjsnap_run_info{r.run_id, name,        r.spec.steps,  r.spec.bytes_per_step,
                                r.closed, r.snapshots, r.stored_bytes};
  }
  return Report(adjsnap::Status::Ok());
}

void adjsnap_free_runs(adjsnap_run_info* runs, size_t count) {
  if (!runs) return;
  for (size_t i = 0; i < count; ++i) delete[] runs[i].name;
  delete[] runs;
}

adjsnap_code adjsnap_prefetch(adjsnap_client* client, const char* name, const uint64_t* steps,
                          size_t count, uint64_t* started) {
  if (!client || !name || (!steps && count)) return NullArgument("client, name and steps");
  auto n = client->client->Prefetch(name, std::vector<uint64_t>(steps, steps + count));
  if (!n.ok()) return Report(n.status());
  if (started) *started = *n;
  return Report(adjsnap::Status::Ok());
}

namespace {
adjsnap_code HandOut(adjsnap::Result<adjsnap::PushHandle> handle, adjsnap_push_handle** out) {
  if (!handle.ok()) return Report(handle.status());
  *out = new adjsnap_push_handle{std::move(handle).value()};
  return Report(adjsnap::Status::Ok());
}
}  // namespace

adjsnap_code adjsnap_push(adjsnap_client* client, uint64_t run_id, uint64_t step, const void* data,
                      size_t bytes, adjsnap_push_handle** out) {
  if (!client || !out) return NullArgument("client and out");
  return HandOut(client->client->Push(run_id, step, data, bytes), out);
}

adjsnap_code adjsnap_push_device(adjsnap_client* client, uint64_t run_id, uint64_t step,
                             const void* device_data, size_t bytes, void* stream,
                             adjsnap_push_handle** out) {
  if (!client || !out) return NullArgument("client and out");
  return HandOut(client->client->PushDevice(run_id, step, device_data, bytes, stream), out);
}

adjsnap_code adjsnap_fetch_device(adjsnap_client* client, uint64_t run_id, uint64_t step,
                              void* device_data, size_t bytes, void* stream) {
  if (!client) return NullArgument("client");
  auto fetch = client->client->FetchDeviceAsync(run_id, step, device_data, bytes, stream);
  return Report(fetch.ok() ? fetch->Wait() : fetch.status());
}

adjsnap_code adjsnap_push_wait_released(adjsnap_push_handle* push) {
  if (!push) return NullArgument("push");
  return Report(push->handle.WaitReleased());
}

adjsnap_code adjsnap_push_wait_stored(adjsnap_push_handle* push) {
  if (!push) return NullArgument("push");
  return Report(push->handle.WaitStored());
}

adjsnap_code adjsnap_push_wait_released_for(adjsnap_push_handle* push, double seconds) {
  if (!push) return NullArgument("push");
  auto limit = Limit(seconds);
  return limit ? Report(push->handle.WaitReleased(*limit)) : BadLimit(seconds);
}

adjsnap_code adjsnap_push_wait_stored_for(adjsnap_push_handle* push, double seconds) {
  if (!push) return NullArgument("push");
  auto limit = Limit(seconds);
  return limit ? Report(push->handle.WaitStored(*limit)) : BadLimit(seconds);
}

void adjsnap_push_free(adjsnap_push_handle* push) { delete push; }

adjsnap_code adjsnap_fetch(adjsnap_client* client, uint64_t run_id, uint64_t step, void* data,
                       size_t bytes) {
  if (!client) return NullArgument("client");
  return Report(client->client->Fetch(run_id, step, data, bytes));
}

adjsnap_code adjsnap_fetch_async(adjsnap_client* client, uint64_t run_id, uint64_t step, void* data,
                             size_t bytes, adjsnap_fetch_handle** out) {
  if (!client || !out) return NullArgument("client and out");
  auto fetch = client->client->FetchAsync(run_id, step, data, bytes);
  if (!fetch.ok()) return Report(fetch.status());
  *out = new adjsnap_fetch_handle{std::move(fetch).value()};
  return Report(adjsnap::Status::Ok());
}

adjsnap_code adjsnap_fetch_wait(adjsnap_fetch_handle* fetch) {
  if (!fetch) return NullArgument("fetch");
  return Report(fetch->handle.Wait());
}

adjsnap_code adjsnap_fetch_wait_for(adjsnap_fetch_handle* fetch, double seconds) {
  if (!fetch) return NullArgument("fetch");
  auto limit = Limit(seconds);
  return limit ? Report(fetch->handle.Wait(*limit)) : BadLimit(seconds);
}

int adjsnap_fetch_done(const adjsnap_fetch_handle* fetch) { return fetch && fetch->handle.done(); }

void adjsnap_fetch_free(adjsnap_fetch_handle* fetch) { delete fetch; }

}  // extern "C"
