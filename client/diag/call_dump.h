// CallDumper: level 10. Each dumped call gets a folder <KILN_DUMP_DIR>/<call>_<pid>_<op>/
// (created 0700, like the root) holding
//   meta.json            written first, status "started": op, entry point, params, every
//                        tensor's metadata, the kernel launched, device, arch, time, pid, tid
//   inputs.safetensors   the input and in-place tensors, before the launch
//   outputs.safetensors  the output and in-place tensors, after the call (stream synchronized)
//   meta.json            rewritten (temp file + rename) with status "completed" and the result
// so a process that dies mid-call leaves its inputs and a meta.json that says "started".
// Files appear whole or not at all (temp + fsync + rename).
//
// Limits: a call is dumped only while the calls dumped stay within KILN_DUMP_MAX_COUNT and
// the tensor bytes written within KILN_DUMP_MAX_BYTES; the first call that would pass either
// stops dumping for the rest of the process, and the log says so once.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "client/diag/op_call.h"
#include "kiln/status.h"

namespace kiln::client::diag {

inline constexpr const char* kDumpFormat = "kiln-call-dump/1";

class CallDumper {
 public:
  static CallDumper& Global();  // KILN_DUMP_DIR and the limits of Config()

  CallDumper(std::string root, int64_t max_count, int64_t max_bytes);

  // Decides whether `call` is dumped and, if so, writes its folder, meta.json ("started") and
  // inputs.safetensors. The caller has synchronized the call's stream. Returns the folder, or
  // "" when the call is not dumped. `note` gets what the log should say ("" for nothing).
  std::string BeginCall(const OpCall& call, std::string* note);

  // Writes outputs.safetensors (when `result` is OK and the stream's work succeeded) and
  // rewrites meta.json as "completed". Returns the note for the log.
  std::string FinishCall(const OpCall& call, const std::string& folder, const Status& result);

 private:
  Status EnsureRoot();

  std::string root_;
  int64_t max_count_;
  int64_t max_bytes_;
  std::mutex mu_;
  bool root_ready_ = false;
  bool stopped_ = false;  // a limit was reached or the root cannot be made: no more dumps
  int64_t count_ = 0;
  int64_t bytes_ = 0;
};

// Waits for the call's stream when any of its tensors lives in memory the GPU writes.
Status SynchronizeCallStream(const OpCall& call);

// Creates every missing folder of `path` with mode 0700.
Status MakeFolders(const std::string& path);

}  // namespace kiln::client::diag
