// The most bytes each string a client may send the daemon, in one place, and how an error
// message quotes what a client sent. Every RPC checks its request against these before it
// does anything else; one string over its limit is INVALID_ARGUMENT naming the field and the
// limit (LengthProblem).
//
// Why: an error message is sent back as the grpc-message header, and a header past gRPC's
// metadata limit (8 KiB by default) replaces the real status by RESOURCE_EXHAUSTED "metadata
// size exceeds limit" (issue 15: a 1 MB op name). So no string may reach an error message
// unbounded: the limits keep what the checks after them echo short, and QuoteInput keeps any
// quote short whatever it is given. Each limit is far above any real value.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kiln::proto {

// GetKernelRequest.op.name, ListOpsRequest.name, ListEntriesRequest.op, EvictEntriesRequest.op:
// op names are short identifiers ("fused_add_rmsnorm"); tuning ops have the same limit
// (OpNameProblem).
inline constexpr size_t kMaxOpNameBytes = 64;
// GetKernelRequest.op.params: keys are identifiers ("hidden"), values a word or a number.
inline constexpr size_t kMaxParamKeyBytes = 64;
inline constexpr size_t kMaxParamValueBytes = 256;
inline constexpr size_t kMaxParams = 64;  // far more than any op has
// SourceRequest.name (becomes part of the URI and of a folder name; the policy allows 64).
inline constexpr size_t kMaxSourceNameBytes = 64;
// SourceUnit.name (a file name; the policy allows 64).
inline constexpr size_t kMaxUnitNameBytes = 64;
// SourceRequest.entries (C identifiers; the policy allows 128).
inline constexpr size_t kMaxEntryNameBytes = 128;
// SourceRequest.options: "-DNAME=VALUE" with a value of a few words.
inline constexpr size_t kMaxOptionBytes = 1024;
// SourceRequest.code and SourceUnit.code, all units together: the raw-source policy's 1 MiB
// (kernels/jit/raw_source.h), checked there; the daemon's 8 MiB receive limit bounds the rest.
// Code is never quoted in a message.
// Target.arch: "sm_90a".
inline constexpr size_t kMaxArchBytes = 32;
// GetKernelRequest.client_id: a process name and pid, shown in the job's waiter list.
inline constexpr size_t kMaxClientIdBytes = 256;
// GetEntryRequest.cache_key, EvictEntriesRequest.cache_keys: SHA-256 hex digits.
inline constexpr size_t kMaxCacheKeyBytes = 64;
inline constexpr size_t kMaxEvictKeys = 10000;  // one request's worth; more takes several
// GetJobRequest.id: "j<pid>-<n>".
inline constexpr size_t kMaxJobIdBytes = 64;
// ListEntriesRequest.uri_prefix, EvictEntriesRequest.uri_prefix: URIs are a name and a few
// params ("rmsnorm_bf16_h4096", "src_vadd_<12 hex>").
inline constexpr size_t kMaxUriBytes = 256;
// ListEntriesRequest.page_token: an opaque token the daemon wrote itself.
inline constexpr size_t kMaxPageTokenBytes = 1024;
// TuningCandidate.failure: a line or two saying why a tactic failed.
inline constexpr size_t kMaxTuningFailureBytes = 4096;
// The other tuning strings (bucket, gpu_name, versions, tactics, timing) have their limits in
// proto/tuning_checks.h, where their form is checked.

// How much of one input a message quotes.
inline constexpr size_t kMaxQuotedBytes = 64;

// `input` in single quotes when it is at most kMaxQuotedBytes long, else its first
// kMaxQuotedBytes bytes and how many more there were: 'aaaa…' (1048512 more bytes). Control
// characters are shown as \xNN, so a quote is always one printable line.
std::string QuoteInput(std::string_view input);

// "" when `value` has at most `limit` bytes, else "<field> is N bytes long (starts 'abc…' (N
// more bytes)); at most <limit> bytes".
std::string LengthProblem(std::string_view field, std::string_view value, size_t limit);

// "" when a list of `count` items is at most `limit` long, else "<field> has N items; at most
// <limit>".
std::string CountProblem(std::string_view field, size_t count, size_t limit);

}  // namespace kiln::proto
