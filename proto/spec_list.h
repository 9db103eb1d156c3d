// Spec lists: the op specializations to warm a daemon with (`kiln warm`, `kilnd --warm`) or to
// prebuild (`kiln aot build --ops`), as `kiln cache export-list` writes them. One spec a line:
//
//   # comment
//   rmsnorm dtype=bf16 hidden=4096
//   batch_decode dtype=bf16 head_dim=128 group=4 page_size=16 @sm_90a   # 1523 hits
//
// op, then its params as KEY=VALUE (what `kiln get OP KEY=VALUE...` takes), then optional
// @ARCH targets (the archs the spec is wanted for; a command's --arch list replaces them). '#'
// starts a comment. Only the form is checked here; the daemon's generator checks the params.
// Lines naming the same op and params merge (their archs join).
//
// The one parser of the format, for the CLI and the daemon alike (proto/ is the folder both may
// include: cmake/CheckIncludes.cmake); its entries become kiln.v1.OpRequest messages.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/v1/kernel.pb.h"

namespace kiln::proto {

struct SpecListEntry {
  std::string op;
  std::map<std::string, std::string> params;
  std::vector<std::string> archs;  // from @ARCH tokens, in first-seen order, no duplicates
  std::string source;              // "<path>:<line>" of its first line
};

struct ParsedSpecList {
  std::vector<SpecListEntry> entries;  // in first-seen order
  std::string error;                   // empty: every line was good
};

// The first bad line stops it: error is "<path>:<line>: '<line>': <what is wrong>; expected
// 'OP KEY=VALUE... [@ARCH...]'".
ParsedSpecList ParseSpecList(std::string_view text, std::string_view path);
// Reads and parses the file at `path` ("-": standard input); an unreadable file is an error
// naming it and errno's text.
ParsedSpecList ReadSpecList(const std::string& path);

// One line of the format for `entry` (params in key order), with "  # <comment>" when given.
std::string FormatSpecLine(const SpecListEntry& entry, std::string_view comment = "");

// One compile target: an entry and one arch.
struct SpecTarget {
  const SpecListEntry* entry;
  std::string arch;
  v1::OpRequest Request() const;  // the entry as GetKernel's op
};

// Every (entry, arch): with a non-empty `archs` (a command's --arch list) each entry for each of
// them; else each entry for its own @ARCH targets. An entry left with no arch is an error naming
// its line and how to give one (`arch_flag`: "--arch").
struct SpecTargets {
  std::vector<SpecTarget> targets;
  std::string error;
};
SpecTargets ExpandSpecTargets(const std::vector<SpecListEntry>& entries, const std::vector<std::string>& archs,
                              std::string_view arch_flag);

}  // namespace kiln::proto
