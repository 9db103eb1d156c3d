#include "client/core/rpc/cubin_fetch.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "client/core/rpc/client_counters.h"
#include "client/core/rpc/client_settings.h"
#include "client/core/rpc/embedded_fetch.h"
#include "client/core/rpc/kernel_rpc.h"
#include "client/core/rpc/local_fetch_client.h"
#include "client/core/rpc/sha256.h"
#include "proto/crc32c.h"

namespace kiln::client {
namespace {

StatusOr<std::string> ReadBlob(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status(StatusCode::kNotFound, "cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    Status error(StatusCode::kDataLoss, "cannot stat " + path + ": " + std::strerror(errno));
    close(fd);
    return error;
  }
  // A blob never changes once written (its name is its key): read the size fstat gives, straight
  // into the string, and stop there. Reading on to a zero-byte read would grow the string past
  // the file (a second allocation, zero-fill and copy of the whole cubin: ~10 us of a warm fetch
  // of 100 KB). A file cut short ends the loop early, and Verify's checksum reports it.
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    ssize_t n = read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status error(StatusCode::kDataLoss, "cannot read " + path + ": " + std::strerror(errno));
      close(fd);
      return error;
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  bytes.resize(got);
  return bytes;
}

// OK when `bytes` are what the reply promised. `same_node`: the reply came from this node's
// daemon, whose CRC-32C of bytes it verified by SHA-256 may stand in for the SHA-256.
Status Verify(const v1::GetKernelResponse& reply, const std::string& bytes, const std::string& where, bool same_node) {
  if (reply.sha256().empty())
    return Status(StatusCode::kDataLoss, "the daemon sent no SHA-256 for " + reply.uri() + " (key " +
                                             reply.cache_key() + "); refusing to load");
  if (bytes.empty())
    return Status(StatusCode::kDataLoss, "the cubin of " + reply.uri() + " from " + where + " is empty");
  if (same_node && reply.has_cubin_crc32c()) {
    const uint32_t actual = proto::Crc32c(bytes);
    if (actual == reply.cubin_crc32c() && bytes.size() == reply.cubin_size()) return OkStatus();
    char text[64];
    std::snprintf(text, sizeof(text), "expected crc32c %08x, got %08x", reply.cubin_crc32c(), actual);
    return Status(StatusCode::kDataLoss, "checksum mismatch for the cubin of " + reply.uri() + " (key " +
                                             reply.cache_key() + ", sha256 " + reply.sha256() + ") from " + where +
                                             ": " + text + " over " + std::to_string(bytes.size()) + " bytes (" +
                                             std::to_string(reply.cubin_size()) + " expected)");
  }
  const std::string actual = Sha256Hex(bytes);
  if (actual != reply.sha256())
    return Status(StatusCode::kDataLoss, "checksum mismatch for the cubin of " + reply.uri() + " (key " +
                                             reply.cache_key() + ") from " + where + ": expected sha256 " +
                                             reply.sha256() + ", got " + actual + " over " +
                                             std::to_string(bytes.size()) + " bytes");
  return OkStatus();
}

// What a fetch adds to the caller's request: who asks, and whether a blob path may stand in for
// the bytes. Not part of what is asked for (ModuleCache's identities leave them out).
v1::GetKernelRequest PerCallFields(const FetchOptions& options, bool prefer_blob_path) {
  v1::GetKernelRequest fields;
  fields.set_client_id(options.client_id);
  fields.set_prefer_blob_path(prefer_blob_path);
  return fields;
}

// One GetKernel of `request` with `per_call` merged in: over the same-node protocol when it can
// carry it, else gRPC. The same-node body is the request serialized once with the per-call
// fields' serialization appended: protobuf parses concatenated messages as their merge, so the
// daemon reads the same request without this process copying the caller's (a warm fetch of a
// 6 KB, 40-kernel source: one copy, one serialization and their destruction saved).
StatusOr<v1::GetKernelResponse> Ask(const DaemonConnection& connection, const v1::GetKernelRequest& request,
                                    const v1::GetKernelRequest& per_call, const FetchOptions& options,
                                    FetchedCubin& fetched) {
  if (options.local_fetch && connection.local_fetch() != nullptr) {
    std::string body = request.SerializeAsString();
    per_call.AppendToString(&body);
    auto answer = connection.local_fetch()->Call(connection, body, request, options.timeout);
    if (answer.answered) {
      Bump(Counters().get_kernel_rpcs);
      Bump(Counters().local_fetches);
      if (!answer.reply.ok()) Bump(Counters().rpc_failures);
      fetched.local_fetch = true;
      return std::move(answer.reply);
    }
  }
  fetched.local_fetch = false;
  v1::GetKernelRequest merged = request;  // gRPC sends a message: the copy is made here only
  merged.MergeFrom(per_call);
  return CallGetKernel(connection, merged, options.timeout);
}

// The fetch itself, filling `fetched` (its timings too). `request` carries no per-call field
// (they are merged in by Ask; a caller's own are cleared first).
Status Fetch(const DaemonConnection& connection, const v1::GetKernelRequest& request, const FetchOptions& options,
             FetchedCubin& fetched) {
  v1::GetKernelRequest per_call = PerCallFields(options, options.prefer_blob_path && connection.is_local());
  auto t = std::chrono::steady_clock::now();
  auto ms_since = [](std::chrono::steady_clock::time_point from) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - from).count();
  };
  auto reply = Ask(connection, request, per_call, options, fetched);
  fetched.rpc_ms = ms_since(t);
  const bool same_node = connection.is_local() && !options.full_checksum;
  if (!reply.ok()) return reply.status();

  if (!reply->blob_path().empty()) {
    t = std::chrono::steady_clock::now();
    auto bytes = ReadBlob(reply->blob_path());
    Status good = bytes.ok() ? Verify(*reply, *bytes, reply->blob_path(), same_node) : bytes.status();
    fetched.verify_ms = ms_since(t);
    if (good.ok()) {
      Bump(Counters().blob_path_reads);
      fetched.blob_path = reply->blob_path();
      fetched.cubin = std::move(bytes).value();
      fetched.reply = std::move(reply).value();
      return OkStatus();
    }
    // The file went away (evicted between reply and read) or is damaged: ask for the bytes.
    per_call = PerCallFields(options, false);
    t = std::chrono::steady_clock::now();
    reply = Ask(connection, request, per_call, options, fetched);
    fetched.rpc_ms += ms_since(t);
    if (!reply.ok()) return reply.status().WithContext("after the blob file failed (" + good.message() + ")");
    if (!reply->blob_path().empty() && reply->cubin().empty())
      return Status(StatusCode::kInternal,
                    "the daemon sent a blob path although the bytes were asked for (" + DescribeRequest(request) + ")");
  }
  fetched.cubin = std::move(*reply->mutable_cubin());
  reply->clear_cubin();
  t = std::chrono::steady_clock::now();
  KILN_RETURN_IF_ERROR(Verify(*reply, fetched.cubin, "the daemon's reply", same_node));
  fetched.verify_ms += ms_since(t);
  fetched.reply = std::move(reply).value();
  return OkStatus();
}

}  // namespace

StatusOr<FetchedCubin> FetchCubin(const DaemonConnection& connection, const v1::GetKernelRequest& request,
                                  const FetchOptions& options) {
  FetchedCubin fetched;
  if (!request.client_id().empty() || request.prefer_blob_path()) {
    // The fetch's own per-call fields replace a caller's (a copy only on this unusual path).
    v1::GetKernelRequest cleared = request;
    cleared.clear_client_id();
    cleared.clear_prefer_blob_path();
    KILN_RETURN_IF_ERROR(Fetch(connection, cleared, options, fetched));
    return fetched;
  }
  KILN_RETURN_IF_ERROR(Fetch(connection, request, options, fetched));
  return fetched;
}

StatusOr<FetchedCubin> FetchCubin(const v1::GetKernelRequest& request) {
  auto settings = CurrentSettings();
  FetchOptions options;
  options.timeout = settings->options.rpc_timeout;
  options.prefer_blob_path = settings->options.prefer_blob_path;
  options.local_fetch = settings->options.local_fetch;
  options.full_checksum = settings->options.full_checksum;
  options.client_id = settings->client_id;
  KILN_ASSIGN_OR_RETURN(bool embedded, settings->source->UseEmbedded());
  if (embedded) return EmbeddedFetch(request, options);
  return FetchCubin(*settings->connection, request, options);
}

}  // namespace kiln::client
