// What a TCP client learns of the server's file system: nothing. Replies and error messages
// sent to a peer that is not on the unix socket have every absolute path of kilnd's own
// folders and files (the cache, the generated sources, the kernels tree, the CUDA toolkit,
// the tuning store, ...) replaced by a placeholder ("<cache-dir>/blobs/ab/..."), so a remote
// caller cannot map the node (issue 15). Local clients keep the paths: they read blob files by
// path and operators on the node need them.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <google/protobuf/message.h>
#include <grpcpp/support/server_interceptor.h>

namespace kiln::server {

// A unix-socket peer ("unix:..."; "fd:..." for a connection kilnd accepted itself).
bool IsLocalPeer(std::string_view peer);

struct ServerPath {
  std::string path;         // absolute; "" or relative entries are ignored
  std::string placeholder;  // "<cache-dir>"
};

class PathRedactor {
 public:
  explicit PathRedactor(std::vector<ServerPath> paths);

  // `text` with each path replaced where it stands as a whole path or a prefix of one ("/a/b"
  // in "/a/b/c" and "(/a/b)", not in "/a/bc"). Longer paths first, so a folder inside another
  // keeps its own name.
  std::string Redact(std::string text) const;
  // Every string field of `message`, nested messages and maps included (bytes fields are data,
  // never paths, and are left alone).
  void RedactMessage(google::protobuf::Message* message) const;

 private:
  std::vector<ServerPath> paths_;
};

// Applies `redactor` to every message and status sent to a non-local peer.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> PathRedactionInterceptorFactory(
    std::shared_ptr<const PathRedactor> redactor);

}  // namespace kiln::server
