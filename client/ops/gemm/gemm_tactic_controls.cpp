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
    "t<tile_m>x<tile_n>x<64, or 128 for fp8 ops>s<stages>g<group_m>[k<split_k>][m<multicast>], e.g. "
    "t128x256x64s4g8, t64x256x64s4g8k8, t128x256x64s4g8m2 (gemm only) or t128x256x128s4g8 (fp8)";

bool IsFp8Op(std::string_view op) {
  return op == gemm::kFp8GemmOp || op == gemm::kGroupedFp8GemmOp || op == gemm::kGroupedFp8GemmMaskedOp;
}
bool IsTacticOp(std::string_view op) {
  for (const char* o : kTacticOps)
    if (op == o) return true;
  return false;
}
std::string TacticOpsText() {
  std::string out;
  for (const char* o : kTacticOps) out += (out.empty() ? "" : ", ") + std::string(o);
  return out;
}

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

bool TacticInSpace(std::string_view op, const gemm::GemmTactic& t) {
  if (op == gemm::kGemmOp) return gemm::GemmTacticFits(t);
  if (op == gemm::kFp8GemmOp) return gemm::Fp8GemmTacticFits(t);
  return IsTacticOp(op) && gemm::GemmTacticFits(t, /*grouped=*/true);
}

std::string GemmTacticText(const gemm::GemmTactic& t, std::string_view op) {
  const int stage_k = IsFp8Op(op) ? gemm::kFp8ScaleBlock : gemm::kTileK;
  return "t" + std::to_string(t.tile_m) + "x" + std::to_string(t.tile_n) + "x" + std::to_string(stage_k) + "s" +
         std::to_string(t.stages) + "g" + std::to_string(t.group_m) +
         (t.split_k > 1 ? "k" + std::to_string(t.split_k) : "") +
         (t.multicast > 1 ? "m" + std::to_string(t.multicast) : "");
}

StatusOr<gemm::GemmTactic> ParseGemmTactic(std::string_view text, std::string_view op) {
  if (!IsTacticOp(op))
    return InvalidArgument("'" + std::string(op) + "' has no tactics; the ops with tactics: " + TacticOpsText());
  gemm::GemmTactic t{};
  int tile_k = 0;
  size_t pos = 0;
  const bool parsed = Expect(text, &pos, 't') && Number(text, &pos, &t.tile_m) && Expect(text, &pos, 'x') &&
                      Number(text, &pos, &t.tile_n) && Expect(text, &pos, 'x') && Number(text, &pos, &tile_k) &&
                      Expect(text, &pos, 's') && Number(text, &pos, &t.stages) && Expect(text, &pos, 'g') &&
                      Number(text, &pos, &t.group_m) &&
                      (pos == text.size() || text[pos] != 'k' ||
                       (Expect(text, &pos, 'k') && Number(text, &pos, &t.split_k))) &&
                      (pos == text.size() || (Expect(text, &pos, 'm') && Number(text, &pos, &t.multicast))) &&
                      pos == text.size();
  if (!parsed) return InvalidArgument("'" + std::string(text) + "' is not a gemm tactic; expected " + kTacticForm);
  const int stage_k = IsFp8Op(op) ? gemm::kFp8ScaleBlock : gemm::kTileK;
  if (tile_k != stage_k || !TacticInSpace(op, t))
    return InvalidArgument("'" + std::string(text) + "' is not in the " + std::string(op) +
                           " tactic space (tile_m 64 or 128, tile_n 64, 128, 192 or 256, k " + std::to_string(stage_k) +
                           ", stages 2 to the most that fit in shared memory, group_m 1..16, split_k " +
                           (op == gemm::kGemmOp || op == gemm::kFp8GemmOp ? "1, 2, 4 or 8" : "1") + ", multicast " +
                           (op == gemm::kGemmOp || op == gemm::kFp8GemmOp ? "1 or 2, not with a split" : "1") +
                           "; docs/kernels-gemm.md)");
  return t;
}

const gemm::GemmTactic* GemmTacticControls::Forced(std::string_view op) const {
  for (const auto& [forced_op, tactic] : forced)
    if (forced_op == op) return &tactic;
  return nullptr;
}

bool GemmTacticControls::Blocks(std::string_view op, const gemm::GemmTactic& t, std::string_view gpu_name,
                                const v1::TuningEnvironment* here) const {
  for (const BlockedGemmTactic& b : blocked) {
    if (b.entry.op() != op || !gemm::SameGemmTactic(b.tactic, t)) continue;
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
    // <op>:<tactic>[,<op>:<tactic>...]
    std::string_view rest(force);
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      const std::string_view item = rest.substr(0, comma);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      const size_t colon = item.find(':');
      if (colon == std::string_view::npos)
        return InvalidArgument("KILN_FORCE_TACTIC='" + std::string(force) + "': '" + std::string(item) +
                               "': expected <op>:<tactic> (" + kTacticForm +
                               "), comma-separated; the ops with "
                               "tactics: " +
                               TacticOpsText());
      const std::string op(item.substr(0, colon));
      auto tactic = ParseGemmTactic(item.substr(colon + 1), op);
      if (!tactic.ok()) return InvalidArgument("KILN_FORCE_TACTIC: " + tactic.status().message());
      if (controls.Forced(op) != nullptr)
        return InvalidArgument("KILN_FORCE_TACTIC='" + std::string(force) + "': " + op + " is named twice");
      controls.forced.emplace_back(op, *tactic);
    }
  }
  if (blocklist_path != nullptr && *blocklist_path != '\0') {
    // The format kilnd --tactic-blocklist reads too (proto/tactic_blocklist.h); the tactics must
    // be in their op's space in this build.
    const proto::TacticCheck check = [](std::string_view op, std::string_view tactic) -> std::string {
      auto parsed = ParseGemmTactic(tactic, op);
      return parsed.ok() ? "" : parsed.status().message();
    };
    proto::ParsedBlocklist parsed = proto::ParseTacticBlocklist(blocklist_text, "KILN_TACTIC_BLOCKLIST", blocklist_path,
                                                                check);
    if (!parsed.error.empty()) return InvalidArgument(parsed.error);
    for (v1::BlockedTactic& entry : parsed.entries) {
      auto tactic = ParseGemmTactic(entry.tactic(), entry.op());
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
    if (parsed.ok())
      for (const auto& [op, tactic] : parsed->forced)
        std::fprintf(stderr,
                     "kiln: KILN_FORCE_TACTIC: every %s call of this process uses tactic %s instead of the "
                     "heuristic's choice per shape (a diagnostic control)\n",
                     op.c_str(), GemmTacticText(tactic, op).c_str());
    return parsed;
  }();
  return controls;
}

}  // namespace kiln::client
