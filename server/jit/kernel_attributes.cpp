#include "server/jit/kernel_attributes.h"

#include <algorithm>
#include <map>

#include <charconv>

namespace kiln::server {
namespace {

// The integer right before `suffix` in `line` ("... 12 bytes smem" → 12); -1 when absent.
int NumberBefore(std::string_view line, std::string_view suffix) {
  size_t at = line.find(suffix);
  if (at == std::string_view::npos) return -1;
  size_t end = at;
  while (end > 0 && line[end - 1] == ' ') --end;
  size_t begin = end;
  while (begin > 0 && line[begin - 1] >= '0' && line[begin - 1] <= '9') --begin;
  int value = -1;
  if (begin == end || std::from_chars(line.data() + begin, line.data() + end, value).ec != std::errc()) return -1;
  return value;
}

// The text between the first pair of single quotes after `marker`.
std::string_view QuotedAfter(std::string_view line, std::string_view marker) {
  size_t at = line.find(marker);
  if (at == std::string_view::npos) return {};
  size_t open = line.find('\'', at + marker.size());
  if (open == std::string_view::npos) return {};
  size_t close = line.find('\'', open + 1);
  if (close == std::string_view::npos) return {};
  return line.substr(open + 1, close - open - 1);
}

constexpr std::string_view kCompilingEntry = "Compiling entry function";
constexpr std::string_view kFunctionProperties = "Function properties for ";

}  // namespace

int MaxThreadsForRegisters(int registers) {
  if (registers <= 0) return 1024;
  const int registers_per_warp = (registers * 32 + 255) / 256 * 256;
  const int warps = 4 * ((65536 / 4) / registers_per_warp);
  return std::min(1024, 32 * warps);
}

int MaxOptInSharedBytes(int cc) {
  constexpr int kKb = 1024;
  switch (cc) {
    case 75: return 64 * kKb;
    case 80:
    case 87: return 163 * kKb;
    case 86:
    case 88:
    case 89: return 99 * kKb;
    case 90:
    case 100:
    case 101:
    case 103:
    case 110: return 227 * kKb;
    case 120:
    case 121: return 99 * kKb;
    default: return 48 * kKb;
  }
}

std::vector<std::string> PtxasEntryFunctions(std::string_view log) {
  std::vector<std::string> names;
  for (std::string_view line : LogLines(log)) {
    if (line.find(kCompilingEntry) == std::string_view::npos) continue;
    std::string_view name = QuotedAfter(line, kCompilingEntry);
    if (!name.empty() && std::find(names.begin(), names.end(), name) == names.end()) names.emplace_back(name);
  }
  return names;
}

std::vector<KernelAttributes> ParsePtxasInfo(std::string_view log, const std::vector<std::string>& entries,
                                             const kernels::GpuArch& arch) {
  std::map<std::string, KernelAttributes, std::less<>> found;
  // ptxas reports one function at a time: "Compiling entry function 'k'" (kernels only),
  // "Function properties for k" followed by the stack/spill line (every function, device
  // functions of -rdc code too), then "Used N registers..." for the function compiled last.
  std::string_view compiling;   // the entry function whose "Used" line comes next
  std::string_view properties;  // the function whose stack/spill line comes next
  for (std::string_view line : LogLines(log)) {
    if (line.find(kCompilingEntry) != std::string_view::npos) {
      compiling = QuotedAfter(line, kCompilingEntry);
      properties = {};
      if (!compiling.empty()) found[std::string(compiling)].name = std::string(compiling);
      continue;
    }
    if (size_t at = line.find(kFunctionProperties); at != std::string_view::npos) {
      properties = line.substr(at + kFunctionProperties.size());
      properties = properties.substr(0, properties.find_first_of(": \t\r"));
      // NVRTC prints the stack line separately; nvcc-style logs may put it on this line.
      if (line.find("bytes stack frame") == std::string_view::npos) continue;
    }
    if (line.find("bytes stack frame") != std::string_view::npos) {
      auto it = found.find(properties);
      if (it != found.end()) {
        it->second.stack_bytes = std::max(0, NumberBefore(line, "bytes stack frame"));
        it->second.spill_store_bytes = std::max(0, NumberBefore(line, "bytes spill stores"));
        it->second.spill_load_bytes = std::max(0, NumberBefore(line, "bytes spill loads"));
      }
      properties = {};
      continue;
    }
    if (line.find("Used ") != std::string_view::npos && line.find(" registers") != std::string_view::npos) {
      auto it = found.find(compiling);
      if (it == found.end()) continue;
      KernelAttributes& a = it->second;
      a.registers = std::max(0, NumberBefore(line, "registers"));
      a.static_shared_bytes = std::max(0, NumberBefore(line, "bytes smem"));
      a.const_bytes = std::max(0, NumberBefore(line, "bytes cmem[0]"));
      // With calls (-rdc, -G) the stack a thread needs is the cumulative one, not its frame.
      a.stack_bytes = std::max(a.stack_bytes, NumberBefore(line, "bytes cumulative stack size"));
    }
  }

  std::vector<KernelAttributes> result;
  for (const std::string& entry : entries) {
    auto it = found.find(entry);
    if (it == found.end()) continue;
    KernelAttributes a = it->second;
    a.max_threads_per_block = MaxThreadsForRegisters(a.registers);
    a.max_dynamic_shared_bytes = std::max(0, MaxOptInSharedBytes(arch.cc) - a.static_shared_bytes);
    result.push_back(std::move(a));
  }
  return result;
}

std::vector<std::string_view> LogLines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    size_t end = text.find('\n');
    lines.push_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return lines;
}

}  // namespace kiln::server
