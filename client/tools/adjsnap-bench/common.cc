// The references every benchmark measures against, and adjsnapd's Stats (common.h).
#include "common.h"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "adjsnap/client.h"
#include "adjsnap/v1/control.grpc.pb.h"

namespace adjsnap_bench {

// Best of `reps` single-thread memcpy runs of `bytes`, in bytes per second.
double MemcpyRate(uint64_t bytes, int reps) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    auto t1 = Clock::now();
    asm volatile("" : : "r"(b.data()) : "memory");
    best = std::max(best, bytes / Seconds(t0, t1));
  }
  return best;
}

// Raw UCX put between two workers in this process. Returns bytes per second (best of reps),
// or a negative value with `error` set.
double UcxPutRate(uint64_t bytes, int reps, std::string* error) {
  auto fail = [&](const char* what, ucs_status_t s) {
    *error = std::string(what) + ": " + ucs_status_string(s);
    return -1.0;
  };
  ucp_config_t* config = nullptr;
  if (ucs_status_t s = ucp_config_read(nullptr, nullptr, &config); s != UCS_OK) {
    return fail("ucp_config_read", s);
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA;
  ucp_context_h ctx[2] = {};
  ucp_worker_h wrk[2] = {};
  for (int i = 0; i < 2; ++i) {
    if (ucs_status_t s = ucp_init(&params, config, &ctx[i]); s != UCS_OK) {
      return fail("ucp_init", s);
    }
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    if (ucs_status_t s = ucp_worker_create(ctx[i], &wp, &wrk[i]); s != UCS_OK) {
      return fail("ucp_worker_create", s);
    }
  }
  ucp_config_release(config);
  auto progress = [&] {
    ucp_worker_progress(wrk[0]);
    ucp_worker_progress(wrk[1]);
  };
  auto wait = [&](ucs_status_ptr_t req) -> ucs_status_t {
    if (req == nullptr) return UCS_OK;
    if (UCS_PTR_IS_ERR(req)) return UCS_PTR_STATUS(req);
    ucs_status_t s;
    while ((s = ucp_request_check_status(req)) == UCS_INPROGRESS) progress();
    ucp_request_free(req);
    return s;
  };
  ucp_address_t* addr = nullptr;
  size_t addr_len = 0;
  ucp_worker_get_address(wrk[1], &addr, &addr_len);
  ucp_ep_params_t ep_params{};
  ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  ep_params.address = addr;
  ucp_ep_h ep = nullptr;
  if (ucs_status_t s = ucp_ep_create(wrk[0], &ep_params, &ep); s != UCS_OK) {
    return fail("ucp_ep_create", s);
  }
  ucp_worker_release_address(wrk[1], addr);

  std::vector<char> src(bytes, 3);
  std::vector<char> dst(bytes, 4);
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = dst.data();
  mp.length = bytes;
  ucp_mem_h memh = nullptr;
  if (ucs_status_t s = ucp_mem_map(ctx[1], &mp, &memh); s != UCS_OK) {
    return fail("ucp_mem_map", s);
  }
  void* rkey_buf = nullptr;
  size_t rkey_len = 0;
  ucp_rkey_pack(ctx[1], memh, &rkey_buf, &rkey_len);
  ucp_rkey_h rkey = nullptr;
  ucs_status_t us = ucp_ep_rkey_unpack(ep, rkey_buf, &rkey);
  ucp_rkey_buffer_release(rkey_buf);
  if (us != UCS_OK) return fail("ucp_ep_rkey_unpack", us);

  double best = 0;
  ucp_request_param_t rp{};
  for (int r = 0; r < reps + 1; ++r) {  // the first put wires up lanes; not timed
    auto t0 = Clock::now();
    ucs_status_t s =
        wait(ucp_put_nbx(ep, src.data(), bytes, reinterpret_cast<uint64_t>(dst.data()), rkey, &rp));
    if (s == UCS_OK) s = wait(ucp_ep_flush_nbx(ep, &rp));
    auto t1 = Clock::now();
    if (s != UCS_OK) return fail("ucp_put_nbx", s);
    if (r > 0) best = std::max(best, bytes / Seconds(t0, t1));
  }
  if (std::memcmp(src.data(), dst.data(), bytes) != 0) {
    *error = "raw UCX put delivered different bytes";
    return -1.0;
  }
  ucp_rkey_destroy(rkey);
  ucp_request_param_t cp{};
  cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
  (void)wait(ucp_ep_close_nbx(ep, &cp));
  ucp_mem_unmap(ctx[1], memh);
  for (int i = 1; i >= 0; --i) {
    ucp_worker_destroy(wrk[i]);
    ucp_cleanup(ctx[i]);
  }
  return best;
}

// The solver's two alternating field buffers, each page marked so a fetch can be checked.
std::vector<std::vector<char>> SourceBuffers(uint64_t bytes) {
  std::vector<std::vector<char>> src(2, std::vector<char>(bytes));
  for (size_t b = 0; b < src.size(); ++b) {
    for (uint64_t i = 0; i < bytes; i += 4096) src[b][i] = static_cast<char>(i / 4096 + b);
  }
  return src;
}

adjsnap::Result<adjsnap::v1::StatsResponse> DaemonStats(const std::string& socket) {
  auto channel = grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials());
  auto stub = adjsnap::v1::Control::NewStub(channel);
  grpc::ClientContext ctx;
  adjsnap::v1::StatsResponse r;
  grpc::Status s = stub->Stats(&ctx, adjsnap::v1::StatsRequest(), &r);
  if (!s.ok()) return adjsnap::Status::Unavailable("Stats: " + s.error_message());
  return r;
}

const adjsnap::v1::TierStats* FindTier(const adjsnap::v1::StatsResponse& r, adjsnap::v1::Tier tier) {
  for (const auto& t : r.tiers()) {
    if (t.tier() == tier) return &t;
  }
  return nullptr;
}

// O_DIRECT sequential write then read of `steps` x `bytes` in `dir`; bytes per second each.
adjsnap::Status DirectIoRates(const std::string& dir, uint64_t steps, uint64_t bytes,
                            double* write_rate, double* read_rate) {
  std::string path = dir + "/adjsnap-bench-odirect.tmp";
  uint64_t chunk = (bytes + 4095) / 4096 * 4096;
  void* raw = std::aligned_alloc(4096, chunk);
  if (!raw) return adjsnap::Status::ResourceExhausted("aligned buffer");
  std::unique_ptr<void, void (*)(void*)> buf(raw, std::free);
  std::memset(buf.get(), 0x5c, chunk);
  int fd = open(path.c_str(), O_CREAT | O_TRUNC | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return adjsnap::Status::Internal("O_DIRECT open of " + path + ": " + std::strerror(errno));
  }
  auto fail = [&](const char* what) {
    std::string msg = std::string(what) + " " + path + ": " + std::strerror(errno);
    close(fd);
    unlink(path.c_str());
    return adjsnap::Status::Internal(msg);
  };
  auto t0 = Clock::now();
  for (uint64_t i = 0; i < steps; ++i) {
    if (pwrite(fd, buf.get(), chunk, static_cast<off_t>(i * chunk)) !=
        static_cast<ssize_t>(chunk)) {
      return fail("write");
    }
  }
  if (fdatasync(fd) != 0) return fail("fdatasync");
  auto t1 = Clock::now();
  for (uint64_t i = 0; i < steps; ++i) {
    if (pread(fd, buf.get(), chunk, static_cast<off_t>(i * chunk)) != static_cast<ssize_t>(chunk)) {
      return fail("read");
    }
  }
  auto t2 = Clock::now();
  close(fd);
  unlink(path.c_str());
  *write_rate = steps * chunk / Seconds(t0, t1);
  *read_rate = steps * chunk / Seconds(t1, t2);
  return adjsnap::Status::Ok();
}

int Fail(const std::string& what, const adjsnap::Status& s) {
  std::fprintf(stderr, "adjsnap-bench: %s%s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

}  // namespace adjsnap_bench
