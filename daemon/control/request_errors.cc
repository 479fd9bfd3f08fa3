#include "control/request_errors.h"

#include <google/protobuf/descriptor.h>

#include <string>

#include "log.h"

namespace adjsnap {

namespace {

class RequestErrors final : public grpc::experimental::Interceptor {
 public:
  // gRPC creates one per call and destroys it when the call is done.
  RequestErrors(const char* method, log::RejectionLog* rejections, std::atomic<int64_t>* calls)
      : method_(method ? method : ""), rejections_(rejections), calls_(calls) {
    calls_->fetch_add(1);
  }
  ~RequestErrors() override { calls_->fetch_sub(1); }

  void Intercept(grpc::experimental::InterceptorBatchMethods* batch) override {
    using Hook = grpc::experimental::InterceptionHookPoints;
    if (batch->QueryInterceptionHookPoint(Hook::PRE_SEND_STATUS)) {
      grpc::Status s = batch->GetSendStatus();
      // adjsnapd implements every method it serves, and its own errors always carry a message:
      // an empty UNIMPLEMENTED comes from gRPC itself.
      if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED && s.error_message().empty()) {
        grpc::Status named = Explain();
        rejections_->Reject(named.error_code() == grpc::StatusCode::UNIMPLEMENTED
                                ? log::Reason::kUnknownMethod
                                : log::Reason::kUndecodable,
                            named.error_message());
        batch->ModifySendStatus(named);
      }
    }
    batch->Proceed();
  }

 private:
  grpc::Status Explain() const {
    // "/adjsnap.v1.Control/OpenRun" → service "adjsnap.v1.Control", method "OpenRun".
    size_t slash = method_.rfind('/');
    const google::protobuf::MethodDescriptor* method = nullptr;
    if (slash != std::string::npos && slash > 0) {
      const auto* service = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          method_.substr(1, slash - 1));
      if (service) method = service->FindMethodByName(method_.substr(slash + 1));
    }
    if (method == nullptr) {
      return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                          "adjsnapd serves no method '" + method_ + "'");
    }
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the request body of " + method_ +
                            " does not decode as its message, " +
                            method->input_type()->full_name());
  }

  const std::string method_;
  log::RejectionLog* const rejections_;
  std::atomic<int64_t>* const calls_;
};

// Outlives its interceptors: the server owns it and destroys it after its last call.
class Factory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit Factory(std::atomic<int64_t>* calls) : calls_(calls) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RequestErrors(info->method(), &rejections_, calls_);
  }

 private:
  std::atomic<int64_t>* const calls_;
  // The control plane's requests that never reach the service (ControlService counts the
  // others).
  log::RejectionLog rejections_{log::Surface::kControlPlane};
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> NameRequestErrors(
    std::atomic<int64_t>* calls_in_flight) {
  return std::make_unique<Factory>(calls_in_flight);
}

}  // namespace adjsnap
