/* A solver linking libadjsnap's C API: one push and fetch through the adjsnapd at SOCKET, or,
 * with "absent", the error a solver gets when no adjsnapd runs there. */
#include <adjsnap/adjsnap.h>
#include <stdio.h>
#include <string.h>

#define N 1024
#define STEPS 4

static int Fail(const char* what) {
  printf("c: %s: %s\n", what, adjsnap_last_error());
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  adjsnap_client* client = NULL;
  adjsnap_code rc = adjsnap_connect(argv[1], &client);
  if (argc == 3 && strcmp(argv[2], "absent") == 0) {
    printf("c: %s\n", adjsnap_last_error());
    return rc == ADJSNAP_UNAVAILABLE ? 0 : 1;
  }
  if (rc != ADJSNAP_OK) return Fail("connect");
  float u[N], back[N];
  uint64_t shape[1] = {N};
  adjsnap_run_spec spec;
  memset(&spec, 0, sizeof spec);
  spec.name = "consumer-c";
  spec.steps = STEPS;
  spec.bytes_per_step = sizeof u;
  spec.dtype = 1;
  spec.shape = shape;
  spec.ndim = 1;
  spec.keep = 1;
  uint64_t run_id = 0;
  if (adjsnap_open_run(client, &spec, &run_id) != ADJSNAP_OK) return Fail("open run");
  for (uint64_t t = 0; t < STEPS; ++t) {
    for (int i = 0; i < N; ++i) u[i] = (float)(t * N + (uint64_t)i);
    adjsnap_push_handle* push = NULL;
    if (adjsnap_push(client, run_id, t, u, sizeof u, &push) != ADJSNAP_OK) return Fail("push");
    rc = adjsnap_push_wait_stored(push);
    adjsnap_push_free(push);
    if (rc != ADJSNAP_OK) return Fail("push");
  }
  adjsnap_run_info* runs = NULL;
  size_t nruns = 0;
  if (adjsnap_list_runs(client, &runs, &nruns) != ADJSNAP_OK) return Fail("list runs");
  int listed = 0;
  for (size_t i = 0; i < nruns; ++i) {
    listed |= strcmp(runs[i].name, "consumer-c") == 0 && runs[i].snapshots == STEPS;
  }
  adjsnap_free_runs(runs, nruns);
  if (!listed) return Fail("the run is not listed with its snapshots");
  uint64_t wanted[STEPS] = {3, 2, 1, 0};
  if (adjsnap_prefetch(client, "consumer-c", wanted, STEPS, NULL) != ADJSNAP_OK)
    return Fail("prefetch");
  for (uint64_t t = STEPS; t-- > 0;) { /* the odd steps synchronously, the even ones async */
    if (t % 2) {
      if (adjsnap_fetch(client, run_id, t, back, sizeof back) != ADJSNAP_OK) return Fail("fetch");
    } else {
      adjsnap_fetch_handle* fetch = NULL;
      if (adjsnap_fetch_async(client, run_id, t, back, sizeof back, &fetch) != ADJSNAP_OK) {
        return Fail("fetch");
      }
      rc = adjsnap_fetch_wait(fetch);
      adjsnap_fetch_free(fetch);
      if (rc != ADJSNAP_OK) return Fail("fetch");
    }
    for (int i = 0; i < N; ++i) {
      if (back[i] != (float)(t * N + (uint64_t)i)) return Fail("fetched bytes differ");
    }
  }
  if (adjsnap_delete_run(client, "consumer-c") != ADJSNAP_OK) return Fail("delete run");
  adjsnap_disconnect(client);
  printf("c: pushed and fetched %d steps\n", STEPS);
  return 0;
}
