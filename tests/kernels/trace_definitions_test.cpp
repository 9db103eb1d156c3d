// The trace definitions (kernels/traces/*.json) against the rest of the tree: one per
// registered op and none for an op that does not exist; each well-formed per the schema
// (kernels/traces/README.md); tensors, scalars and in/out roles as the public C++ and C
// declarations of its API have them (read from client/include, the headers users compile
// with) — or, for an internal op (api.internal), as the one internal header it names declares
// its C++ API and returned struct, while no public header declares it; example dtypes the
// op's generator takes; a C++ reference that exists.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
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

using Headers = std::vector<std::pair<std::string, std::string>>;

// Where an op's API is declared: the public headers, or for an internal op only the header its
// definition names (empty when that file does not exist).
Headers ApiHeaders(const TraceDefinition& def) {
  if (!def.IsInternal()) return PublicHeaders();
  const fs::path path = fs::path(kSource) / def.api_internal_header;
  if (!fs::is_regular_file(path)) return {};
  return {{def.api_internal_header, ReadFile(path)}};
}

// The trace scalar dtype of a C++ member type ("" for any other type).
std::string ScalarDtypeOf(const std::string& type) {
  if (type == "int64_t") return "int64";
  if (type == "int32_t" || type == "int") return "int32";
  if (type == "uint64_t") return "uint64";
  if (type == "uint32_t" || type == "unsigned") return "uint32";
  if (type == "double") return "float64";
  if (type == "float") return "float32";
  if (type == "bool") return "bool";
  return "";
}

bool HasWord(const std::string& text, const std::string& word) {
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    const auto boundary = [&](size_t i) {
      return i >= text.size() || !(std::isalnum(static_cast<unsigned char>(text[i])) || text[i] == '_');
    };
    if ((at == 0 || boundary(at - 1)) && boundary(at + word.size())) return true;
  }
  return false;
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
void AddScalarNames(const std::vector<testing::ApiParam>& params, const Headers& headers,
                    std::set<std::string>* names) {
  for (const auto& p : params) {
    if (p.type.find("TensorView") != std::string::npos || p.type.find("DLTensor") != std::string::npos) continue;
    names->insert(p.name);
    for (const auto& f : testing::StructFields(headers, p.type)) {
      names->insert(f.name);
      names->insert(p.name + "_" + f.name);
      for (const auto& g : testing::StructFields(headers, f.type)) {
        names->insert(f.name + "_" + g.name);
        names->insert(p.name + "_" + f.name + "_" + g.name);
      }
    }
  }
}

TEST_CASE("every registered op has a trace definition, and every definition names a registered op", "[traces]") {
  std::set<std::string> registered, defined;
  for (const auto& op : kernels::OpRegistry::Builtin().all()) registered.emplace(op->name());
  for (const auto& def : Definitions()) {
    if (!def.composed_of.empty()) {
      // A composed op launches other ops' kernels: they must have a generator. It may have
      // kernels (and a generator) of its own too (fused_moe's decode path).
      INFO(def.file << ": composed_of names an op that no generator registers");
      for (const auto& part : def.composed_of) CHECK(kernels::OpRegistry::Builtin().Find(part) != nullptr);
      if (kernels::OpRegistry::Builtin().Find(def.name) == nullptr) continue;
    }
    defined.insert(def.name);
  }
  std::vector<std::string> missing, unknown;
  std::set_difference(registered.begin(), registered.end(), defined.begin(), defined.end(),
                      std::back_inserter(missing));
  std::set_difference(defined.begin(), defined.end(), registered.begin(), registered.end(),
                      std::back_inserter(unknown));
  INFO("registered ops without a trace definition: " << Join(missing)
                                                     << "; add kernels/traces/<op>.json (kernels/traces/README.md)");
  CHECK(missing.empty());
  INFO("trace definitions naming no registered op: "
       << Join(unknown)
       << "; add the op's generator, kernels/ops/<family>/<op>_generator.cpp with KILN_REGISTER_OP_GENERATOR "
          "(docs/adding-a-kernel.md)");
  CHECK(unknown.empty());
  // Each op's family is its definition's op_type (the folder of its contract and client code).
  for (const auto& op : kernels::OpRegistry::Builtin().all())
    for (const auto& def : Definitions())
      if (def.name == op->name()) {
        INFO(def.file << ": op_type '" << def.op_type << "', but the generator's family is '" << op->family() << "'");
        CHECK(def.op_type == op->family());
      }
}

TEST_CASE("every trace definition is well-formed: schema, axes, shapes, examples, constraints", "[traces]") {
  // LoadTraceDefinitions checks each file against the schema; here: that it found them all.
  size_t json_files = 0;
  for (const auto& entry : fs::directory_iterator(kSource + "/kernels/traces"))
    if (entry.path().extension() == ".json") ++json_files;
  CHECK(Definitions().size() == json_files);
  for (const auto& def : Definitions()) {
    INFO(def.file);
    if (def.examples.empty()) {  // only an internal op, saying why (it has no benchmark cases)
      CHECK(def.IsInternal());
      CHECK(!def.no_examples.empty());
    }
    CHECK(!def.VarAxes().empty());
    for (const auto& example : def.examples) CHECK(example.axes.size() == def.VarAxes().size());
  }
}

TEST_CASE("trace definitions match the public C++ and C declarations of their API", "[traces]") {
  for (const auto& def : Definitions()) {
    INFO(def.file << ": api " << def.api_cpp << " / "
                  << (def.IsInternal() ? "internal, " + def.api_internal_header : def.api_c));
    std::vector<std::string> problems;
    std::set<std::string> tensors, scalars, outputs;
    for (const auto& t : def.inputs) tensors.insert(t.name);
    for (const auto& t : def.outputs) {
      tensors.insert(t.name);
      outputs.insert(t.name);
    }
    for (const auto& s : def.scalars) scalars.insert(s.name);

    const Headers headers = ApiHeaders(def);
    const testing::ApiSignature cpp = testing::FindDeclaration(headers, def.api_cpp);
    // An internal op has no C function: its C checks below see no parameters.
    const testing::ApiSignature c = def.IsInternal() ? testing::ApiSignature{}
                                                     : testing::FindDeclaration(headers, def.api_c);
    if (cpp.file.empty())
      problems.push_back(def.api_cpp + " is declared in no header of " +
                         (def.IsInternal() ? def.api_internal_header : std::string("client/include/kiln")));
    if (!def.IsInternal() && c.file.empty())
      problems.push_back(def.api_c + " is declared in no header of client/include/kiln");
    if (def.IsInternal() && !testing::FindDeclaration(PublicHeaders(), def.api_cpp).file.empty())
      problems.push_back(def.api_cpp +
                         " is declared in a public header, so the op is not internal: give api.c, not api.internal");

    std::set<std::string> cpp_tensors, cpp_optional, c_tensors, params;
    AddScalarNames(cpp.params, headers, &params);
    AddScalarNames(c.params, headers, &params);
    for (const auto& p : cpp.params) {
      if (p.type.find("TensorView") == std::string::npos) {
        // A parameter struct holding an optional tensor (sampling's PerRequestInt: a per-request
        // [B] tensor or one scalar) is an optional tensor argument under the parameter's name.
        for (const auto& field : testing::StructFields(headers, p.type)) {
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
    for (const auto& in : def.inputs)
      if (in.optional && !cpp.file.empty() && cpp_tensors.count(in.name) > 0 && cpp_optional.count(in.name) == 0)
        problems.push_back("the optional input '" + in.name + "' is not a pointer (const TensorView*) in " +
                           def.api_cpp + ": a null one must be expressible");
    for (const auto& name : tensors) {
      if (!cpp.file.empty() && cpp_tensors.count(name) == 0)
        problems.push_back("'" + name + "' is not a tensor argument of " + def.api_cpp);
      if (!c.file.empty() && c_tensors.count(name) == 0)
        problems.push_back("'" + name + "' is not a DLTensor argument of " + def.api_c);
    }
    for (const auto& name : cpp_tensors)
      if (tensors.count(name) == 0 && cpp_optional.count(name) == 0)
        problems.push_back("the tensor argument '" + name + "' of " + def.api_cpp +
                           " is in neither inputs nor outputs");
    for (const auto& name : c_tensors)
      if (tensors.count(name) == 0 && cpp_optional.count(name) == 0)
        problems.push_back("the tensor argument '" + name + "' of " + def.api_c + " is in neither inputs nor outputs");
    for (const auto& p : c.params)
      if (outputs.count(p.name) > 0 && p.type.rfind("const", 0) == 0)
        problems.push_back("the output '" + p.name + "' is '" + p.type + "' in " + def.api_c +
                           ": an output is written");
    for (const auto& name : scalars)
      if (params.count(name) == 0)
        problems.push_back("the scalar '" + name + "' is an argument (or an options member) of neither " + def.api_cpp +
                           " nor " + def.api_c);
    for (const auto* sig : {&cpp, &c})
      for (const auto& p : sig->params)
        if (IsFloating(p.type) && scalars.count(p.name) == 0)
          problems.push_back("the argument '" + p.type + " " + p.name + "' of " +
                             (sig == &cpp ? def.api_cpp : def.api_c) + " is not in \"scalars\"");
    if (!def.returns.type.empty()) {
      // "returns": the C++ function returns the struct (StatusOr<...>), whose members are the
      // fields, in order, with their dtypes.
      if (!cpp.file.empty() && !HasWord(cpp.return_type, def.returns.type))
        problems.push_back(def.api_cpp + " returns '" + cpp.return_type + "', not the struct " + def.returns.type +
                           " of \"returns\"");
      const auto members = testing::StructFields(headers, def.returns.type);
      std::vector<std::string> declared, defined;
      for (const auto& m : members) declared.push_back(m.name + ": " + ScalarDtypeOf(m.type) + " (" + m.type + ")");
      for (const auto& [name, dtype] : def.returns.fields) {
        std::string type;
        for (const auto& m : members)
          if (m.name == name) type = m.type;
        defined.push_back(name + ": " + dtype + " (" + type + ")");
      }
      if (declared != defined)
        problems.push_back("\"returns\" lists " + Join(defined) + "; the struct " + def.returns.type + " declares " +
                           (members.empty() ? std::string("nothing (no such struct)") : Join(declared)));
    }
    INFO("C++: " << cpp.file << ", C: " << c.file);
    INFO("problems: " << Join(problems));
    CHECK(problems.empty());
  }
}

TEST_CASE("trace definition examples use dtypes the op's generator takes", "[traces]") {
  for (const auto& def : Definitions()) {
    INFO(def.file);
    // A composed op's examples must suit every op it launches that has a dtype, its own included.
    std::vector<std::string> generators = def.composed_of;
    generators.push_back(def.name);
    for (const std::string& name : generators) {
      const kernels::OpGenerator* op = kernels::OpRegistry::Builtin().Find(name);
      if (op == nullptr) continue;  // reported by the registry test
      for (const auto& param : op->params()) {
        if (param.name != "dtype" || param.choices.empty()) continue;
        for (const auto& example : def.examples) {
          INFO(example.name << ": dtype " << example.dtype << "; " << name << " takes " << Join(param.choices));
          CHECK(std::find(param.choices.begin(), param.choices.end(), example.dtype) != param.choices.end());
        }
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
