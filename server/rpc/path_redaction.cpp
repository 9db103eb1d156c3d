#include "server/rpc/path_redaction.h"

#include <grpcpp/server_context.h>

#include <algorithm>
#include <cctype>
#include <optional>

namespace kiln::server {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using grpc::experimental::InterceptionHookPoints;

// A character that continues a file name: a match followed by one is another, longer name.
bool ContinuesName(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'; }

std::string Normalized(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

class PathRedactionInterceptor : public grpc::experimental::Interceptor {
 public:
  PathRedactionInterceptor(grpc::experimental::ServerRpcInfo* info, std::shared_ptr<const PathRedactor> redactor)
      : info_(info), redactor_(std::move(redactor)) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    const bool send_message = methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_MESSAGE);
    const bool send_status = methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS);
    if ((send_message || send_status) && !Local()) {
      if (send_message) {
        // The service's own reply is not ours to change: a redacted copy is sent instead, kept
        // alive here until the next message replaces it (a stream sends one at a time).
        if (const auto* reply = static_cast<const Message*>(methods->GetSendMessage()); reply != nullptr) {
          copy_.reset(reply->New());
          copy_->CopyFrom(*reply);
          redactor_->RedactMessage(copy_.get());
          methods->ModifySendMessage(copy_.get());
        }
      }
      if (send_status) {
        grpc::Status status = methods->GetSendStatus();
        if (!status.ok())
          methods->ModifySendStatus(
              grpc::Status(status.error_code(), redactor_->Redact(status.error_message()), status.error_details()));
      }
    }
    methods->Proceed();
  }

 private:
  bool Local() {
    if (!local_.has_value()) {
      auto* context = info_->server_context();
      local_ = context != nullptr && IsLocalPeer(context->peer());
    }
    return *local_;
  }

  grpc::experimental::ServerRpcInfo* info_;
  std::shared_ptr<const PathRedactor> redactor_;
  std::optional<bool> local_;
  std::unique_ptr<Message> copy_;
};

class PathRedactionFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit PathRedactionFactory(std::shared_ptr<const PathRedactor> redactor) : redactor_(std::move(redactor)) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override {
    return new PathRedactionInterceptor(info, redactor_);
  }

 private:
  std::shared_ptr<const PathRedactor> redactor_;
};

}  // namespace

bool IsLocalPeer(std::string_view peer) { return peer.substr(0, 5) == "unix:" || peer.substr(0, 3) == "fd:"; }

PathRedactor::PathRedactor(std::vector<ServerPath> paths) {
  for (auto& p : paths) {
    p.path = Normalized(std::move(p.path));
    if (p.path.size() > 1 && p.path.front() == '/') paths_.push_back(std::move(p));
  }
  std::stable_sort(paths_.begin(), paths_.end(),
                   [](const ServerPath& a, const ServerPath& b) { return a.path.size() > b.path.size(); });
}

std::string PathRedactor::Redact(std::string text) const {
  for (const auto& p : paths_) {
    size_t at = 0;
    while ((at = text.find(p.path, at)) != std::string::npos) {
      const size_t end = at + p.path.size();
      if (end < text.size() && ContinuesName(text[end])) {
        at = end;
        continue;
      }
      text.replace(at, p.path.size(), p.placeholder);
      at += p.placeholder.size();
    }
  }
  return text;
}

void PathRedactor::RedactMessage(Message* message) const {
  const Reflection* reflection = message->GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(*message, &fields);
  for (const FieldDescriptor* field : fields) {
    if (field->type() == FieldDescriptor::TYPE_STRING) {
      if (field->is_repeated()) {
        for (int i = 0; i < reflection->FieldSize(*message, field); ++i)
          reflection->SetRepeatedString(message, field, i, Redact(reflection->GetRepeatedString(*message, field, i)));
      } else {
        reflection->SetString(message, field, Redact(reflection->GetString(*message, field)));
      }
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (field->is_repeated()) {
        for (int i = 0; i < reflection->FieldSize(*message, field); ++i)
          RedactMessage(reflection->MutableRepeatedMessage(message, field, i));
      } else {
        RedactMessage(reflection->MutableMessage(message, field));
      }
    }
  }
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> PathRedactionInterceptorFactory(
    std::shared_ptr<const PathRedactor> redactor) {
  return std::make_unique<PathRedactionFactory>(std::move(redactor));
}

}  // namespace kiln::server
