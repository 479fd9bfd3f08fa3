// The C API: opaque handles over the C++ client; errors become codes + a thread-local message.
#include "snapd/snapd.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "snapd/client.h"

struct snapd_client {
  std::unique_ptr<snapd::Client> client;
};
struct snapd_push_handle {
  snapd::PushHandle handle;
};
struct snapd_fetch_handle {
  snapd::FetchHandle handle;
};

namespace {

thread_local std::string g_last_error;

snapd_code Report(const snapd::Status& s) {
  g_last_error = s.ok() ? "" : s.ToString();
  return static_cast<snapd_code>(s.code());
}

snapd_code NullArgument(const char* what) {
  return Report(snapd::Status::InvalidArgument(std::string(what) + " must not be NULL"));
}

// A C wait limit in seconds; nullopt unless >= 0 (BadLimit then says so).
std::optional<std::chrono::milliseconds> Limit(double seconds) {
  if (!(seconds >= 0)) return std::nullopt;
  if (seconds > 1e9) return snapd::kWaitForever;
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000)));
}

snapd_code BadLimit(double seconds) {
  return Report(snapd::Status::InvalidArgument("a wait limit must be a number of seconds >= 0, "
                                               "got " + std::to_string(seconds)));
}

}  // namespace

extern "C" {

const char* snapd_last_error(void) { return g_last_error.c_str(); }

snapd_code snapd_connect(const char* socket_path, snapd_client** out) {
  if (!out) return NullArgument("out");
  snapd::ClientOptions options;
  if (socket_path) options.socket_path = socket_path;
  auto client = snapd::Client::Connect(options);
  if (!client.ok()) return Report(client.status());
  *out = new snapd_client{std::move(client).value()};
  return SNAPD_OK;
}

void snapd_disconnect(snapd_client* client) { delete client; }

snapd_code snapd_set_reconnect_timeout(snapd_client* client, double seconds) {
  if (!client) return NullArgument("client");
  client->client->set_reconnect_timeout(seconds);
  return SNAPD_OK;
}

snapd_code snapd_open_run(snapd_client* client, const snapd_run_spec* spec, uint64_t* run_id) {
  if (!client || !spec || !run_id) return NullArgument("client, spec and run_id");
  if (!spec->shape && spec->ndim != 0) {
    return Report(snapd::Status::InvalidArgument("snapd_run_spec.shape is NULL but ndim is " +
                                                 std::to_string(spec->ndim) +
                                                 " (give ndim sizes, or ndim 0 for no shape)"));
  }
  snapd::RunSpec s;
  s.name = spec->name ? spec->name : "";
  s.steps = spec->steps;
  s.bytes_per_step = spec->bytes_per_step;
  s.dtype = static_cast<snapd::Dtype>(spec->dtype);
  if (spec->shape) s.shape.assign(spec->shape, spec->shape + spec->ndim);
  s.layers = spec->layers ? spec->layers : "";
  s.keep = spec->keep != 0;
  s.block_when_full = spec->block_when_full != 0;
  s.codec = static_cast<snapd::Codec>(spec->codec);
  s.codec_param = spec->codec_param;
  s.compress_at_ingest = spec->compress_at_ingest != 0;
  s.job = spec->job ? spec->job : "";
  s.check_finite = spec->check_finite != 0;
  auto run = client->client->OpenRun(s);
  if (!run.ok()) return Report(run.status());
  *run_id = run->run_id;
  return Report(snapd::Status::Ok());
}

snapd_code snapd_close_run(snapd_client* client, const char* name) {
  if (!client || !name) return NullArgument("client and name");
  return Report(client->client->CloseRun(name));
}

snapd_code snapd_delete_run(snapd_client* client, const char* name) {
  if (!client || !name) return NullArgument("client and name");
  return Report(client->client->DeleteRun(name));
}

snapd_code snapd_locate(snapd_client* client, const char* name, uint64_t step,
                        snapd_location* out) {
  if (!client || !name || !out) return NullArgument("client, name and out");
  auto loc = client->client->Locate(name, step);
  if (!loc.ok()) return Report(loc.status());
  *out =
      snapd_location{loc->step,     static_cast<int>(loc->tier), loc->raw_bytes, loc->stored_bytes,
                     loc->checksum, loc->checksum_recorded,      loc->on_disk};
  return Report(snapd::Status::Ok());
}

snapd_code snapd_delete_snapshot(snapd_client* client, const char* name, uint64_t step) {
  if (!client || !name) return NullArgument("client and name");
  return Report(client->client->DeleteSnapshot(name, step));
}

snapd_code snapd_list_runs(snapd_client* client, snapd_run_info** runs, size_t* count) {
  if (!client || !runs || !count) return NullArgument("client, runs and count");
  auto listed = client->client->ListRuns();
  if (!listed.ok()) return Report(listed.status());
  *count = listed->size();
  *runs = new snapd_run_info[listed->size()];
  for (size_t i = 0; i < listed->size(); ++i) {
    const snapd::RunInfo& r = (*listed)[i];
    char* name = new char[r.spec.name.size() + 1];
    std::memcpy(name, r.spec.name.c_str(), r.spec.name.size() + 1);
    (*runs)[i] = snapd_run_info{r.run_id, name,        r.spec.steps,  r.spec.bytes_per_step,
                                r.closed, r.snapshots, r.stored_bytes};
  }
  return Report(snapd::Status::Ok());
}

void snapd_free_runs(snapd_run_info* runs, size_t count) {
  if (!runs) return;
  for (size_t i = 0; i < count; ++i) delete[] runs[i].name;
  delete[] runs;
}

snapd_code snapd_prefetch(snapd_client* client, const char* name, const uint64_t* steps,
                          size_t count, uint64_t* started) {
  if (!client || !name || (!steps && count)) return NullArgument("client, name and steps");
  auto n = client->client->Prefetch(name, std::vector<uint64_t>(steps, steps + count));
  if (!n.ok()) return Report(n.status());
  if (started) *started = *n;
  return Report(snapd::Status::Ok());
}

namespace {
snapd_code HandOut(snapd::Result<snapd::PushHandle> handle, snapd_push_handle** out) {
  if (!handle.ok()) return Report(handle.status());
  *out = new snapd_push_handle{std::move(handle).value()};
  return Report(snapd::Status::Ok());
}
}  // namespace

snapd_code snapd_push(snapd_client* client, uint64_t run_id, uint64_t step, const void* data,
                      size_t bytes, snapd_push_handle** out) {
  if (!client || !out) return NullArgument("client and out");
  return HandOut(client->client->Push(run_id, step, data, bytes), out);
}

snapd_code snapd_push_device(snapd_client* client, uint64_t run_id, uint64_t step,
                             const void* device_data, size_t bytes, void* stream,
                             snapd_push_handle** out) {
  if (!client || !out) return NullArgument("client and out");
  return HandOut(client->client->PushDevice(run_id, step, device_data, bytes, stream), out);
}

snapd_code snapd_fetch_device(snapd_client* client, uint64_t run_id, uint64_t step,
                              void* device_data, size_t bytes, void* stream) {
  if (!client) return NullArgument("client");
  auto fetch = client->client->FetchDeviceAsync(run_id, step, device_data, bytes, stream);
  return Report(fetch.ok() ? fetch->Wait() : fetch.status());
}

snapd_code snapd_push_wait_released(snapd_push_handle* push) {
  if (!push) return NullArgument("push");
  return Report(push->handle.WaitReleased());
}

snapd_code snapd_push_wait_stored(snapd_push_handle* push) {
  if (!push) return NullArgument("push");
  return Report(push->handle.WaitStored());
}

snapd_code snapd_push_wait_released_for(snapd_push_handle* push, double seconds) {
  if (!push) return NullArgument("push");
  auto limit = Limit(seconds);
  return limit ? Report(push->handle.WaitReleased(*limit)) : BadLimit(seconds);
}

snapd_code snapd_push_wait_stored_for(snapd_push_handle* push, double seconds) {
  if (!push) return NullArgument("push");
  auto limit = Limit(seconds);
  return limit ? Report(push->handle.WaitStored(*limit)) : BadLimit(seconds);
}

void snapd_push_free(snapd_push_handle* push) { delete push; }

snapd_code snapd_fetch(snapd_client* client, uint64_t run_id, uint64_t step, void* data,
                       size_t bytes) {
  if (!client) return NullArgument("client");
  return Report(client->client->Fetch(run_id, step, data, bytes));
}

snapd_code snapd_fetch_async(snapd_client* client, uint64_t run_id, uint64_t step, void* data,
                             size_t bytes, snapd_fetch_handle** out) {
  if (!client || !out) return NullArgument("client and out");
  auto fetch = client->client->FetchAsync(run_id, step, data, bytes);
  if (!fetch.ok()) return Report(fetch.status());
  *out = new snapd_fetch_handle{std::move(fetch).value()};
  return Report(snapd::Status::Ok());
}

snapd_code snapd_fetch_wait(snapd_fetch_handle* fetch) {
  if (!fetch) return NullArgument("fetch");
  return Report(fetch->handle.Wait());
}

snapd_code snapd_fetch_wait_for(snapd_fetch_handle* fetch, double seconds) {
  if (!fetch) return NullArgument("fetch");
  auto limit = Limit(seconds);
  return limit ? Report(fetch->handle.Wait(*limit)) : BadLimit(seconds);
}

int snapd_fetch_done(const snapd_fetch_handle* fetch) { return fetch && fetch->handle.done(); }

void snapd_fetch_free(snapd_fetch_handle* fetch) { delete fetch; }

}  // extern "C"
