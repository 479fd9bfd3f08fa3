// gRPC answers a request whose body does not decode as the method's protobuf message, and a
// method it does not know, with UNIMPLEMENTED and no text. This server interceptor gives both a
// message that names what was wrong; a request that does not decode becomes INVALID_ARGUMENT.
// Both are counted and logged as control-plane rejections (undecodable_request, unknown_method).
#pragma once

#include <grpcpp/support/server_interceptor.h>

#include <memory>

namespace snapd {

// For grpc::ServerBuilder::experimental().SetInterceptorCreators.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> NameRequestErrors();

}  // namespace snapd
