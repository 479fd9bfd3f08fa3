/* libsnapd C API: opaque handles over the C++ client (snapd/client.h), same semantics.
 * Every call returns a snapd_code (0 = OK, otherwise a gRPC status code); the message of the
 * last failure on the calling thread is snapd_last_error(). Thread-safe as the C++ API. */
#ifndef SNAPD_SNAPD_H_
#define SNAPD_SNAPD_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int snapd_code;
enum { SNAPD_OK = 0, SNAPD_INVALID_ARGUMENT = 3, SNAPD_DEADLINE_EXCEEDED = 4, SNAPD_NOT_FOUND = 5,
       SNAPD_ALREADY_EXISTS = 6,
       SNAPD_RESOURCE_EXHAUSTED = 8, SNAPD_FAILED_PRECONDITION = 9, SNAPD_UNAVAILABLE = 14,
       SNAPD_DATA_LOSS = 15 };

typedef struct snapd_client snapd_client;
typedef struct snapd_push_handle snapd_push_handle;
typedef struct snapd_fetch_handle snapd_fetch_handle;

typedef struct snapd_run_spec {
  const char* name;
  uint64_t steps;          /* 0 = unknown */
  uint64_t bytes_per_step;
  int dtype;               /* 0 bytes, 1 float32, 2 float64, 3 int32, 4 int64, 5 uint8 */
  const uint64_t* shape;   /* may be NULL */
  size_t ndim;
  const char* layers;      /* "DiskHostDevice", "HostDevice", "DiskHost", "Host", "Device",
                              "Disk", "NoLayers"; NULL or "" = daemon default */
  int keep;                /* nonzero: steps stay after being fetched (default: read-once) */
  int block_when_full;     /* nonzero: a push waits when host and disk are full */
  int codec;               /* 0 none, 1 zfp-reversible, 2 zfp-rate, 3 zfp-precision, 4 zfp-accuracy,
                              5 bitcomp, 6 bitcomp-lossy, 7 ans (chunk frames: client.h) */
  double codec_param;      /* rate (bits/value), precision (bits), accuracy (tolerance) or
                              bitcomp-lossy's absolute error bound */
  int compress_at_ingest;  /* nonzero: compress when stored, not when moved to disk */
  const char* job;         /* the batch job the run belongs to; NULL or "": $SLURM_JOB_ID */
  int check_finite;        /* nonzero: refuse pushes holding NaN or infinities (float dtypes) */
} snapd_run_spec;

typedef struct snapd_location {
  uint64_t step;
  int tier;                /* 1 device, 2 host, 3 disk, 4 lost, 5 in flight (pushed, released,
                              not stored yet: snapd_locate right after wait_released) */
  uint64_t raw_bytes;
  uint64_t stored_bytes;
  uint64_t checksum;
  int checksum_recorded;
  int on_disk;             /* a durable copy is in the daemon's disk spool */
} snapd_location;

/* One run as snapd_list_runs reports it; `name` lives as long as the array. */
typedef struct snapd_run_info {
  uint64_t run_id;
  const char* name;
  uint64_t steps;          /* declared step count; 0 = unknown */
  uint64_t bytes_per_step;
  int closed;              /* nonzero once closed (fetches only) */
  uint64_t snapshots;
  uint64_t stored_bytes;
} snapd_run_info;

/* Message of the last failed call on this thread ("" if none). Valid until the next call. */
const char* snapd_last_error(void);

/* socket_path may be NULL for the default. */
snapd_code snapd_connect(const char* socket_path, snapd_client** out);
void snapd_disconnect(snapd_client* client);
/* How long the client keeps reconnecting when snapd goes away (a restart), in seconds; pushes
   and fetches meanwhile wait and are sent again. Past it they fail with SNAPD_UNAVAILABLE
   naming the socket. 0 = fail at once. Default 60, or $SNAPD_RECONNECT_TIMEOUT. */
snapd_code snapd_set_reconnect_timeout(snapd_client* client, double seconds);

snapd_code snapd_open_run(snapd_client* client, const snapd_run_spec* spec, uint64_t* run_id);
snapd_code snapd_close_run(snapd_client* client, const char* name);
snapd_code snapd_delete_run(snapd_client* client, const char* name);
snapd_code snapd_locate(snapd_client* client, const char* name, uint64_t step,
                        snapd_location* out);
/* Removes one snapshot; the step may be pushed again afterwards. */
snapd_code snapd_delete_snapshot(snapd_client* client, const char* name, uint64_t step);
/* The caller's runs: *runs is an array of *count entries, freed with snapd_free_runs. */
snapd_code snapd_list_runs(snapd_client* client, snapd_run_info** runs, size_t* count);
void snapd_free_runs(snapd_run_info* runs, size_t count);
/* Asks snapd to read steps[0..count) of run `name` from disk into host memory ahead of their
 * fetches; `started` (may be NULL) receives the number of reads started. */
snapd_code snapd_prefetch(snapd_client* client, const char* name, const uint64_t* steps,
                          size_t count, uint64_t* started);

snapd_code snapd_push(snapd_client* client, uint64_t run_id, uint64_t step, const void* data,
                      size_t bytes, snapd_push_handle** out);
snapd_code snapd_push_wait_released(snapd_push_handle* push);
snapd_code snapd_push_wait_stored(snapd_push_handle* push);
/* The same for at most `seconds` (the waits above take the client's wait limit, 600 s or
 * $SNAPD_WAIT_TIMEOUT): past it SNAPD_DEADLINE_EXCEEDED, and snapd_last_error says what snapd
 * reports the push waits for. The push goes on: `data` stays in use until a wait returns
 * SNAPD_OK or another error. */
snapd_code snapd_push_wait_released_for(snapd_push_handle* push, double seconds);
snapd_code snapd_push_wait_stored_for(snapd_push_handle* push, double seconds);
void snapd_push_free(snapd_push_handle* push);

snapd_code snapd_fetch(snapd_client* client, uint64_t run_id, uint64_t step, void* data,
                       size_t bytes);
/* Starts a fetch; `data` is filled once snapd_fetch_wait returns SNAPD_OK. Free the handle
 * with snapd_fetch_free once waited for: until the fetch completes it still writes `data`. */
snapd_code snapd_fetch_async(snapd_client* client, uint64_t run_id, uint64_t step, void* data,
                             size_t bytes, snapd_fetch_handle** out);
snapd_code snapd_fetch_wait(snapd_fetch_handle* fetch);
/* At most `seconds`, as snapd_push_wait_released_for; the fetch goes on and may still write
 * `data` until a wait returns SNAPD_OK or another error. */
snapd_code snapd_fetch_wait_for(snapd_fetch_handle* fetch, double seconds);
int snapd_fetch_done(const snapd_fetch_handle* fetch); /* nonzero once complete */
void snapd_fetch_free(snapd_fetch_handle* fetch);

/* CUDA device memory; `stream` is a cudaStream_t (NULL: the legacy default stream). A device
 * push completes as Client::PushDevice; snapd_fetch_device returns once the bytes are in
 * `device_data`. SNAPD_FAILED_PRECONDITION from a libsnapd built without CUDA. */
snapd_code snapd_push_device(snapd_client* client, uint64_t run_id, uint64_t step,
                             const void* device_data, size_t bytes, void* stream,
                             snapd_push_handle** out);
snapd_code snapd_fetch_device(snapd_client* client, uint64_t run_id, uint64_t step,
                              void* device_data, size_t bytes, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* SNAPD_SNAPD_H_ */
