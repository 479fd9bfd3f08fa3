// The Dump call's reactor (dump_reactor.cc): streams the steps of one run, as DumpChunks.
#pragma once

#include <functional>

#include "adjsnap/status.h"
#include "adjsnap/v1/control.grpc.pb.h"
#include "store/store.h"

namespace adjsnap {

// A reactor that sends the steps [req.first_step, req.end_step) of run req.name that `who` may
// read, and deletes itself when done. `refused` hears of a request refused up front (before
// this returns): the caller is unknown, or the run is not found or not theirs.
grpc::ServerWriteReactor<v1::DumpChunk>* StartDump(
    Store* store, const v1::DumpRequest& req, const Result<Tenant>& who,
    const std::function<void(const Status&)>& refused);

}  // namespace adjsnap
