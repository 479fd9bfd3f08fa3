// mpi_ranks: an MPI solver's forward and backward pass through each node's adjsnapd, for
// tests/cluster/run.sh.
//
// A global ny x nx float32 field is split over the ranks on a 2D process grid; each rank owns
// one block (its subdomain). Forward: every step the rank writes its block (content that
// depends only on rank, step and the cell) and pushes it to the adjsnapd of its own node
// ($ADJSNAP_SOCKET, which deploy/slurm's task prolog exports). Backward: it fetches every step in
// reverse and compares each byte with the content regenerated for that step. The run is named
// after the job and the rank, labelled with $SLURM_JOB_ID by libadjsnap, and kept: the Slurm
// epilog's purge is what removes it.
//
// Rank 0 prints one line per rank and then the summary:
//   "rank R on HOST: run NAME, S/S steps byte-exact (DATA PATH, SOCKET)"
//   "cluster: N ranks on M nodes (HOST,HOST,...), S snapshots byte-exact"
// Exit status 0 only if every rank's every step came back byte-exact.
//
//   srun --mpi=pmix mpi_ranks [--nx N] [--ny N] [--steps N]   (--nx, --ny: at least the ranks)

// Only the C API of MPI: no C++ bindings, whose headers warn.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "adjsnap/client.h"

namespace {

struct Args {
  int nx = 768;
  int ny = 512;
  int steps = 24;
};

bool ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if ((k == "--nx" || k == "--ny" || k == "--steps") && v != nullptr) {
      int n = std::atoi(v);
      if (n < 1) return false;
      (k == "--nx" ? a->nx : k == "--ny" ? a->ny : a->steps) = n;
      ++i;
    } else {
      return false;
    }
  }
  return true;
}

// One rank's block of the global field: rows [y0, y0 + ny), columns [x0, x0 + nx).
struct Block {
  int x0 = 0, y0 = 0, nx = 0, ny = 0;
};

// The `index`th of `parts` near-equal pieces of [0, n).
void Split(int n, int parts, int index, int* begin, int* count) {
  *begin = n / parts * index + std::min(index, n % parts);
  *count = n / parts + (index < n % parts ? 1 : 0);
}

Block BlockOf(int rank, int size, int nx, int ny) {
  int dims[2] = {0, 0};
  MPI_Dims_create(size, 2, dims);  // dims[0] rows of ranks, dims[1] columns
  Block b;
  Split(ny, dims[0], rank / dims[1], &b.y0, &b.ny);
  Split(nx, dims[1], rank % dims[1], &b.x0, &b.nx);
  return b;
}

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The content of step `step` of `rank`'s block: a wave over the global grid plus low bits that
// depend on (rank, step, cell), so a step of another rank, another step or a shifted block
// never compares equal.
void Fill(const Block& b, int rank, int step, std::vector<float>* out) {
  const uint64_t seed = Mix((static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(step));
  for (int y = 0; y < b.ny; ++y) {
    for (int x = 0; x < b.nx; ++x) {
      const int gx = b.x0 + x, gy = b.y0 + y;
      const uint64_t h =
          Mix(seed ^ ((static_cast<uint64_t>(gy) << 20) ^ static_cast<uint64_t>(gx)));
      const float wave = static_cast<float>((gx + 3 * gy + 5 * step) % 97) / 97.0f;
      (*out)[static_cast<size_t>(y) * b.nx + x] = wave + static_cast<float>(h & 0xffff) * 1e-7f;
    }
  }
}

// What each rank reports to rank 0: fixed-size, so one MPI_Gather carries it.
struct Report {
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  char run[128] = {};
  char socket[256] = {};
  char data_path[32] = {};
  char error[512] = {};
  int64_t exact_steps = 0;
};

void Copy(const std::string& from, char* to, size_t size) {
  std::snprintf(to, size, "%s", from.c_str());
}

// One rank's forward and backward pass; fills `r` (error empty on success).
void RunRank(const Args& a, int rank, int size, Report* r) {
  auto fail = [&](const std::string& what, const adjsnap::Status& s) {
    Copy(what + ": " + s.ToString(), r->error, sizeof(r->error));
  };
  const Block b = BlockOf(rank, size, a.nx, a.ny);
  const size_t cells = static_cast<size_t>(b.nx) * b.ny;
  const size_t bytes = cells * sizeof(float);
  const char* job = std::getenv("SLURM_JOB_ID");
  const std::string name =
      std::string("cluster-") + (job ? job : "nojob") + "-rank" + std::to_string(rank);
  Copy(name, r->run, sizeof(r->run));

  adjsnap::ClientOptions opts;  // socket: $ADJSNAP_SOCKET, from the task prolog
  opts.client_name = "mpi_ranks/" + std::to_string(rank);
  auto client = adjsnap::Client::Connect(opts);
  if (!client.ok()) return fail("connect", client.status());
  adjsnap::Client& c = **client;
  Copy(c.socket_path(), r->socket, sizeof(r->socket));
  Copy(c.data_path() == adjsnap::DataPath::kMappedHostTier ? "mapped" : "ucx", r->data_path,
       sizeof(r->data_path));

  adjsnap::RunSpec spec;
  spec.name = name;
  spec.steps = static_cast<uint64_t>(a.steps);
  spec.bytes_per_step = bytes;
  spec.dtype = adjsnap::Dtype::kFloat32;
  spec.shape = {static_cast<uint64_t>(b.ny), static_cast<uint64_t>(b.nx)};
  spec.keep = true;  // left for the epilog's purge (spec.job: $SLURM_JOB_ID)
  auto run = c.OpenRun(spec);
  if (!run.ok()) return fail("open run " + name, run.status());

  // Forward: two buffers in turn; one is rewritten only once adjsnapd released its last push.
  std::vector<std::vector<float>> u(2, std::vector<float>(cells));
  std::vector<adjsnap::PushHandle> pending(2);
  for (int t = 0; t < a.steps; ++t) {
    const int ib = t % 2;
    if (t >= 2) {
      if (auto s = pending[ib].WaitReleased(); !s.ok()) {
        return fail("push of step " + std::to_string(t - 2), s);
      }
    }
    Fill(b, rank, t, &u[ib]);
    auto h = c.Push(run->run_id, t, u[ib].data(), bytes);
    if (!h.ok()) return fail("push of step " + std::to_string(t), h.status());
    pending[ib] = *h;
  }
  for (auto& h : pending) {
    if (auto s = h.WaitStored(); !s.ok()) return fail("push", s);
  }

  // Backward: every step in reverse, compared byte for byte with its content regenerated.
  std::vector<float> got(cells), want(cells);
  for (int t = a.steps - 1; t >= 0; --t) {
    if (auto s = c.Fetch(run->run_id, t, got.data(), bytes); !s.ok()) {
      return fail("fetch of step " + std::to_string(t), s);
    }
    Fill(b, rank, t, &want);
    if (std::memcmp(got.data(), want.data(), bytes) != 0) {
      size_t first = 0;
      const auto* g = reinterpret_cast<const unsigned char*>(got.data());
      const auto* w = reinterpret_cast<const unsigned char*>(want.data());
      while (g[first] == w[first]) ++first;
      Copy("step " + std::to_string(t) + " came back with different bytes (first at byte " +
               std::to_string(first) + " of " + std::to_string(bytes) + ")",
           r->error, sizeof(r->error));
      return;
    }
    ++r->exact_steps;
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Args a;
  if (!ParseArgs(argc, argv, &a)) {
    if (rank == 0) {
      std::fprintf(stderr, "usage: mpi_ranks [--nx N] [--ny N] [--steps N]\n");
    }
    MPI_Finalize();
    return 2;
  }

  Report mine;
  int len = 0;
  MPI_Get_processor_name(mine.host, &len);
  RunRank(a, rank, size, &mine);

  // Every rank's total, reduced so that every rank knows the verdict; the reports for the
  // lines rank 0 prints.
  int64_t exact = mine.exact_steps, total = 0;
  MPI_Allreduce(&exact, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  std::vector<Report> all(rank == 0 ? size : 0);
  MPI_Gather(&mine, sizeof(Report), MPI_BYTE, all.data(), sizeof(Report), MPI_BYTE, 0,
             MPI_COMM_WORLD);
  const int64_t expected = static_cast<int64_t>(a.steps) * size;
  if (rank == 0) {
    std::set<std::string> hosts;
    for (int i = 0; i < size; ++i) {
      const Report& r = all[i];
      hosts.insert(r.host);
      if (r.error[0] != '\0') {
        std::printf("rank %d on %s: run %s: FAILED: %s\n", i, r.host, r.run, r.error);
      } else {
        std::printf("rank %d on %s: run %s, %lld/%d steps byte-exact (%s, %s)\n", i, r.host, r.run,
                    static_cast<long long>(r.exact_steps), a.steps, r.data_path, r.socket);
      }
    }
    std::string list;
    for (const std::string& h : hosts) list += (list.empty() ? "" : ",") + h;
    std::printf("cluster: %d ranks on %zu nodes (%s), %lld snapshots byte-exact%s\n", size,
                hosts.size(), list.c_str(), static_cast<long long>(total),
                total == expected ? "" : " (FAILED: not all of them)");
    std::fflush(stdout);
  }
  MPI_Finalize();
  return total == expected ? 0 : 1;
}
