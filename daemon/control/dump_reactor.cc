// The Dump call: a server-streaming reactor that sends a run's steps in chunks, each step read
// from the store as a fetch would (a lease on host bytes, or a disk read), never more than one
// chunk ahead of the client.
#include "control/dump_reactor.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "adjsnap/zfp_codec.h"

namespace adjsnap {
namespace {

class DumpReactor final : public grpc::ServerWriteReactor<v1::DumpChunk> {
 public:
  static constexpr uint64_t kChunk = 1 << 20;

  // `refused` hears of a request refused up front (before this constructor returns).
  DumpReactor(Store* store, const v1::DumpRequest& req, const Result<Tenant>& who,
              const std::function<void(const Status&)>& refused)
      : store_(store) {
    if (!who.ok()) {
      refused(who.status());
      FinishWith(who.status());
      return;
    }
    who_ = *who;
    v1::RunInfo run;
    auto snaps = store->ListSnapshots(req.name(), &run, who_);
    if (!snaps.ok()) {
      refused(snaps.status());
      FinishWith(snaps.status());
      return;
    }
    run_id_ = run.run_id();
    bytes_ = run.spec().bytes_per_step();
    codec_param_ = run.spec().codec_param();  // a frame's (frames are of the run's codec)
    uint64_t end = req.end_step() ? req.end_step() : UINT64_MAX;
    for (const auto& s : *snaps) {
      if (s.step() >= req.first_step() && s.step() < end) steps_.push_back(s);
    }
    NextStep();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client stopped reading"));
      return;
    }
    if (block_ && offset_ < step_bytes_) {
      WriteChunk();
      return;
    }
    block_.reset();
    ++index_;
    NextStep();
  }
  void OnDone() override { delete this; }

 private:
  void FinishWith(const Status& s) {
    Finish(grpc::Status(static_cast<grpc::StatusCode>(s.code()), s.message()));
  }

  void NextStep() {
    if (index_ == steps_.size()) {
      Finish(grpc::Status::OK);
      return;
    }
    const v1::SnapshotInfo& info = steps_[index_];
    if (info.tier() == v1::TIER_LOST) {
      WriteLost(info.step());
      return;
    }
    // OnBlock runs now, or from an I/O thread once the step is read from disk.
    store_->BeginFetch(run_id_, info.step(), bytes_, /*backward=*/false,
                       [this](Result<Store::FetchGrant> g) { OnBlock(std::move(g)); }, who_);
  }

  void OnBlock(Result<Store::FetchGrant> grant) {
    if (!grant.ok()) {
      if (grant.status().code() == Code::kDataLoss) {
        WriteLost(steps_[index_].step());
      } else {
        FinishWith(grant.status());
      }
      return;
    }
    block_ = std::move(grant->block);
    step_bytes_ = grant->bytes;  // a framed step's frame, else the raw step
    offset_ = 0;
    WriteChunk();
  }

  void WriteChunk() {
    const v1::SnapshotInfo& info = steps_[index_];
    uint64_t n = std::min(kChunk, step_bytes_ - offset_);
    chunk_.Clear();
    chunk_.set_step(info.step());
    chunk_.set_offset(offset_);
    chunk_.set_step_bytes(step_bytes_);
    // A frame is sent as stored, and its checksum is the frame's. A lossy disk copy decodes
    // to other bytes than were pushed: no checksum to check then.
    bool framed = compress::IsGpuCodec(info.codec());
    if (framed && offset_ == 0) {
      chunk_.set_codec(info.codec());
      chunk_.set_codec_param(codec_param_);
    }
    bool lossless =
        info.codec() == v1::CODEC_NONE || info.codec() == v1::CODEC_ZFP_REVERSIBLE || framed;
    if (offset_ == 0 && lossless && info.checksum_state() == v1::CHECKSUM_RECORDED) {
      chunk_.set_checksum(info.checksum());
      chunk_.set_checksum_recorded(true);
    }
    chunk_.set_data(static_cast<const char*>(block_->data()) + offset_, n);
    offset_ += n;
    StartWrite(&chunk_);
  }

  void WriteLost(uint64_t step) {
    block_.reset();
    chunk_.Clear();
    chunk_.set_step(step);
    chunk_.set_step_bytes(bytes_);
    chunk_.set_lost(true);
    StartWrite(&chunk_);
  }

  Store* const store_;
  Tenant who_;
  uint64_t run_id_ = 0;
  uint64_t bytes_ = 0;
  std::vector<v1::SnapshotInfo> steps_;
  size_t index_ = 0;
  std::shared_ptr<HostBlock> block_;  // the step being streamed
  uint64_t step_bytes_ = 0;           // its bytes as sent (FetchGrant::bytes)
  double codec_param_ = 0;
  uint64_t offset_ = 0;
  v1::DumpChunk chunk_;
};

}  // namespace

grpc::ServerWriteReactor<v1::DumpChunk>* StartDump(
    Store* store, const v1::DumpRequest& req, const Result<Tenant>& who,
    const std::function<void(const Status&)>& refused) {
  return new DumpReactor(store, req, who, refused);
}

}  // namespace adjsnap
