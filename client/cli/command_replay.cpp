// kiln replay DIR: a call dumped at KILN_LOGLEVEL=10 (docs/diagnostics.md), run again on this
// machine's GPU from its dumped inputs, compared with its dumped outputs, with everything
// needed to reproduce it printed: op, params, tensors, device and arch (recorded and here),
// kernels and backend, and the Kiln variables the process ran with.
#include <cmath>
#include <cstring>
#include <ostream>

#include <nlohmann/json.hpp>

#include "client/cli/call_replay.h"
#include "client/cli/command.h"
#include "client/core/api/float16.h"
#include "client/core/api/message_text.h"
#include "client/core/driver/cuda_driver.h"
#include "client/core/driver/current_context.h"
#include "client/core/driver/devices.h"
#include "client/diag/dumped_call.h"

namespace kiln::cli {
namespace {

using client::diag::DumpedCall;
using client::diag::KernelChoice;
using Json = nlohmann::ordered_json;

std::string OrDash(const std::string& s) { return s.empty() ? "-" : s; }

std::string KernelText(const KernelChoice& k) {
  std::string s = OrDash(k.uri) + " key " + OrDash(k.cache_key) + " arch " + OrDash(k.arch) + " entry " + k.entry +
                  " grid " + client::DimsText(k.config.grid) + " block " + client::DimsText(k.config.block) + " smem " +
                  std::to_string(k.config.dynamic_smem_bytes);
  if (!k.backend.empty()) s += " backend " + k.backend;
  return s;
}

Json KernelJson(const KernelChoice& k) {
  Json j = {{"uri", k.uri},
            {"cache_key", k.cache_key},
            {"arch", k.arch},
            {"entry", k.entry},
            {"grid", {k.config.grid.x, k.config.grid.y, k.config.grid.z}},
            {"block", {k.config.block.x, k.config.block.y, k.config.block.z}},
            {"dynamic_smem", k.config.dynamic_smem_bytes}};
  if (!k.backend.empty()) j["backend"] = k.backend;
  return j;
}

double ElementValue(DType dtype, const uint8_t* p) {
  switch (dtype) {
    case DType::kFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return client::HalfToFloat(h);
    }
    case DType::kBFloat16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      return client::BFloat16ToFloat(b);
    }
    case DType::kInt8: return static_cast<int8_t>(*p);
    case DType::kUInt8: return *p;
    case DType::kInt32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::kInt64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case DType::kFloat8E4M3: return client::Fp8E4M3ToFloat(*p);
  }
  return 0;
}

// The tolerance of one rounding to the dtype plus fp32 accumulation (what the op tests allow).
double ToleranceOf(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 1e-5;
    case DType::kFloat16: return 2e-3;
    case DType::kBFloat16: return 1.6e-2;
    default: return 0;  // integers: exact
  }
}

struct Comparison {
  std::string name;
  int64_t elements = 0;
  bool bit_exact = false;
  int64_t differing = 0;  // elements whose bytes differ
  int64_t outside = 0;    // elements outside the dtype's tolerance
  double max_abs = 0, max_rel = 0;
};

Comparison Compare(const std::string& name, DType dtype, const std::vector<uint8_t>& want,
                   const std::vector<uint8_t>& got) {
  Comparison c;
  c.name = name;
  const size_t es = DTypeSize(dtype);
  c.elements = static_cast<int64_t>(want.size() / es);
  c.bit_exact = want == got;
  if (c.bit_exact) return c;
  const double tol = ToleranceOf(dtype);
  for (size_t i = 0; i < want.size() / es; ++i) {
    if (std::memcmp(&want[i * es], &got[i * es], es) == 0) continue;
    ++c.differing;
    const double w = ElementValue(dtype, &want[i * es]), g = ElementValue(dtype, &got[i * es]);
    const double abs = std::fabs(g - w);
    const double rel = w != 0 ? abs / std::fabs(w) : abs;
    if (std::isnan(abs)) {  // NaN on one side only
      ++c.outside;
      c.max_abs = c.max_rel = INFINITY;
      continue;
    }
    c.max_abs = std::max(c.max_abs, abs);
    c.max_rel = std::max(c.max_rel, rel);
    if (abs > tol + tol * std::fabs(w)) ++c.outside;
  }
  return c;
}

void PrintRecorded(std::ostream& out, const DumpedCall& d) {
  out << "dump      " << d.folder << "\n";
  out << "status    " << d.status << " (call #" << d.call << " of pid " << d.pid << ", " << d.time << ", kiln "
      << d.kiln_version << ")\n";
  out << "op        " << d.op << " (called as " << d.api << ")\n";
  std::string params;
  for (const auto& [k, v] : d.params) params += (params.empty() ? "" : " ") + k + "=" + v;
  out << "params    " << (params.empty() ? "-" : params) << "\n";
  bool first = true;
  for (const auto& t : d.tensors) {
    out << (first ? "tensors   " : "          ") << t.name << ": " << RoleName(t.role) << " " << DTypeName(t.dtype)
        << client::ListText(t.shape) << " strides " << client::ListText(t.strides) << " " << t.device << " align "
        << client::diag::PointerAlignment(reinterpret_cast<const void*>(t.pointer)) << "\n";
    first = false;
  }
  out << "device    " << d.device.name;
  if (!d.device.model.empty())
    out << " (" << d.device.model << ", " << d.device.arch << ", " << d.device.multiprocessors << " SMs)";
  out << "\n";
  first = true;
  for (const auto& k : d.kernels) {
    out << (first ? "kernels   " : "          ") << KernelText(k) << "\n";
    first = false;
  }
  if (d.kernels.empty()) out << "kernels   - (the call launched nothing before the dump)\n";
  std::string env;
  for (const auto& [k, v] : d.environment) env += (env.empty() ? "" : " ") + k + "=" + v;
  out << "env       " << (env.empty() ? "-" : env) << "\n";
  if (d.result)
    out << "result    " << d.result->first << (d.result->second.empty() ? "" : ": " + d.result->second) << "\n";
  if (!d.inputs) out << "inputs    " << d.inputs_missing << "\n";
  if (!d.outputs) out << "outputs   " << d.outputs_missing << "\n";
}

Json RecordedJson(const DumpedCall& d) {
  Json params = Json::object();
  for (const auto& [k, v] : d.params) params[k] = v;
  Json tensors = Json::array();
  for (const auto& t : d.tensors)
    tensors.push_back({{"name", t.name},
                       {"role", RoleName(t.role)},
                       {"dtype", DTypeName(t.dtype)},
                       {"shape", t.shape},
                       {"strides", t.strides},
                       {"device", t.device},
                       {"align", client::diag::PointerAlignment(reinterpret_cast<const void*>(t.pointer))}});
  Json kernels = Json::array();
  for (const auto& k : d.kernels) kernels.push_back(KernelJson(k));
  Json j = {{"dump", d.folder},
            {"status", d.status},
            {"call", d.call},
            {"pid", d.pid},
            {"time", d.time},
            {"op", d.op},
            {"api", d.api},
            {"params", params},
            {"tensors", tensors},
            {"device",
             {{"name", d.device.name},
              {"model", d.device.model},
              {"arch", d.device.arch},
              {"multiprocessors", d.device.multiprocessors}}},
            {"kernels", kernels},
            {"environment", d.environment}};
  if (d.result) j["result"] = {{"code", d.result->first}, {"message", d.result->second}};
  j["inputs"] = d.inputs.has_value();
  j["outputs"] = d.outputs.has_value();
  return j;
}

int RunReplay(Invocation& inv) {
  const bool json = inv.Has("--json");
  auto dump = client::diag::ReadDumpedCall(inv.positionals()[0]);
  if (!dump.ok()) {
    inv.err << "kiln replay: " << dump.status().message() << std::endl;
    return kExitUsage;  // not a readable dump folder
  }
  Json report = {{"recorded", RecordedJson(*dump)}};
  auto finish = [&](int code, const std::string& verdict) {
    if (json) {
      report["verdict"] = verdict;
      inv.out << report.dump(2) << std::endl;
    } else {
      inv.out << verdict << std::endl;
    }
    return code;
  };
  if (!json) PrintRecorded(inv.out, *dump);
  if (inv.Has("--no-run")) return finish(kExitOk, "not run (--no-run)");

  if (std::string why = NotReplayableReason(dump->op); !why.empty()) {
    inv.err << "kiln replay: " << why << std::endl;
    return kExitDaemonError;
  }
  if (!dump->inputs) {
    inv.err << "kiln replay: " << dump->folder << ": " << dump->inputs_missing << std::endl;
    return kExitUsage;
  }
  auto driver = client::CudaDriver::Get();
  if (!driver.ok()) {
    inv.err << "kiln replay: needs a GPU to run the call: " << driver.status().message()
            << " (--no-run prints the reproduction without one)" << std::endl;
    return kExitUsage;
  }
  int device = 0;
  if (inv.Has("--device")) {
    try {
      device = std::stoi(inv.Get("--device"));
    } catch (const std::exception&) {
      throw UsageError("--device wants a CUDA ordinal, got '" + inv.Get("--device") + "'");
    }
  }
  auto info = client::DescribeDevice(**driver, device);
  if (!info.ok()) {
    inv.err << "kiln replay: " << info.status().message() << std::endl;
    return kExitUsage;
  }
  auto ctx = client::CurrentContext(**driver, device);
  if (!ctx.ok()) return inv.Fail(ctx.status());
  if (Status s = inv.ConfigureLibraryClient(); !s.ok()) return inv.Fail(s);

  auto replay = CallReplay::Prepare(*dump, device);
  if (!replay.ok()) return inv.Fail(replay.status().WithContext("preparing the tensors"));
  const Status status = (*replay)->Run();
  const std::string here = "cuda:" + std::to_string(device) + " (" + info->name + ", " + info->arch() + ", " +
                           std::to_string(info->multiprocessors) + " SMs)";
  const bool same_arch = info->arch() == dump->device.arch;
  std::vector<KernelChoice> kernels;
  if ((*replay)->observed() != nullptr) kernels = (*replay)->observed()->kernels;
  bool same_kernels = kernels.size() == dump->kernels.size();
  for (size_t i = 0; same_kernels && i < kernels.size(); ++i)
    same_kernels = kernels[i].cache_key == dump->kernels[i].cache_key;

  Json replayed = {{"device", here},
                   {"arch", info->arch()},
                   {"same_arch", same_arch},
                   {"same_kernels", same_kernels},
                   {"result", status.ToString()}};
  Json kernels_json = Json::array();
  for (const auto& k : kernels) kernels_json.push_back(KernelJson(k));
  replayed["kernels"] = kernels_json;
  replayed["notes"] = (*replay)->notes();
  if (!json) {
    inv.out << "replay    " << here << (same_arch ? "" : " -- another arch than recorded (" + dump->device.arch + ")")
            << "\n";
    bool first = true;
    for (const auto& k : kernels) {
      inv.out << (first ? "ran       " : "          ") << KernelText(k) << "\n";
      first = false;
    }
    inv.out << "          " << (same_kernels ? "(the recorded kernels)" : "(NOT the recorded kernels)") << "\n";
    for (const auto& n : (*replay)->notes()) inv.out << "note      " << n << "\n";
    inv.out << "result    " << status.ToString() << "\n";
  }
  report["replay"] = replayed;
  if (!status.ok()) {
    if (json) inv.out << report.dump(2) << std::endl;
    return inv.Fail(status.WithContext("the replayed call"));
  }
  if (!dump->outputs) return finish(kExitOk, "no recorded outputs to compare: " + dump->outputs_missing);

  // Bit-exact is expected where the same kernels ran on the same arch (every Kiln op is
  // deterministic); elsewhere the dtype's tolerance applies.
  const bool exact_expected = same_arch && same_kernels;
  Json compared = Json::array();
  bool all_exact = true, all_within = true;
  for (const auto& want : dump->outputs->tensors) {
    auto got = (*replay)->Read(want.name);
    if (!got.ok()) return inv.Fail(got.status());
    const Comparison c = Compare(want.name, want.dtype, want.bytes, *got);
    all_exact &= c.bit_exact;
    all_within &= c.outside == 0;
    compared.push_back({{"name", c.name},
                        {"elements", c.elements},
                        {"bit_exact", c.bit_exact},
                        {"differing", c.differing},
                        {"outside_tolerance", c.outside},
                        {"max_abs_error", c.max_abs},
                        {"max_rel_error", c.max_rel}});
    if (!json) {
      inv.out << "compare   " << c.name << ": ";
      if (c.bit_exact) {
        inv.out << "bit-exact (" << c.elements << " elements)\n";
      } else {
        char line[200];
        std::snprintf(line, sizeof(line),
                      "%lld of %lld elements differ, max abs error %.3g, max rel error %.3g, %lld outside %s tolerance",
                      static_cast<long long>(c.differing), static_cast<long long>(c.elements), c.max_abs, c.max_rel,
                      static_cast<long long>(c.outside), DTypeName(want.dtype));
        inv.out << line << "\n";
      }
    }
  }
  report["comparison"] = compared;
  if (all_exact) return finish(kExitOk, "outputs match (bit-exact)");
  if (!exact_expected && all_within)
    return finish(kExitOk, std::string("outputs match within tolerance (not bit-exact: ") +
                               (same_arch ? "other kernels ran" : "another arch") + ", so not expected to be)");
  return finish(kExitProblem, exact_expected ? "outputs differ (bit-exact expected: same arch, same kernels)"
                                             : "outputs differ beyond the dtype's tolerance");
}

}  // namespace

void AddReplayCommand(std::vector<CommandSpec>& commands) {
  CommandSpec c;
  c.path = "replay";
  c.arguments = "DIR";
  c.summary = "run a dumped op call again (KILN_LOGLEVEL=10) and compare it with its dump";
  c.details = "DIR is one call's folder under KILN_DUMP_DIR. Prints what reproduces the call (op, params,\n"
              "tensors with shapes, dtypes and strides, device and arch, kernels and backend, the KILN_*\n"
              "variables), re-creates the tensors on the GPU from inputs.safetensors (same strides and\n"
              "alignment), calls the op through kiln::ops, and compares with outputs.safetensors:\n"
              "bit-exact where the same kernels ran on the same arch, else within the dtype's tolerance.\n"
              "Needs a GPU and kilnd (the kernels come from the daemon like any op's).\n\n"
              "Exit: 0 outputs match (or none were recorded); 1 the replayed call failed or the op cannot\n"
              "be replayed (collectives); 2 DIR is not a readable dump, or no GPU; 3 kilnd unreachable;\n"
              "4 outputs differ.\n\n"
              "Example:\n"
              "  KILN_LOGLEVEL=10 KILN_DUMP_DIR=/tmp/dumps ./my_app\n"
              "  kiln replay /tmp/dumps/000042_31337_rms_norm";
  c.options = {{"--json", "", "print the report as one JSON object"},
               {"--no-run", "", "only print the reproduction (no GPU needed)"},
               {"--device", "N", "the CUDA device to replay on (default 0)"}};
  c.min_positionals = 1;
  c.max_positionals = 1;
  c.run = RunReplay;
  commands.push_back(std::move(c));
}

}  // namespace kiln::cli
