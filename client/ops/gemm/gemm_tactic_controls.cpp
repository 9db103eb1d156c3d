#include "client/ops/gemm/gemm_tactic_controls.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "client/core/api/invalid_argument.h"
#include "proto/tactic_blocklist.h"

namespace kiln::client {
namespace {

constexpr const char* kTacticForm =
    "t<tile_m>x<tile_n>x64s<stages>g<group_m>[k<split_k>], e.g. t128x256x64s4g8 or t64x256x64s4g8k8";

// Reads a decimal number at `text[*pos]`, advancing; false when there is none.
bool Number(std::string_view text, size_t* pos, int* value) {
  const size_t start = *pos;
  long long v = 0;
  while (*pos < text.size() && text[*pos] >= '0' && text[*pos] <= '9' && *pos - start < 6)
    v = v * 10 + (text[(*pos)++] - '0');
  *value = static_cast<int>(v);
  return *pos > start;
}

bool Expect(std::string_view text, size_t* pos, char c) {
  if (*pos >= text.size() || text[*pos] != c) return false;
  ++*pos;
  return true;
}

}  // namespace

std::string GemmTacticText(const gemm::GemmTactic& t) {
  return "t" + std::to_string(t.tile_m) + "x" + std::to_string(t.tile_n) + "x" + std::to_string(gemm::kTileK) + "s" +
         std::to_string(t.stages) + "g" + std::to_string(t.group_m) +
         (t.split_k > 1 ? "k" + std::to_string(t.split_k) : "");
}

StatusOr<gemm::GemmTactic> ParseGemmTactic(std::string_view text) {
  gemm::GemmTactic t{};
  int tile_k = 0;
  size_t pos = 0;
  const bool parsed = Expect(text, &pos, 't') && Number(text, &pos, &t.tile_m) && Expect(text, &pos, 'x') &&
                      Number(text, &pos, &t.tile_n) && Expect(text, &pos, 'x') && Number(text, &pos, &tile_k) &&
                      Expect(text, &pos, 's') && Number(text, &pos, &t.stages) && Expect(text, &pos, 'g') &&
                      Number(text, &pos, &t.group_m) &&
                      (pos == text.size() || (Expect(text, &pos, 'k') && Number(text, &pos, &t.split_k))) &&
                      pos == text.size();
  if (!parsed) return InvalidArgument("'" + std::string(text) + "' is not a gemm tactic; expected " + kTacticForm);
  if (tile_k != gemm::kTileK || !gemm::GemmTacticFits(t))
    return InvalidArgument("'" + std::string(text) +
                           "' is not in the gemm tactic space (tile_m 64 or 128, tile_n 64, 128 or 256, k 64, stages "
                           "2 to the most that fit in shared memory, group_m 1..16, split_k 1, 2, 4 or 8; "
                           "docs/kernels-gemm.md)");
  return t;
}

bool GemmTacticControls::Blocks(const gemm::GemmTactic& t, std::string_view gpu_name,
                                const v1::TuningEnvironment* here) const {
  for (const BlockedGemmTactic& b : blocked) {
    if (!gemm::SameGemmTactic(b.tactic, t)) continue;
    if (here != nullptr) {
      if (proto::BlockedTacticApplies(b.entry, *here)) return true;
      continue;
    }
    // No environment (no daemon to ask for its NVRTC): entries that match a driver or an NVRTC
    // cannot be decided and do not apply; the GPU name is known.
    if (b.entry.driver_version() == 0 && b.entry.nvrtc_version().empty() &&
        (b.entry.gpu().empty() || gpu_name.find(b.entry.gpu()) != std::string_view::npos))
      return true;
  }
  return false;
}

StatusOr<GemmTacticControls> ParseGemmTacticControls(const char* force, const char* blocklist_path,
                                                     std::string_view blocklist_text) {
  GemmTacticControls controls;
  if (force != nullptr && *force != '\0') {
    const std::string_view value(force);
    if (value.substr(0, 5) != "gemm:")
      return InvalidArgument("KILN_FORCE_TACTIC='" + std::string(value) + "': expected gemm:<tactic> (" + kTacticForm +
                             "); gemm is the only op with tactics");
    auto tactic = ParseGemmTactic(value.substr(5));
    if (!tactic.ok()) return InvalidArgument("KILN_FORCE_TACTIC: " + tactic.status().message());
    controls.forced = *tactic;
  }
  if (blocklist_path != nullptr && *blocklist_path != '\0') {
    // The format kilnd --tactic-blocklist reads too (proto/tactic_blocklist.h); the tactics must
    // be gemm's and in this build's space.
    const proto::TacticCheck check = [](std::string_view op, std::string_view tactic) -> std::string {
      if (op != gemm::kGemmOp) return "gemm is the only op with tactics";
      auto parsed = ParseGemmTactic(tactic);
      return parsed.ok() ? "" : parsed.status().message();
    };
    proto::ParsedBlocklist parsed = proto::ParseTacticBlocklist(blocklist_text, "KILN_TACTIC_BLOCKLIST", blocklist_path,
                                                                check);
    if (!parsed.error.empty()) return InvalidArgument(parsed.error);
    for (v1::BlockedTactic& entry : parsed.entries) {
      auto tactic = ParseGemmTactic(entry.tactic());
      if (!tactic.ok()) return InvalidArgument(tactic.status().message());  // the check above said it is fine
      controls.blocked.push_back({*tactic, std::move(entry)});
    }
  }
  return controls;
}

const StatusOr<GemmTacticControls>& GemmTacticControlsFromEnvironment() {
  static const StatusOr<GemmTacticControls> controls = []() -> StatusOr<GemmTacticControls> {
    const char* force = std::getenv("KILN_FORCE_TACTIC");
    const char* path = std::getenv("KILN_TACTIC_BLOCKLIST");
    std::string text;
    if (path != nullptr && *path != '\0') {
      std::ifstream file(path);
      if (!file) return InvalidArgument("KILN_TACTIC_BLOCKLIST=" + std::string(path) + ": cannot read the file");
      std::ostringstream all;
      all << file.rdbuf();
      text = all.str();
    }
    auto parsed = ParseGemmTacticControls(force, path, text);
    if (parsed.ok() && parsed->forced)
      std::fprintf(stderr,
                   "kiln: KILN_FORCE_TACTIC: every gemm call of this process uses tactic %s instead of the "
                   "heuristic's choice per shape (a diagnostic control)\n",
                   GemmTacticText(*parsed->forced).c_str());
    return parsed;
  }();
  return controls;
}

}  // namespace kiln::client
