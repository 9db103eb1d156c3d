// kiln tune run OP --m M --n N --k K: the autotuner (kiln::tune, kiln/tune.h) on this machine's
// GPU for one shape of an op with tactics, on random inputs made here (a fixed seed), with the
// report printed and the result stored where the library stores it (KILN_TUNING_FILE, else the
// daemon's tuning store). An operator tunes a node's shapes this way without writing code.
#include <cmath>
#include <cstring>
#include <ostream>
#include <random>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "client/cli/command.h"
#include "client/cli/output.h"
#include "client/core/api/float16.h"
#include "client/core/driver/cuda_driver.h"
#include "client/core/driver/current_context.h"
#include "client/core/driver/devices.h"
#include "client/ops/gemm/gemm_tactic_controls.h"
#include "kiln/tune.h"

namespace kiln::cli {
namespace {

using Json = nlohmann::ordered_json;

bool HasTactics(const std::string& op) {
  for (const char* known : client::kTacticOps)
    if (op == known) return true;
  return false;
}

std::string TacticOpsText() {
  std::string text;
  for (const char* known : client::kTacticOps) text += (text.empty() ? "" : ", ") + std::string(known);
  return text;
}

bool IsFp8(const std::string& op) { return op.find("fp8") != std::string::npos; }
bool IsGrouped(const std::string& op) { return op.rfind("grouped", 0) == 0; }
bool IsMasked(const std::string& op) { return op.find("masked") != std::string::npos; }

// --name's whole number in least..most; `fallback` when not given (required when fallback < 0).
int64_t NumberOption(const Invocation& inv, const std::string& name, int64_t fallback, int64_t least, int64_t most) {
  if (!inv.Has(name)) {
    if (fallback >= 0) return fallback;
    throw UsageError(name + " is required");
  }
  const std::string text = inv.Get(name);
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || v < least || v > most)
    throw UsageError(name + " wants a whole number from " + std::to_string(least) + " to " + std::to_string(most) +
                     ", got '" + text + "'");
  return v;
}

// A device buffer of random contents, freed with the command.
class DeviceTensor {
 public:
  DeviceTensor(const client::CudaDriver& driver) : driver_(driver) {}
  ~DeviceTensor() {
    if (ptr_ != 0) driver_.cuMemFree(ptr_);
  }
  Status Upload(const std::vector<uint8_t>& bytes, const char* name) {
    KILN_RETURN_IF_ERROR(
        driver_.Check(driver_.cuMemAlloc(&ptr_, std::max<size_t>(bytes.size(), 1)), std::string("cuMemAlloc ") + name));
    return driver_.Check(driver_.cuMemcpyHtoD(ptr_, bytes.data(), bytes.size()), std::string("cuMemcpyHtoD ") + name);
  }
  TensorView View(DType dtype, std::initializer_list<int64_t> shape, int device) const {
    TensorView v = TensorView::Contiguous(reinterpret_cast<void*>(ptr_), dtype, shape);
    v.device = Device::CUDA(device);
    return v;
  }

 private:
  const client::CudaDriver& driver_;
  CUdeviceptr ptr_ = 0;
};

std::vector<uint8_t> Random(DType dtype, int64_t count, float lo, float hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(lo, hi);
  const size_t es = DTypeSize(dtype);
  std::vector<uint8_t> out(static_cast<size_t>(count) * es);
  for (int64_t i = 0; i < count; ++i) {
    const float x = dist(rng);
    uint8_t* at = out.data() + static_cast<size_t>(i) * es;
    if (dtype == DType::kFloat32) {
      std::memcpy(at, &x, 4);
    } else if (dtype == DType::kFloat8E4M3) {
      *at = client::FloatToFp8E4M3(x);
    } else {
      const uint16_t h = dtype == DType::kBFloat16 ? client::FloatToBFloat16(x) : client::FloatToHalf(x);
      std::memcpy(at, &h, 2);
    }
  }
  return out;
}

std::vector<uint8_t> Int32Bytes(const std::vector<int32_t>& values) {
  std::vector<uint8_t> out(values.size() * 4);
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

DType DTypeOption(const Invocation& inv, const std::string& name, DType fallback, const std::set<DType>& allowed) {
  if (!inv.Has(name)) return fallback;
  auto dtype = DTypeFromName(inv.Get(name));
  if (!dtype || allowed.count(*dtype) == 0) {
    std::string names;
    for (DType d : allowed) names += (names.empty() ? "" : ", ") + std::string(DTypeName(d));
    throw UsageError(name + " wants one of " + names + ", got '" + inv.Get(name) + "'");
  }
  return *dtype;
}

Json ReportJson(const tune::Report& r) {
  Json candidates = Json::array();
  for (const tune::Candidate& c : r.candidates) {
    Json j = {{"tactic", c.tactic}, {"ok", c.ok}};
    if (c.ok) j["median_us"] = c.median_us;
    else j["failure"] = c.failure;
    candidates.push_back(j);
  }
  return {{"op", r.op},
          {"bucket", r.bucket},
          {"chosen", r.chosen},
          {"chosen_us", r.chosen_us},
          {"heuristic", r.heuristic},
          {"heuristic_us", r.heuristic_us},
          {"timing", r.timing},
          {"seconds", r.seconds},
          {"stored_to", r.stored_to},
          {"candidates", candidates}};
}

void PrintReport(std::ostream& out, const tune::Report& r) {
  std::vector<std::vector<std::string>> rows = {{"TACTIC", "MEDIAN", "RESULT"}};
  for (const tune::Candidate& c : r.candidates)
    rows.push_back({c.tactic, c.ok ? HumanMs(c.median_us / 1000) : "-",
                    c.tactic == r.chosen ? "chosen"
                    : c.ok               ? "ok"
                                         : c.failure.substr(0, 120)});
  PrintTable(out, rows);
  out << r.op << " " << r.bucket << ": " << r.chosen << " " << HumanMs(r.chosen_us / 1000) << ", heuristic "
      << r.heuristic << " " << (r.heuristic_us > 0 ? HumanMs(r.heuristic_us / 1000) : std::string("(failed)"));
  if (r.heuristic_us > 0 && r.chosen_us > 0) {
    char gain[32];
    std::snprintf(gain, sizeof gain, " (%.2fx)", r.heuristic_us / r.chosen_us);
    out << gain;
  }
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.1f s", r.seconds);
  out << "; tuned in " << seconds << " (" << r.timing << ")\nstored to " << r.stored_to << std::endl;
}

int RunTuneRun(Invocation& inv) {
  const std::string op = inv.positionals()[0];
  if (!HasTactics(op))
    throw UsageError("'" + op + "' has no tactics to tune; the ops with tactics: " + TacticOpsText());
  const bool fp8 = IsFp8(op), grouped = IsGrouped(op), masked = IsMasked(op);
  constexpr int64_t kMostDim = (int64_t{1} << 31) - 1;
  const int64_t m = NumberOption(inv, "--m", -1, 1, kMostDim);
  const int64_t n = NumberOption(inv, "--n", -1, 1, kMostDim);
  const int64_t k = NumberOption(inv, "--k", -1, 1, kMostDim);
  if (grouped && !inv.Has("--groups")) throw UsageError(op + " needs --groups E (the experts)");
  if (!grouped && inv.Has("--groups")) throw UsageError("--groups is for the grouped ops, not " + op);
  const int64_t groups = grouped ? NumberOption(inv, "--groups", -1, 1, gemm::kMaxGroups) : 1;
  const DType in = fp8 ? DType::kFloat8E4M3
                       : DTypeOption(inv, "--dtype", DType::kBFloat16, {DType::kBFloat16, DType::kFloat16});
  if (fp8 && inv.Has("--dtype")) throw UsageError("--dtype: the fp8 ops' inputs are fp8_e4m3");
  const DType out = fp8 ? DTypeOption(inv, "--out-dtype", DType::kBFloat16, {DType::kBFloat16, DType::kFloat32})
                        : DTypeOption(inv, "--out-dtype", DType::kBFloat16,
                                      {DType::kBFloat16, DType::kFloat16, DType::kFloat32});
  tune::Options options;
  options.warmup = static_cast<int>(NumberOption(inv, "--warmup", options.warmup, 1, 1000));
  options.iterations = static_cast<int>(NumberOption(inv, "--iterations", options.iterations, 1, 10000));
  options.max_call_ms = static_cast<double>(NumberOption(inv, "--max-call-ms", 200, 1, 600000));
  options.store = !inv.Has("--no-store");
  const int device = static_cast<int>(NumberOption(inv, "--device", 0, 0, 1023));
  const uint32_t seed = static_cast<uint32_t>(NumberOption(inv, "--seed", 1, 0, 4294967295LL));

  auto driver = client::CudaDriver::Get();
  if (!driver.ok()) {
    inv.err << "kiln tune run: needs a GPU: " << driver.status().message() << std::endl;
    return kExitUsage;
  }
  auto info = client::DescribeDevice(**driver, device);
  if (!info.ok()) {
    inv.err << "kiln tune run: " << info.status().message() << std::endl;
    return kExitUsage;
  }
  auto ctx = client::CurrentContext(**driver, device);
  if (!ctx.ok()) return inv.Fail(ctx.status());
  if (Status s = inv.ConfigureLibraryClient(); !s.ok()) return inv.Fail(s);

  // Inputs: a [rows, K] (masked: [E, M_max, K]), b [E?, N, K], d like a with N; rows = M for
  // gemm, fp8_gemm and the contiguous layout (T tokens, spread evenly over the groups), E x M
  // for the masked one (every group full: the largest work its bucket serves).
  const int64_t rows = masked ? groups * m : m;
  const int64_t kb = (k + gemm::kFp8ScaleBlock - 1) / gemm::kFp8ScaleBlock;
  const int64_t nb = (n + gemm::kFp8ScaleBlock - 1) / gemm::kFp8ScaleBlock;
  std::mt19937 rng(seed);
  const client::CudaDriver& d = **driver;
  DeviceTensor a(d), b(d), c(d), a_scales(d), b_scales(d), table(d);
  const float range = fp8 ? 4.f : 1.f;
  Status s = a.Upload(Random(in, rows * k, -range, range, rng), "a");
  if (s.ok()) s = b.Upload(Random(in, groups * n * k, -range, range, rng), "b");
  if (s.ok()) s = c.Upload(std::vector<uint8_t>(static_cast<size_t>(rows * n) * DTypeSize(out), 0xFF), "d");
  if (s.ok() && fp8) s = a_scales.Upload(Random(DType::kFloat32, rows * kb, 0.5f, 2.f, rng), "a_scales");
  if (s.ok() && fp8) s = b_scales.Upload(Random(DType::kFloat32, groups * nb * kb, 0.5f, 2.f, rng), "b_scales");
  if (s.ok() && grouped) {
    std::vector<int32_t> values;
    if (masked) {
      values.assign(static_cast<size_t>(groups), static_cast<int32_t>(m));
    } else {
      values.push_back(0);
      for (int64_t e = 0; e < groups; ++e) values.push_back(static_cast<int32_t>(m * (e + 1) / groups));
    }
    s = table.Upload(Int32Bytes(values), masked ? "masked_m" : "m_indptr");
  }
  if (!s.ok()) return inv.Fail(s);

  const TensorView ta = masked ? a.View(in, {groups, m, k}, device) : a.View(in, {rows, k}, device);
  const TensorView tb = grouped ? b.View(in, {groups, n, k}, device) : b.View(in, {n, k}, device);
  const TensorView td = masked ? c.View(out, {groups, m, n}, device) : c.View(out, {rows, n}, device);
  const TensorView tas = masked ? a_scales.View(DType::kFloat32, {groups, m, kb}, device)
                                : a_scales.View(DType::kFloat32, {rows, kb}, device);
  const TensorView tbs = grouped ? b_scales.View(DType::kFloat32, {groups, nb, kb}, device)
                                 : b_scales.View(DType::kFloat32, {nb, kb}, device);
  const TensorView tt = table.View(DType::kInt32, {masked ? groups : groups + 1}, device);

  StatusOr<tune::Report> report = Status(StatusCode::kInternal, "no tuner ran");
  if (op == "gemm") report = tune::gemm(td, ta, tb, options);
  else if (op == "fp8_gemm") report = tune::fp8_gemm(td, ta, tb, tas, tbs, options);
  else if (op == "grouped_gemm") report = tune::grouped_gemm(td, ta, tb, tt, options);
  else if (op == "grouped_gemm_masked") report = tune::grouped_gemm_masked(td, ta, tb, tt, options);
  else if (op == "grouped_fp8_gemm") report = tune::grouped_fp8_gemm(td, ta, tb, tas, tbs, tt, options);
  else report = tune::grouped_fp8_gemm_masked(td, ta, tb, tas, tbs, tt, options);
  if (!report.ok()) return inv.Fail(report.status());
  if (inv.Has("--json")) {
    Json j = ReportJson(*report);
    j["device"] = info->name + " (" + std::to_string(info->multiprocessors) + " SMs)";
    inv.out << j.dump(2) << std::endl;
  } else {
    inv.out << "tuning " << op << " on cuda:" << device << " (" << info->name << ", " << info->multiprocessors
            << " SMs)\n";
    PrintReport(inv.out, *report);
  }
  return kExitOk;
}

}  // namespace

void AddTuneRunCommand(std::vector<CommandSpec>& commands) {
  commands.push_back({"tune run",
                      "OP",
                      "tune an op's tactics for one shape on this machine's GPU and store the result",
                      "OP is gemm, fp8_gemm, grouped_gemm, grouped_gemm_masked, grouped_fp8_gemm or\n"
                      "grouped_fp8_gemm_masked. The inputs are random (--seed); every candidate tactic is timed\n"
                      "(CUDA events, L2 flushed between calls) and checked against the heuristic's result, and the\n"
                      "fastest correct one serves the shape's bucket: M rounded up to a power of two (grouped: the\n"
                      "rows a group has, --m / --groups for the contiguous layout, --m itself for the masked one).\n"
                      "The result goes to KILN_TUNING_FILE when set, else to the daemon's tuning store (kilnd\n"
                      "--tuning-store); later calls of the op in any process of the node use it. Needs a GPU.",
                      {{"--m", "M", "rows of a (grouped_gemm: all the groups' rows, T; masked: M_max a group)"},
                       {"--n", "N", "columns of d (rows of b, per group)"},
                       {"--k", "K", "the reduction length"},
                       {"--groups", "E", "the groups (experts) of a grouped op, 1..256"},
                       {"--dtype", "DTYPE", "a and b: bf16 (default) or fp16; the fp8 ops' are fp8_e4m3"},
                       {"--out-dtype", "DTYPE", "d: bf16 (default), fp16 or fp32 (the fp8 ops: bf16 or fp32)"},
                       {"--device", "N", "the CUDA ordinal (default 0)"},
                       {"--warmup", "N", "untimed calls of each candidate (default 3)"},
                       {"--iterations", "N", "timed calls of each candidate (default 20)"},
                       {"--max-call-ms", "MS", "a candidate slower than this fails (default 200)"},
                       {"--seed", "S", "the random inputs' seed (default 1)"},
                       {"--no-store", "", "report only; store nothing"},
                       {"--json", "", "print the report as JSON"}},
                      1,
                      1,
                      RunTuneRun});
}

}  // namespace kiln::cli
