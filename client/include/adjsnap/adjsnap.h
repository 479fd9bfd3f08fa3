/* libadjsnap C API: opaque handles over the C++ client (adjsnap/client.h), same semantics.
 * Every call returns an adjsnap_code (0 = OK, otherwise a gRPC status code); the message of the
 * last failure on the calling thread is adjsnap_last_error(). Thread-safe as the C++ API. */
#ifndef ADJSNAP_ADJSNAP_H_
#define ADJSNAP_ADJSNAP_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int adjsnap_code;
enum { ADJSNAP_OK = 0, ADJSNAP_INVALID_ARGUMENT = 3, ADJSNAP_DEADLINE_EXCEEDED = 4, ADJSNAP_NOT_FOUND = 5,
       ADJSNAP_ALREADY_EXISTS = 6,
       ADJSNAP_RESOURCE_EXHAUSTED = 8, ADJSNAP_FAILED_PRECONDITION = 9, ADJSNAP_UNAVAILABLE = 14,
       ADJSNAP_DATA_LOSS = 15 };

typedef struct adjsnap_client adjsnap_client;
typedef struct adjsnap_push_handle adjsnap_push_handle;
typedef struct adjsnap_fetch_handle adjsnap_fetch_handle;

typedef struct adjsnap_run_spec {
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
} adjsnap_run_spec;

typedef struct adjsnap_location {
  uint64_t step;
  int tier;                /* 1 device, 2 host, 3 disk, 4 lost, 5 in flight (pushed, released,
                              not stored yet: adjsnap_locate right after wait_released) */
  uint64_t raw_bytes;
  uint64_t stored_bytes;
  uint64_t checksum;
  int checksum_recorded;
  int on_disk;             /* a durable copy is in the daemon's disk spool */
} adjsnap_location;

/* One run as adjsnap_list_runs reports it; `name` lives as long as the array. */
typedef struct adjsnap_run_info {
  uint64_t run_id;
  const char* name;
  uint64_t steps;          /* declared step count; 0 = unknown */
  uint64_t bytes_per_step;
  int closed;              /* nonzero once closed (fetches only) */
  uint64_t snapshots;
  uint64_t stored_bytes;
} adjsnap_run_info;

/* Message of the last failed call on this thread ("" if none). Valid until the next call. */
const char* adjsnap_last_error(void);

/* socket_path may be NULL for the default. */
adjsnap_code adjsnap_connect(const char* socket_path, adjsnap_client** out);
void adjsnap_disconnect(adjsnap_client* client);
/* How long the client keeps reconnecting when adjsnapd goes away (a restart), in seconds; pushes
   and fetches meanwhile wait and are sent again. Past it they fail with ADJSNAP_UNAVAILABLE
   naming the socket. 0 = fail at once. Default 60, or $ADJSNAP_RECONNECT_TIMEOUT. */
adjsnap_code adjsnap_set_reconnect_timeout(adjsnap_client* client, double seconds);

adjsnap_code adjsnap_open_run(adjsnap_client* client, const adjsnap_run_spec* spec, uint64_t* run_id);
adjsnap_code adjsnap_close_run(adjsnap_client* client, const char* name);
adjsnap_code adjsnap_delete_run(adjsnap_client* client, const char* name);
adjsnap_code adjsnap_locate(adjsnap_client* client, const char* name, uint64_t step,
                        adjsnap_location* out);
/* Removes one snapshot; the step may be pushed again afterwards. */
adjsnap_code adjsnap_delete_snapshot(adjsnap_client* client, const char* name, uint64_t step);
/* The caller's runs: *runs is an array of *count entries, freed with adjsnap_free_runs. */
adjsnap_code adjsnap_list_runs(adjsnap_client* client, adjsnap_run_info** runs, size_t* count);
void adjsnap_free_runs(adjsnap_run_info* runs, size_t count);
/* Asks adjsnapd to read steps[0..count) of run `name` from disk into host memory ahead of their
 * fetches; `started` (may be NULL) receives the number of reads started. */
adjsnap_code adjsnap_prefetch(adjsnap_client* client, const char* name, const uint64_t* steps,
                          size_t count, uint64_t* started);

adjsnap_code adjsnap_push(adjsnap_client* client, uint64_t run_id, uint64_t step, const void* data,
                      size_t bytes, adjsnap_push_handle** out);
adjsnap_code adjsnap_push_wait_released(adjsnap_push_handle* push);
adjsnap_code adjsnap_push_wait_stored(adjsnap_push_handle* push);
/* The same for at most `seconds` (the waits above take the client's wait limit, 600 s or
 * $ADJSNAP_WAIT_TIMEOUT): past it ADJSNAP_DEADLINE_EXCEEDED, and adjsnap_last_error says what adjsnapd
 * reports the push waits for. The push goes on: `data` stays in use until a wait returns
 * ADJSNAP_OK or another error. */
adjsnap_code adjsnap_push_wait_released_for(adjsnap_push_handle* push, double seconds);
adjsnap_code adjsnap_push_wait_stored_for(adjsnap_push_handle* push, double seconds);
void adjsnap_push_free(adjsnap_push_handle* push);

adjsnap_code adjsnap_fetch(adjsnap_client* client, uint64_t run_id, uint64_t step, void* data,
                       size_t bytes);
/* Starts a fetch; `data` is filled once adjsnap_fetch_wait returns ADJSNAP_OK. Free the handle
 * with adjsnap_fetch_free once waited for: until the fetch completes it still writes `data`. */
adjsnap_code adjsnap_fetch_async(adjsnap_client* client, uint64_t run_id, uint64_t step, void* data,
                             size_t bytes, adjsnap_fetch_handle** out);
adjsnap_code adjsnap_fetch_wait(adjsnap_fetch_handle* fetch);
/* At most `seconds`, as adjsnap_push_wait_released_for; the fetch goes on and may still write
 * `data` until a wait returns ADJSNAP_OK or another error. */
adjsnap_code adjsnap_fetch_wait_for(adjsnap_fetch_handle* fetch, double seconds);
int adjsnap_fetch_done(const adjsnap_fetch_handle* fetch); /* nonzero once complete */
void adjsnap_fetch_free(adjsnap_fetch_handle* fetch);

/* CUDA device memory; `stream` is a cudaStream_t (NULL: the legacy default stream). A device
 * push completes as Client::PushDevice; adjsnap_fetch_device returns once the bytes are in
 * `device_data`. ADJSNAP_FAILED_PRECONDITION from a libadjsnap built without CUDA. */
adjsnap_code adjsnap_push_device(adjsnap_client* client, uint64_t run_id, uint64_t step,
                             const void* device_data, size_t bytes, void* stream,
                             adjsnap_push_handle** out);
adjsnap_code adjsnap_fetch_device(adjsnap_client* client, uint64_t run_id, uint64_t step,
                              void* device_data, size_t bytes, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* ADJSNAP_ADJSNAP_H_ */
