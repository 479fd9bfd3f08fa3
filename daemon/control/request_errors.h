// gRPC answers a request whose body does not decode as the method's protobuf message, and a
// method it does not know, with UNIMPLEMENTED and no text. This server interceptor gives both a
// message that names what was wrong; a request that does not decode becomes INVALID_ARGUMENT.
// Both are counted and logged as control-plane rejections (undecodable_request, unknown_method).
// It also counts the calls in flight, so that a stop waits for those and not for idle clients.
#pragma once

#include <grpcpp/support/server_interceptor.h>

#include <atomic>
#include <cstdint>
#include <memory>

namespace adjsnap {

// For grpc::ServerBuilder::experimental().SetInterceptorCreators. `calls_in_flight` counts the
// calls begun and not yet done; it must outlive the server.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> NameRequestErrors(
    std::atomic<int64_t>* calls_in_flight);

}  // namespace adjsnap
