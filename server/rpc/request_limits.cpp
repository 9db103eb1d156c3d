#include "server/rpc/request_limits.h"

#include <initializer_list>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/input_limits.h"

namespace kiln::server {
namespace {

using proto::CountProblem;
using proto::LengthProblem;

// The first problem of a list of checks, or "".
std::string First(std::initializer_list<std::string> problems) {
  for (const std::string& p : problems)
    if (!p.empty()) return p;
  return "";
}

std::string Indexed(const char* field, int i) { return absl::StrCat(field, "[", i, "]"); }

// LengthProblem for a field whose name must be built ("source.entries[12]", "op.params['dtype']"):
// built only for a value over its limit. Every GetKernel checks every field, and building the
// names cost a warm fetch of a 40-entry source ~20 000 instructions (an allocation each).
template <typename Name>
std::string NamedLengthProblem(const Name& name, std::string_view value, size_t limit) {
  return value.size() <= limit ? std::string() : LengthProblem(name(), value, limit);
}

std::string SourceProblem(const v1::SourceRequest& s) {
  // How many entries, options and units: the raw-source policy counts them (without quoting).
  if (auto p = LengthProblem("source.name", s.name(), proto::kMaxSourceNameBytes); !p.empty()) return p;
  for (int i = 0; i < s.entries_size(); ++i)
    if (auto p = NamedLengthProblem([i] { return Indexed("source.entries", i); }, s.entries(i),
                                    proto::kMaxEntryNameBytes);
        !p.empty())
      return p;
  for (int i = 0; i < s.options_size(); ++i)
    if (auto p = NamedLengthProblem([i] { return Indexed("source.options", i); }, s.options(i), proto::kMaxOptionBytes);
        !p.empty())
      return p;
  for (int i = 0; i < s.extra_units_size(); ++i)
    if (auto p = NamedLengthProblem([i] { return absl::StrCat(Indexed("source.extra_units", i), ".name"); },
                                    s.extra_units(i).name(), proto::kMaxUnitNameBytes);
        !p.empty())
      return p;
  return "";
}

}  // namespace

std::string RequestLengthProblem(const v1::GetKernelRequest& request) {
  if (auto p = First({LengthProblem("target.arch", request.target().arch(), proto::kMaxArchBytes),
                      LengthProblem("client_id", request.client_id(), proto::kMaxClientIdBytes)});
      !p.empty())
    return p;
  if (request.has_source()) return SourceProblem(request.source());
  const v1::OpRequest& op = request.op();
  if (auto p = First({LengthProblem("op.name", op.name(), proto::kMaxOpNameBytes),
                      CountProblem("op.params", op.params_size(), proto::kMaxParams)});
      !p.empty())
    return p;
  for (const auto& [key, value] : op.params()) {
    if (auto p = LengthProblem("a key of op.params", key, proto::kMaxParamKeyBytes); !p.empty()) return p;
    // The key is within its limit here, so naming it keeps the message short.
    if (auto p = NamedLengthProblem([&key] { return absl::StrCat("op.params[", proto::QuoteInput(key), "]"); }, value,
                                    proto::kMaxParamValueBytes);
        !p.empty())
      return p;
  }
  return "";
}

std::string RequestLengthProblem(const v1::ListOpsRequest& request) {
  return LengthProblem("name", request.name(), proto::kMaxOpNameBytes);
}

std::string RequestLengthProblem(const v1::ListEntriesRequest& request) {
  return First({LengthProblem("op", request.op(), proto::kMaxOpNameBytes),
                LengthProblem("uri_prefix", request.uri_prefix(), proto::kMaxUriBytes),
                LengthProblem("arch", request.arch(), proto::kMaxArchBytes),
                LengthProblem("page_token", request.page_token(), proto::kMaxPageTokenBytes)});
}

std::string RequestLengthProblem(const v1::GetEntryRequest& request) {
  return LengthProblem("cache_key", request.cache_key(), proto::kMaxCacheKeyBytes);
}

std::string RequestLengthProblem(const v1::EvictEntriesRequest& request) {
  if (auto p = First({LengthProblem("op", request.op(), proto::kMaxOpNameBytes),
                      LengthProblem("uri_prefix", request.uri_prefix(), proto::kMaxUriBytes),
                      LengthProblem("arch", request.arch(), proto::kMaxArchBytes),
                      CountProblem("cache_keys", request.cache_keys_size(), proto::kMaxEvictKeys)});
      !p.empty())
    return p;
  for (int i = 0; i < request.cache_keys_size(); ++i)
    if (auto p = LengthProblem(Indexed("cache_keys", i), request.cache_keys(i), proto::kMaxCacheKeyBytes); !p.empty())
      return p;
  return "";
}

std::string RequestLengthProblem(const v1::GetJobRequest& request) {
  return LengthProblem("id", request.id(), proto::kMaxJobIdBytes);
}

}  // namespace kiln::server
