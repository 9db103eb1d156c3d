#include "server/rpc/parse_error_interceptor.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace kiln::server {
namespace {

using grpc::experimental::InterceptionHookPoints;

class ParseErrorInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit ParseErrorInterceptor(std::string method) : method_(std::move(method)) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      grpc::Status status = methods->GetSendStatus();
      if (status.error_code() == grpc::StatusCode::INTERNAL && status.error_message().empty())
        methods->ModifySendStatus(grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat("the request to ", method_,
                         " could not be parsed as its protobuf message (truncated or not protobuf bytes, or another "
                         "method's message); check the client's generated code matches kiln/v1/*.proto")));
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
};

class ParseErrorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override {
    return new ParseErrorInterceptor(info->method() == nullptr ? "" : info->method());
  }
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> ParseErrorInterceptorFactory() {
  return std::make_unique<ParseErrorFactory>();
}

}  // namespace kiln::server
