/* A solver linking libsnapd's C API: one push and fetch through the snapd at SOCKET, or,
 * with "absent", the error a solver gets when no snapd runs there. */
#include <snapd/snapd.h>
#include <stdio.h>
#include <string.h>

#define N 1024
#define STEPS 4

static int Fail(const char* what) {
  printf("c: %s: %s\n", what, snapd_last_error());
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  snapd_client* client = NULL;
  snapd_code rc = snapd_connect(argv[1], &client);
  if (argc == 3 && strcmp(argv[2], "absent") == 0) {
    printf("c: %s\n", snapd_last_error());
    return rc == SNAPD_UNAVAILABLE ? 0 : 1;
  }
  if (rc != SNAPD_OK) return Fail("connect");
  float u[N], back[N];
  uint64_t shape[1] = {N};
  snapd_run_spec spec;
  memset(&spec, 0, sizeof spec);
  spec.name = "consumer-c";
  spec.steps = STEPS;
  spec.bytes_per_step = sizeof u;
  spec.dtype = 1;
  spec.shape = shape;
  spec.ndim = 1;
  spec.keep = 1;
  uint64_t run_id = 0;
  if (snapd_open_run(client, &spec, &run_id) != SNAPD_OK) return Fail("open run");
  for (uint64_t t = 0; t < STEPS; ++t) {
    for (int i = 0; i < N; ++i) u[i] = (float)(t * N + (uint64_t)i);
    snapd_push_handle* push = NULL;
    if (snapd_push(client, run_id, t, u, sizeof u, &push) != SNAPD_OK) return Fail("push");
    rc = snapd_push_wait_stored(push);
    snapd_push_free(push);
    if (rc != SNAPD_OK) return Fail("push");
  }
  snapd_run_info* runs = NULL;
  size_t nruns = 0;
  if (snapd_list_runs(client, &runs, &nruns) != SNAPD_OK) return Fail("list runs");
  int listed = 0;
  for (size_t i = 0; i < nruns; ++i) {
    listed |= strcmp(runs[i].name, "consumer-c") == 0 && runs[i].snapshots == STEPS;
  }
  snapd_free_runs(runs, nruns);
  if (!listed) return Fail("the run is not listed with its snapshots");
  uint64_t wanted[STEPS] = {3, 2, 1, 0};
  if (snapd_prefetch(client, "consumer-c", wanted, STEPS, NULL) != SNAPD_OK)
    return Fail("prefetch");
  for (uint64_t t = STEPS; t-- > 0;) { /* the odd steps synchronously, the even ones async */
    if (t % 2) {
      if (snapd_fetch(client, run_id, t, back, sizeof back) != SNAPD_OK) return Fail("fetch");
    } else {
      snapd_fetch_handle* fetch = NULL;
      if (snapd_fetch_async(client, run_id, t, back, sizeof back, &fetch) != SNAPD_OK) {
        return Fail("fetch");
      }
      rc = snapd_fetch_wait(fetch);
      snapd_fetch_free(fetch);
      if (rc != SNAPD_OK) return Fail("fetch");
    }
    for (int i = 0; i < N; ++i) {
      if (back[i] != (float)(t * N + (uint64_t)i)) return Fail("fetched bytes differ");
    }
  }
  if (snapd_delete_run(client, "consumer-c") != SNAPD_OK) return Fail("delete run");
  snapd_disconnect(client);
  printf("c: pushed and fetched %d steps\n", STEPS);
  return 0;
}
