// Every generator of the registry, through what it declares (ParamInfo, arch families), so a
// new op is checked without a test of its own: its declaration is well formed; a request that
// misses a required param, names an unknown one, or gives a value outside a param's choices or
// range is refused naming the op, the param and what is allowed; the smallest params the
// declaration allows generate a deterministic spec with canonical params, an entry and its
// launch hint for each kernel; and that spec compiles with NVRTC for every arch family the
// generator declares. The family tests (rmsnorm_generator_test.cpp, ...) keep what only an
// op has: its URIs, its relations between params, its launch shapes.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "kernels/jit/op_generator.h"
#include "server/jit/nvrtc_compiler.h"
#include "tests/kernels/compile_fixture.h"
#include "tests/kernels/generator_fixture.h"

namespace kiln::kernels {
namespace {

using generator_test::Contains;

bool IsInteger(const std::string& text) {
  if (text.empty()) return false;
  for (char c : text)
    if (c < '0' || c > '9') return false;
  return true;
}

// The smallest value a param allows: its first choice, or the least integer in its range that
// is even or a power of two when it must be. A param with a default keeps it (absent).
std::string SmallestValue(const ParamInfo& p) {
  if (p.kind == ParamInfo::Kind::kChoice) return p.choices.front();
  for (int v = p.min; v <= p.max; ++v) {
    if (p.even && v % 2 != 0) continue;
    if (p.power_of_two && (v <= 0 || (v & (v - 1)) != 0)) continue;
    return std::to_string(v);
  }
  return "";
}

// Only the required params, each at its smallest value. Where two params relate (vec must
// divide hidden), the smallest values still fit: each generator derives what it can.
Params SmallestParams(const OpGenerator& op) {
  Params params;
  for (const ParamInfo& p : op.params())
    if (p.required()) params[p.name] = SmallestValue(p);
  return params;
}

TEST_CASE("every generator declares itself and its params well", "[kernels][registry]") {
  const auto& all = OpRegistry::Builtin().all();
  REQUIRE(all.size() >= 16);
  std::set<std::string> names;
  for (const auto& op : all) {
    INFO(op->name());
    CHECK(names.insert(std::string(op->name())).second);
    CHECK_FALSE(op->family().empty());
    CHECK_FALSE(op->description().empty());
    CHECK_FALSE(op->arch_families().empty());
    std::set<std::string> params;
    for (const ParamInfo& p : op->params()) {
      INFO(p.name);
      CHECK(params.insert(p.name).second);
      CHECK_FALSE(p.help.empty());
      if (p.kind == ParamInfo::Kind::kChoice) {
        REQUIRE_FALSE(p.choices.empty());
        CHECK(std::set<std::string>(p.choices.begin(), p.choices.end()).size() == p.choices.size());
        if (!p.required() && p.default_value != kAuto)
          CHECK(std::find(p.choices.begin(), p.choices.end(), p.default_value) != p.choices.end());
      } else {
        CHECK(p.min <= p.max);
        CHECK_FALSE(SmallestValue(p).empty());
        if (!p.required() && p.default_value != kAuto) {
          REQUIRE(IsInteger(p.default_value));
          CHECK(std::stoi(p.default_value) >= p.min);
          CHECK(std::stoi(p.default_value) <= p.max);
        }
      }
    }
  }
}

TEST_CASE("every generator names a missing, an unknown and a disallowed param", "[kernels][registry]") {
  for (const auto& op : OpRegistry::Builtin().all()) {
    const std::string name(op->name());
    INFO(name);
    const Params smallest = SmallestParams(*op);
    for (const ParamInfo& p : op->params()) {
      INFO(p.name);
      if (p.required()) {
        Params missing = smallest;
        missing.erase(p.name);
        auto spec = generator_test::Generate(name, missing);
        REQUIRE_FALSE(spec.ok());
        CHECK(spec.status().code() == absl::StatusCode::kInvalidArgument);
        CHECK(Contains(spec.status().message(), name + ": param '" + p.name + "' is required"));
        CHECK(Contains(spec.status().message(), AllowedText(p)));
      }
      std::vector<std::string> bad = {"x!", ""};
      if (p.kind == ParamInfo::Kind::kInt) bad.push_back(std::to_string(p.max + 1));
      for (const std::string& value : bad) {
        Params given = smallest;
        given[p.name] = value;
        auto spec = generator_test::Generate(name, given);
        INFO("value '" << value << "'");
        REQUIRE_FALSE(spec.ok());
        CHECK(spec.status().code() == absl::StatusCode::kInvalidArgument);
        CHECK(Contains(spec.status().message(), name + ": param '" + p.name + "' = '" + value + "' is not allowed"));
      }
    }
    Params unknown = smallest;
    unknown["no_such_param"] = "1";
    auto spec = generator_test::Generate(name, unknown);
    REQUIRE_FALSE(spec.ok());
    CHECK(spec.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(Contains(spec.status().message(), name + ": unknown param 'no_such_param'"));
  }
}

TEST_CASE("every generator makes a deterministic, canonical spec of its smallest params", "[kernels][registry]") {
  for (const auto& op : OpRegistry::Builtin().all()) {
    const std::string name(op->name());
    const Params smallest = SmallestParams(*op);
    INFO(name);
    const JitSpec spec = generator_test::MustGenerate(name, smallest);
    CHECK(spec.op == name);
    CHECK(spec.uri.rfind(name, 0) == 0);
    // Canonical params: every declared one, none left "auto"; generating from them again is
    // the same specialization.
    for (const ParamInfo& p : op->params()) {
      INFO(p.name);
      REQUIRE(spec.params.count(p.name) == 1);
      CHECK(spec.params.at(p.name) != kAuto);
    }
    CHECK(spec.params.size() == op->params().size());
    const JitSpec again = generator_test::MustGenerate(name, spec.params);
    CHECK(again.uri == spec.uri);
    CHECK(again.params == spec.params);
    CHECK(again.launch == spec.launch);
    REQUIRE(again.headers.size() == spec.headers.size());
    for (size_t i = 0; i < spec.headers.size(); ++i) CHECK(again.headers[i].content == spec.headers[i].content);
    // An entry per kernel, each with its launch hint.
    REQUIRE_FALSE(spec.entries.empty());
    CHECK(spec.launch.size() == spec.entries.size());
    for (const EntryLaunch& launch : spec.launch) {
      INFO(launch.entry);
      CHECK(std::find(spec.entries.begin(), spec.entries.end(), launch.entry) != spec.entries.end());
      CHECK(launch.block > 0);
      CHECK(launch.block <= 1024);
    }
  }
}

// One arch per family: the family's own cc, as the family names it.
std::string ArchOf(const ArchFamily& family) {
  return "sm_" + std::to_string(family.min_cc) + (family.variant == 'a' ? "a" : "");
}

TEST_CASE("every generator's smallest spec compiles for each of its arch families", "[kernels][registry][compile]") {
  for (const auto& op : OpRegistry::Builtin().all()) {
    const std::string name(op->name());
    const JitSpec spec = generator_test::MustGenerate(name, SmallestParams(*op));
    for (const ArchFamily& family : spec.arch_families) {
      INFO(spec.uri << " for " << family.name);
      auto requested = GpuArch::Parse(ArchOf(family));
      REQUIRE(requested.ok());
      auto arch = ResolveArch(*requested, spec.arch_families, spec.uri);
      REQUIRE(arch.ok());
      server::CompileRequest request{&spec, compile_test::Tree().get(), *arch, {}, false, ""};
      auto result = compile_test::Compiler().Compile(request);
      INFO(result.status().ToString());
      REQUIRE(result.ok());
      CHECK(result->cubin.starts_with("\x7f"
                                      "ELF"));
      // Every entry the spec promises is a kernel of the cubin.
      std::set<std::string> kernels;
      for (const auto& k : result->kernels) kernels.insert(k.name);
      for (const std::string& entry : spec.entries) CHECK(kernels.count(entry) == 1);
      // A launch hint never asks for more threads than its kernel allows.
      for (const EntryLaunch& launch : spec.launch)
        for (const auto& k : result->kernels)
          if (k.name == launch.entry) CHECK(launch.block <= k.max_threads_per_block);
    }
  }
}

// The PTX body of `.entry name(`: from its line to the next line that is a lone "}" (PTX ends a
// function there; nested blocks are indented). Empty when the entry is not in `ptx`.
std::string EntryBody(const std::string& ptx, const std::string& name) {
  const size_t begin = ptx.find(".entry " + name + "(");
  if (begin == std::string::npos) return "";
  const size_t end = ptx.find("\n}\n", begin);
  return ptx.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

// The first instruction of `body` that may touch global memory: a load, store, atomic or
// reduction in the global or the generic state space (a generic address may be global), or an
// asynchronous copy (cp.async, TMA, L2 prefetch); "" when there is none. `end` bounds the search.
std::string FirstGlobalAccess(const std::string& body, size_t end) {
  size_t line_begin = 0;
  while (line_begin < end) {
    size_t line_end = body.find('\n', line_begin);
    if (line_end == std::string::npos) line_end = body.size();
    std::string line = body.substr(line_begin, line_end - line_begin);
    line_begin = line_end + 1;
    size_t at = line.find_first_not_of(" \t");
    if (at == std::string::npos) continue;
    if (line[at] == '@') at = line.find_first_of(" \t", at);  // a predicate guard: the opcode follows
    if (at == std::string::npos) continue;
    at = line.find_first_not_of(" \t", at);
    if (at == std::string::npos) continue;
    const std::string instruction = line.substr(at, line.find_first_of(" \t;", at) - at);
    const std::string op = instruction.substr(0, instruction.find('.'));
    if (op == "cp") return instruction;
    if (op != "ld" && op != "st" && op != "atom" && op != "red") continue;
    const std::string space = instruction.substr(op.size());
    if (space.starts_with(".param") || space.starts_with(".shared") || space.starts_with(".local") ||
        space.starts_with(".const"))
      continue;
    return instruction;
  }
  return "";
}

// Entries of sm_90 specs that never launch as programmatic dependents: their launch sites
// (comm_kernels.cpp, prefill_ops.cpp, moe_ops.cpp's route and permute, tensor_stats.cpp) use
// plain stream order, so the kernels need no griddepcontrol.wait. A launch site that makes one
// of them a dependent must first give the kernel its wait (kiln/common/grid_dependency.cuh) and
// take it off this list.
const std::set<std::string> kLaunchedInStreamOrder = {
    "kiln_all_reduce_add_rmsnorm", "kiln_all_reduce_one_shot", "kiln_all_reduce_two_shot", "kiln_batch_prefill",
    "kiln_batch_prefill_merge",    "kiln_moe_permute",         "kiln_moe_permute_count",   "kiln_moe_permute_gather",
    "kiln_moe_permute_invert",     "kiln_moe_permute_rank",    "kiln_moe_route",           "kiln_tensor_stats"};

// Entries that touch global memory before their wait on purpose (kiln/moe/fused_moe_gemv.cuh):
// fused_moe's down GEMVs read the routing ids (final before the gate-up GEMV's own wait
// returned, and that GEMV runs before them) and ask L2 for their weight rows while the gate-up
// GEMV ends. Every other entry waits before its first global access.
const std::set<std::string> kEarlyAccessByDesign = {"kiln_fused_moe_down", "kiln_fused_moe_down_folded"};

// Every generator's smallest spec, and the smallest spec with each value of each of its choice
// params (dtype, scoring, a variant that has entries of its own), where the generator takes it
// with the other params smallest.
std::vector<JitSpec> SmallestSpecsOfEveryChoice() {
  std::vector<JitSpec> specs;
  for (const auto& op : OpRegistry::Builtin().all()) {
    const std::string name(op->name());
    const Params smallest = SmallestParams(*op);
    specs.push_back(generator_test::MustGenerate(name, smallest));
    for (const ParamInfo& p : op->params()) {
      if (p.kind != ParamInfo::Kind::kChoice) continue;
      for (const std::string& choice : p.choices) {
        Params params = smallest;
        params[p.name] = choice;
        auto spec = generator_test::Generate(name, params);
        if (spec.ok()) specs.push_back(*std::move(spec));
      }
    }
  }
  return specs;
}

// A kernel launched with programmatic stream serialization may start before the kernel it
// depends on has finished; only griddepcontrol.wait makes that kernel's writes visible. So every
// entry that may launch that way (client/core/loader/programmatic_launch.h, the gemm and fused
// MoE launch sites) must wait, and before anything reads or writes global memory. Read from each
// generator's smallest spec compiled to PTX for sm_90a: the GPU tests compare PDL on and off, but
// a missing wait is a race that a test may never lose.
TEST_CASE("every sm_90 entry waits on griddepcontrol before touching global memory, but the listed ones",
          "[kernels][registry][compile]") {
  std::set<std::string> without_wait, early_access, seen, uris;
  for (const JitSpec& spec : SmallestSpecsOfEveryChoice()) {
    if (!uris.insert(spec.uri).second) continue;
    auto arch = ResolveArch(GpuArch{90, 'a'}, spec.arch_families, spec.uri);
    if (!arch.ok()) continue;  // not a Hopper spec: nothing launches it as a dependent
    INFO(spec.uri);
    server::CompileRequest request{&spec, compile_test::Tree().get(), *arch, {}, false, ""};
    auto ptx = compile_test::Compiler().CompilePtx(request);
    INFO(ptx.status().ToString());
    REQUIRE(ptx.ok());
    for (const std::string& entry : spec.entries) {
      INFO(entry);
      std::string body;
      for (const std::string& unit : *ptx)
        if (body.empty()) body = EntryBody(unit, entry);
      REQUIRE_FALSE(body.empty());
      seen.insert(entry);
      const size_t wait = body.find("griddepcontrol.wait");
      if (wait == std::string::npos) {
        without_wait.insert(entry);
        CHECK(kLaunchedInStreamOrder.count(entry) == 1);
        continue;
      }
      const std::string access = FirstGlobalAccess(body, wait);
      INFO("first global access before the wait: " << access);
      if (!access.empty()) early_access.insert(entry);
      CHECK((access.empty() || kEarlyAccessByDesign.count(entry) == 1));
    }
  }
  // The lists say what is true: every listed entry exists and still is as listed.
  for (const std::string& entry : kLaunchedInStreamOrder) {
    INFO(entry);
    CHECK(seen.count(entry) == 1);
    CHECK(without_wait.count(entry) == 1);
  }
  for (const std::string& entry : kEarlyAccessByDesign) {
    INFO(entry);
    CHECK(early_access.count(entry) == 1);
  }
}

}  // namespace
}  // namespace kiln::kernels
