// The trace definitions (kernels/traces/*.json) against the rest of the tree: one per
// registered op and none for an op that does not exist; each well-formed per the schema
// (kernels/traces/README.md); tensors, scalars and in/out roles as the public C++ and C
// declarations of its API have them (read from client/include, the headers users compile
// with); example dtypes the op's generator takes; a C++ reference that exists.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "kernels/jit/op_generator.h"
#include "kernels/traces/trace_definition.h"
#include "tests/kernels/api_signatures.h"

namespace kiln::traces {
namespace {

namespace fs = std::filesystem;

const std::string kSource = KILN_TEST_SOURCE_DIR;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const std::vector<TraceDefinition>& Definitions() {
  static const std::vector<TraceDefinition> defs = [] {
    auto loaded = LoadTraceDefinitions(kSource + "/kernels/traces");
    INFO(loaded.status().ToString());
    REQUIRE(loaded.ok());
    return *loaded;
  }();
  return defs;
}

// Every public header of the client: kiln/*.h and kiln/ops/*.h.
const std::vector<std::pair<std::string, std::string>>& PublicHeaders() {
  static const std::vector<std::pair<std::string, std::string>> headers = [] {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& entry : fs::recursive_directory_iterator(kSource + "/client/include/kiln"))
      if (entry.is_regular_file() && (entry.path().extension() == ".h" || entry.path().extension() == ".hpp"))
        out.emplace_back(fs::relative(entry.path(), kSource).string(), ReadFile(entry.path()));
    std::sort(out.begin(), out.end());
    return out;
  }();
  return headers;
}

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

bool IsFloating(const std::string& type) { return type == "double" || type == "float"; }

// The names a trace scalar may take for the non-tensor arguments of an API: the argument
// itself, and the members of an options struct (one level down too), bare or prefixed by
// their path: options.theta -> "theta", options.llama31->factor -> "llama31_factor".
void AddScalarNames(const std::vector<testing::ApiParam>& params, std::set<std::string>* names) {
  for (const auto& p : params) {
    if (p.type.find("TensorView") != std::string::npos || p.type.find("DLTensor") != std::string::npos) continue;
    names->insert(p.name);
    for (const auto& f : testing::StructFields(PublicHeaders(), p.type)) {
      names->insert(f.name);
      names->insert(p.name + "_" + f.name);
      for (const auto& g : testing::StructFields(PublicHeaders(), f.type)) {
        names->insert(f.name + "_" + g.name);
        names->insert(p.name + "_" + f.name + "_" + g.name);
      }
    }
  }
}

TEST_CASE("every registered op has a trace definition, and every definition names a registered op", "[traces]") {
  std::set<std::string> registered, defined;
  for (const auto& op : kernels::OpRegistry::Builtin().all()) registered.emplace(op->name());
  for (const auto& def : Definitions()) defined.insert(def.name);
  std::vector<std::string> missing, unknown;
  std::set_difference(registered.begin(), registered.end(), defined.begin(), defined.end(), std::back_inserter(missing));
  std::set_difference(defined.begin(), defined.end(), registered.begin(), registered.end(), std::back_inserter(unknown));
  INFO("registered ops without kernels/traces/<op>.json: " << Join(missing));
  CHECK(missing.empty());
  INFO("definitions naming no registered op: " << Join(unknown));
  CHECK(unknown.empty());
}

TEST_CASE("every trace definition is well-formed: schema, axes, shapes, examples, constraints", "[traces]") {
  // LoadTraceDefinitions checks each file against the schema; here: that it found them all.
  size_t json_files = 0;
  for (const auto& entry : fs::directory_iterator(kSource + "/kernels/traces"))
    if (entry.path().extension() == ".json") ++json_files;
  CHECK(Definitions().size() == json_files);
  for (const auto& def : Definitions()) {
    INFO(def.file);
    CHECK(!def.examples.empty());
    CHECK(!def.VarAxes().empty());
    for (const auto& example : def.examples) CHECK(example.axes.size() == def.VarAxes().size());
  }
}

TEST_CASE("trace definitions match the public C++ and C declarations of their API", "[traces]") {
  for (const auto& def : Definitions()) {
    INFO(def.file << ": api " << def.api_cpp << " / " << def.api_c);
    std::vector<std::string> problems;
    std::set<std::string> tensors, scalars, outputs;
    for (const auto& t : def.inputs) tensors.insert(t.name);
    for (const auto& t : def.outputs) {
      tensors.insert(t.name);
      outputs.insert(t.name);
    }
    for (const auto& s : def.scalars) scalars.insert(s.name);

    const testing::ApiSignature cpp = testing::FindDeclaration(PublicHeaders(), def.api_cpp);
    const testing::ApiSignature c = testing::FindDeclaration(PublicHeaders(), def.api_c);
    if (cpp.file.empty()) problems.push_back(def.api_cpp + " is declared in no header of client/include/kiln");
    if (c.file.empty()) problems.push_back(def.api_c + " is declared in no header of client/include/kiln");

    std::set<std::string> cpp_tensors, cpp_optional, c_tensors, params;
    AddScalarNames(cpp.params, &params);
    AddScalarNames(c.params, &params);
    for (const auto& p : cpp.params) {
      if (p.type.find("TensorView") == std::string::npos) {
        // A parameter struct holding an optional tensor (sampling's PerRequestInt: a per-request
        // [B] tensor or one scalar) is an optional tensor argument under the parameter's name.
        for (const auto& field : testing::StructFields(PublicHeaders(), p.type)) {
          if (field.type.find("TensorView") != std::string::npos && field.type.find('*') != std::string::npos) {
            cpp_tensors.insert(p.name);
            cpp_optional.insert(p.name);
          }
        }
        continue;
      }
      cpp_tensors.insert(p.name);
      if (p.type.find('*') != std::string::npos) cpp_optional.insert(p.name);  // may be null
    }
    for (const auto& p : c.params) {
      if (p.type.find("DLTensor") != std::string::npos) c_tensors.insert(p.name);
    }
    for (const auto& name : tensors) {
      if (!cpp.file.empty() && cpp_tensors.count(name) == 0)
        problems.push_back("'" + name + "' is not a tensor argument of " + def.api_cpp);
      if (!c.file.empty() && c_tensors.count(name) == 0)
        problems.push_back("'" + name + "' is not a DLTensor argument of " + def.api_c);
    }
    for (const auto& name : cpp_tensors)
      if (tensors.count(name) == 0 && cpp_optional.count(name) == 0)
        problems.push_back("the tensor argument '" + name + "' of " + def.api_cpp + " is in neither inputs nor outputs");
    for (const auto& name : c_tensors)
      if (tensors.count(name) == 0 && cpp_optional.count(name) == 0)
        problems.push_back("the tensor argument '" + name + "' of " + def.api_c + " is in neither inputs nor outputs");
    for (const auto& p : c.params)
      if (outputs.count(p.name) > 0 && p.type.rfind("const", 0) == 0)
        problems.push_back("the output '" + p.name + "' is '" + p.type + "' in " + def.api_c + ": an output is written");
    for (const auto& name : scalars)
      if (params.count(name) == 0)
        problems.push_back("the scalar '" + name + "' is an argument (or an options member) of neither " +
                           def.api_cpp + " nor " + def.api_c);
    for (const auto* sig : {&cpp, &c})
      for (const auto& p : sig->params)
        if (IsFloating(p.type) && scalars.count(p.name) == 0)
          problems.push_back("the argument '" + p.type + " " + p.name + "' of " +
                             (sig == &cpp ? def.api_cpp : def.api_c) + " is not in \"scalars\"");
    INFO("C++: " << cpp.file << ", C: " << c.file);
    INFO("problems: " << Join(problems));
    CHECK(problems.empty());
  }
}

TEST_CASE("trace definition examples use dtypes the op's generator takes", "[traces]") {
  for (const auto& def : Definitions()) {
    INFO(def.file);
    const kernels::OpGenerator* op = kernels::OpRegistry::Builtin().Find(def.name);
    if (op == nullptr) continue;  // reported by the registry test
    for (const auto& param : op->params()) {
      if (param.name != "dtype" || param.choices.empty()) continue;
      for (const auto& example : def.examples) {
        INFO(example.name << ": dtype " << example.dtype << "; " << def.name << " takes " << Join(param.choices));
        CHECK(std::find(param.choices.begin(), param.choices.end(), example.dtype) != param.choices.end());
      }
    }
  }
}

TEST_CASE("trace definitions name a C++ reference that exists, and a PyTorch function", "[traces]") {
  for (const auto& def : Definitions()) {
    INFO(def.file << ": reference.cpp '" << def.reference_cpp << "'");
    const size_t colon = def.reference_cpp.find(':');
    const fs::path file = fs::path(kSource) / def.reference_cpp.substr(0, colon);
    const std::string symbol = def.reference_cpp.substr(colon + 1);
    REQUIRE(fs::is_regular_file(file));
    CHECK(ReadFile(file).find(symbol) != std::string::npos);
    CHECK(def.reference_torch.find("def ") != std::string::npos);
    CHECK(def.reference_torch.find("torch") != std::string::npos);
  }
}

}  // namespace
}  // namespace kiln::traces
