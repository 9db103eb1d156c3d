#include "kernels/traces/trace_definition.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/traces/trace_expression.h"
#include "kiln_base/status_macros.h"

namespace kiln::traces {
namespace {

using Json = nlohmann::ordered_json;

// Collects the file name and the path inside the document for every message.
class Checker {
 public:
  explicit Checker(std::string_view file) : file_(file) {}

  absl::Status Fail(const std::string& where, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, ": ", where, ": ", what));
  }

  absl::StatusOr<const Json*> Member(const Json& object, const std::string& where, const char* key, bool required,
                                     Json::value_t type) const {
    auto it = object.find(key);
    if (it == object.end()) {
      if (required) return Fail(where, absl::StrCat("missing required key '", key, "'"));
      return static_cast<const Json*>(nullptr);
    }
    const bool ok = type == Json::value_t::number_integer ? it->is_number_integer()
                    : type == Json::value_t::number_float ? it->is_number()
                                                          : it->type() == type;
    if (!ok)
      return Fail(absl::StrCat(where, ".", key), absl::StrCat("must be ", TypeName(type), ", found ", it->type_name()));
    return &*it;
  }

  absl::Status OnlyKeys(const Json& object, const std::string& where,
                        std::initializer_list<const char*> allowed) const {
    for (auto it = object.begin(); it != object.end(); ++it) {
      bool known = false;
      for (const char* k : allowed) known = known || it.key() == k;
      if (!known)
        return Fail(where, absl::StrCat("unknown key '", it.key(), "' (allowed: ", absl::StrJoin(allowed, ", "), ")"));
    }
    return absl::OkStatus();
  }

  static const char* TypeName(Json::value_t type) {
    switch (type) {
      case Json::value_t::object: return "an object";
      case Json::value_t::array: return "an array";
      case Json::value_t::string: return "a string";
      case Json::value_t::number_integer: return "an integer";
      case Json::value_t::number_float: return "a number";
      case Json::value_t::boolean: return "true or false";
      default: return "a value";
    }
  }

 private:
  std::string file_;
};

bool IsIdentifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

absl::Status ParseDtype(const Checker& c, const Json& value, const std::string& where, TraceTensor* t, bool output) {
  const std::string allowed = absl::StrJoin(KnownDtypes(), ", ");
  if (value.is_string()) {
    const std::string s = value.get<std::string>();
    if (absl::StartsWith(s, "same_as:")) {
      if (!output) return c.Fail(where, "'same_as:' is only for outputs");
      t->same_as = s.substr(8);
      return absl::OkStatus();
    }
    if (KnownDtypes().count(s) == 0)
      return c.Fail(where, absl::StrCat("unknown dtype '", s, "' (allowed: ", allowed,
                                        output ? ", or \"same_as:<input>\")" : ")"));
    t->dtypes = {s};
    return absl::OkStatus();
  }
  if (value.is_array() && !value.empty()) {
    for (const auto& d : value) {
      if (!d.is_string() || KnownDtypes().count(d.get<std::string>()) == 0)
        return c.Fail(where, absl::StrCat("unknown dtype ", d.dump(), " (allowed: ", allowed, ")"));
      if (std::find(t->dtypes.begin(), t->dtypes.end(), d.get<std::string>()) != t->dtypes.end())
        return c.Fail(where, absl::StrCat("dtype ", d.dump(), " listed twice"));
      t->dtypes.push_back(d.get<std::string>());
    }
    t->dtype_is_list = true;
    return absl::OkStatus();
  }
  return c.Fail(where, "must be a dtype name, a non-empty list of dtype names" +
                           std::string(output ? ", or \"same_as:<input>\"" : ""));
}

const std::set<std::string>& ScalarDtypes() {
  static const std::set<std::string> kScalarTypes = {"float32", "float64", "int32", "int64",
                                                     "uint32",  "uint64",  "bool"};
  return kScalarTypes;
}

// `may_be_empty`: outputs of an API that returns its results (see "returns").
absl::Status ParseTensors(const Checker& c, const Json& object, const char* section, const TraceDefinition& def,
                          std::vector<TraceTensor>* out, bool may_be_empty = false) {
  if (object.empty() && !may_be_empty)
    return c.Fail(section, std::string("must name at least one tensor") +
                               (std::string(section) == "outputs" ? " (or be {} beside \"returns\")" : ""));
  for (auto it = object.begin(); it != object.end(); ++it) {
    const std::string where = absl::StrCat(section, ".", it.key());
    if (!IsIdentifier(it.key())) return c.Fail(where, "the name must be an argument name (an identifier)");
    if (!it->is_object()) return c.Fail(where, "must be an object {\"shape\": [...], \"dtype\": ...}");
    KILN_ABSL_RETURN_IF_ERROR(c.OnlyKeys(*it, where, {"shape", "dtype", "description", "optional"}));
    TraceTensor t;
    t.name = it.key();
    KILN_ABSL_ASSIGN_OR_RETURN(const Json* optional, c.Member(*it, where, "optional", false, Json::value_t::boolean));
    if (optional != nullptr) {
      if (std::string(section) != "inputs") return c.Fail(where + ".optional", "only an input may be optional");
      t.optional = optional->get<bool>();
    }
    KILN_ABSL_ASSIGN_OR_RETURN(const Json* shape, c.Member(*it, where, "shape", true, Json::value_t::array));
    for (const auto& d : *shape) {
      if (d.is_string()) {
        const std::string axis = d.get<std::string>();
        if (def.FindAxis(axis) == nullptr)
          return c.Fail(where + ".shape", absl::StrCat("'", axis, "' is not an axis of \"axes\""));
        t.shape.push_back({axis, 0});
      } else if (d.is_number_integer() && d.get<int64_t>() > 0) {
        t.shape.push_back({"", d.get<int64_t>()});
      } else {
        return c.Fail(where + ".shape", absl::StrCat("entries are axis names or positive integers, found ", d.dump()));
      }
    }
    if (it->find("dtype") == it->end()) return c.Fail(where, "missing required key 'dtype'");
    KILN_ABSL_RETURN_IF_ERROR(ParseDtype(c, (*it)["dtype"], where + ".dtype", &t, std::string(section) == "outputs"));
    out->push_back(std::move(t));
  }
  return absl::OkStatus();
}

const TraceTensor* FindTensor(const std::vector<TraceTensor>& tensors, const std::string& name) {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

bool SameShape(const TraceTensor& a, const TraceTensor& b) {
  if (a.shape.size() != b.shape.size()) return false;
  for (size_t i = 0; i < a.shape.size(); ++i)
    if (a.shape[i].axis != b.shape[i].axis || a.shape[i].size != b.shape[i].size) return false;
  return true;
}

absl::Status CheckOutputs(const Checker& c, TraceDefinition* def) {
  for (auto& out : def->outputs) {
    const std::string where = "outputs." + out.name;
    if (!out.same_as.empty()) {
      const TraceTensor* src = FindTensor(def->inputs, out.same_as);
      if (src == nullptr) return c.Fail(where + ".dtype", absl::StrCat("same_as:", out.same_as, " names no input"));
    }
    if (const TraceTensor* in = FindTensor(def->inputs, out.name)) {
      // In place: one argument, read and written; it cannot change shape or dtype.
      if (!SameShape(*in, out))
        return c.Fail(where, "an in-place argument (in inputs and outputs) must have the same shape in both");
      const bool same_dtype = out.same_as == out.name || (out.same_as.empty() && out.dtypes == in->dtypes);
      if (!same_dtype)
        return c.Fail(where + ".dtype",
                      absl::StrCat("an in-place argument keeps its dtype: write \"same_as:", out.name, "\""));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseReturns(const Checker& c, const Json& returns, TraceDefinition* def) {
  KILN_ABSL_RETURN_IF_ERROR(c.OnlyKeys(returns, "returns", {"type", "fields", "description"}));
  KILN_ABSL_ASSIGN_OR_RETURN(const Json* type, c.Member(returns, "returns", "type", true, Json::value_t::string));
  def->returns.type = type->get<std::string>();
  if (!IsIdentifier(def->returns.type))
    return c.Fail("returns.type",
                  "must be the name of the C++ struct the API returns, found '" + def->returns.type + "'");
  KILN_ABSL_ASSIGN_OR_RETURN(const Json* fields, c.Member(returns, "returns", "fields", true, Json::value_t::object));
  if (fields->empty()) return c.Fail("returns.fields", "must name at least one member");
  for (auto it = fields->begin(); it != fields->end(); ++it) {
    const std::string where = "returns.fields." + it.key();
    if (!IsIdentifier(it.key())) return c.Fail(where, "a member name is an identifier");
    if (!it->is_string() || ScalarDtypes().count(it->get<std::string>()) == 0)
      return c.Fail(where, absl::StrCat("must be a scalar dtype (", absl::StrJoin(ScalarDtypes(), ", "), "), found ",
                                        it->dump()));
    def->returns.fields.emplace_back(it.key(), it->get<std::string>());
  }
  return absl::OkStatus();
}

absl::Status ParseExamples(const Checker& c, const Json& examples, TraceDefinition* def) {
  if (examples.empty()) {
    if (!def->IsInternal())
      return c.Fail("examples", "must hold at least one example (only an internal op may have none, saying why in "
                                "\"no_examples\")");
    if (def->no_examples.empty())
      return c.Fail("examples", "an internal op without examples must say why in \"no_examples\"");
    return absl::OkStatus();
  }
  if (!def->no_examples.empty()) return c.Fail("no_examples", "is only for a definition without examples");
  std::set<std::string> names;
  const std::vector<std::string> op_dtypes = def->OpDtypes();
  for (size_t i = 0; i < examples.size(); ++i) {
    const Json& e = examples[i];
    std::string where = absl::StrCat("examples[", i, "]");
    if (!e.is_object()) return c.Fail(where, "must be an object {\"name\", \"axes\", \"dtype\"}");
    KILN_ABSL_RETURN_IF_ERROR(c.OnlyKeys(e, where, {"name", "axes", "dtype", "description"}));
    KILN_ABSL_ASSIGN_OR_RETURN(const Json* name, c.Member(e, where, "name", true, Json::value_t::string));
    TraceExample ex;
    ex.name = name->get<std::string>();
    if (ex.name.empty() || ex.name.find_first_of(" \t#,") != std::string::npos)
      return c.Fail(where + ".name", "must be non-empty, without spaces, commas or '#' (it labels benchmark rows)");
    if (!names.insert(ex.name).second) return c.Fail(where + ".name", "'" + ex.name + "' is used twice");
    where = absl::StrCat("examples[", i, "] (", ex.name, ")");
    KILN_ABSL_ASSIGN_OR_RETURN(const Json* axes, c.Member(e, where, "axes", true, Json::value_t::object));
    for (auto it = axes->begin(); it != axes->end(); ++it) {
      const TraceAxis* axis = def->FindAxis(it.key());
      if (axis == nullptr) return c.Fail(where + ".axes", absl::StrCat("'", it.key(), "' is not an axis"));
      if (!it->is_number_integer() || it->get<int64_t>() <= 0)
        return c.Fail(where + ".axes." + it.key(), absl::StrCat("must be a positive integer, found ", it->dump()));
      if (axis->is_const && it->get<int64_t>() != axis->value)
        return c.Fail(where + ".axes." + it.key(),
                      absl::StrCat("is a const axis of value ", axis->value, ", found ", it->dump()));
    }
    for (const auto& axis : def->axes) {
      auto it = axes->find(axis.name);
      if (it == axes->end()) {
        if (!axis.is_const) return c.Fail(where + ".axes", absl::StrCat("missing the var axis '", axis.name, "'"));
        continue;
      }
      if (!axis.is_const) ex.axes.emplace_back(axis.name, it->get<int64_t>());
    }
    KILN_ABSL_ASSIGN_OR_RETURN(const Json* dtype, c.Member(e, where, "dtype", true, Json::value_t::string));
    ex.dtype = dtype->get<std::string>();
    const bool dtype_ok = op_dtypes.empty()
                              ? KnownDtypes().count(ex.dtype) > 0
                              : std::find(op_dtypes.begin(), op_dtypes.end(), ex.dtype) != op_dtypes.end();
    if (!dtype_ok)
      return c.Fail(where + ".dtype",
                    absl::StrCat("'", ex.dtype, "' is not a dtype of the op (",
                                 absl::StrJoin(op_dtypes.empty() ? std::vector<std::string>(KnownDtypes().begin(),
                                                                                            KnownDtypes().end())
                                                                 : op_dtypes,
                                               ", "),
                                 ")"));
    const auto values = def->AxisValues(ex);
    for (const auto& constraint : def->constraints) {
      auto holds = EvaluateExpression(constraint, values);
      if (!holds.ok()) return c.Fail(where, std::string(holds.status().message()));
      if (*holds == 0) return c.Fail(where, absl::StrCat("breaks the constraint '", constraint, "'"));
    }
    def->examples.push_back(std::move(ex));
  }
  return absl::OkStatus();
}

absl::Status Parse(const Checker& c, const Json& doc, TraceDefinition* def) {
  if (!doc.is_object()) return c.Fail("document", "must be a JSON object");
  KILN_ABSL_RETURN_IF_ERROR(
      c.OnlyKeys(doc, "document",
                 {"name", "op_type", "description", "api", "axes", "inputs", "outputs", "returns", "scalars",
                  "constraints", "tags", "reference", "examples", "no_examples", "notes", "composed_of"}));
  for (auto [key, field] : {std::pair{"name", &def->name}, std::pair{"op_type", &def->op_type},
                            std::pair{"description", &def->description}}) {
    KILN_ABSL_ASSIGN_OR_RETURN(const Json* v, c.Member(doc, "document", key, true, Json::value_t::string));
    *field = v->get<std::string>();
    if (field->empty()) return c.Fail(key, "must not be empty");
  }
  if (!IsIdentifier(def->name)) return c.Fail("name", "must be the registry op name (letters, digits, _)");

  KILN_ABSL_ASSIGN_OR_RETURN(const Json* api, c.Member(doc, "document", "api", true, Json::value_t::object));
  KILN_ABSL_RETURN_IF_ERROR(c.OnlyKeys(*api, "api", {"cpp", "c", "internal"}));
  KILN_ABSL_ASSIGN_OR_RETURN(const Json* cpp, c.Member(*api, "api", "cpp", true, Json::value_t::string));
  KILN_ABSL_ASSIGN_OR_RETURN(const Json* internal, c.Member(*api, "api", "internal", false, Json::value_t::string));
  def->api_cpp = cpp->get<std::string>();
  if (!absl::StartsWith(def->api_cpp, "kiln::") || absl::EndsWith(def->api_cpp, ":"))
    return c.Fail("api.cpp",
                  "must be a qualified name in namespace kiln (\"kiln::ops::rms_norm\"), found '" + def->api_cpp + "'");
  if (internal != nullptr) {
    // An internal op: declared in a header of the library's own tree, exported nowhere.
    def->api_internal_header = internal->get<std::string>();
    const std::string& h = def->api_internal_header;
    if (h.empty() || h.front() == '/' || h.find("..") != std::string::npos || !absl::EndsWith(h, ".h") ||
        absl::StartsWith(h, "client/include/"))
      return c.Fail("api.internal", "must be the path from the repository root of a header outside the public "
                                    "client/include/ (\"client/diag/tensor_stats.h\"), found '" +
                                        h + "'");
    if (api->contains("c"))
      return c.Fail("api.c", "an internal op (api.internal) has no C ABI export; leave api.c out");
  } else {
    KILN_ABSL_ASSIGN_OR_RETURN(const Json* capi, c.Member(*api, "api", "c", true, Json::value_t::string));
    def->api_c = capi->get<std::string>();
    if (!absl::StartsWith(def->api_c, "kiln_") || !IsIdentifier(def->api_c))
      return c.Fail("api.c", "must be a C function name starting with kiln_, found '" + def->api_c + "'");
  }

  KILN_ABSL_ASSIGN_OR_RETURN(const Json* axes, c.Member(doc, "document", "axes", true, Json::value_t::object));
  if (axes->empty()) return c.Fail("axes", "must name at least one axis");
  for (auto it = axes->begin(); it != axes->end(); ++it) {
    const std::string where = "axes." + it.key();
    if (!IsIdentifier(it.key())) return c.Fail(where, "an axis name is an identifier");
    if (!it->is_object()) return c.Fail(where, R"(must be {"type": "var"} or {"type": "const", "value": N})");
    KILN_ABSL_RETURN_IF_ERROR(c.OnlyKeys(*it, where, {"type", "value", "description"}));
    KILN_ABSL_ASSIGN_OR_RETURN(const Json* type, c.Member(*it, where, "type", true, Json::value_t::string));
    TraceAxis axis{it.key(), false, 0};
    if (*type == "const") {
      KILN_ABSL_ASSIGN_OR_RETURN(const Json* value, c.Member(*it, where, "value", true, Json::value_t::number_integer));
      axis.is_const = true;
      axis.value = value->get<int64_t>();
      if (axis.value <= 0) return c.Fail(where + ".value", "must be a positive integer");
    } else if (*type == "var") {
      if (it->contains("value")) return c.Fail(where, "a var axis has no value (its examples give it)");
    } else {
      return c.Fail(where + ".type", "must be \"var\" or \"const\", found " + type->dump());
    }
    def->axes.push_back(axis);
  }

  KILN_ABSL_ASSIGN_OR_RETURN(const Json* inputs, c.Member(doc, "document", "inputs", true, Json::value_t::object));
  KILN_ABSL_RETURN_IF_ERROR(ParseTensors(c, *inputs, "inputs", *def, &def->inputs));
  KILN_ABSL_ASSIGN_OR_RETURN(const Json* returns, c.Member(doc, "document", "returns", false, Json::value_t::object));
  if (returns != nullptr) KILN_ABSL_RETURN_IF_ERROR(ParseReturns(c, *returns, def));
  KILN_ABSL_ASSIGN_OR_RETURN(const Json* outputs, c.Member(doc, "document", "outputs", true, Json::value_t::object));
  KILN_ABSL_RETURN_IF_ERROR(ParseTensors(c, *outputs, "outputs", *def, &def->outputs, returns != nullptr));
  KILN_ABSL_RETURN_IF_ERROR(CheckOutputs(c, def));

  KILN_ABSL_ASSIGN_OR_RETURN(const Json* scalars, c.Member(doc, "document", "scalars", false, Json::value_t::object));
  if (scalars != nullptr) {
    const std::set<std::string>& kScalarTypes = ScalarDtypes();
    for (auto it = scalars->begin(); it != scalars->end(); ++it) {
      const std::string where = "scalars." + it.key();
      if (!IsIdentifier(it.key())) return c.Fail(where, "a scalar name is an argument name (an identifier)");
      if (FindTensor(def->inputs, it.key()) || FindTensor(def->outputs, it.key()))
        return c.Fail(where, "is also a tensor");
      if (!it->is_object()) return c.Fail(where, R"(must be {"dtype": "float64", "default": ...})");
      KILN_ABSL_RETURN_IF_ERROR(c.OnlyKeys(*it, where, {"dtype", "default", "description"}));
      KILN_ABSL_ASSIGN_OR_RETURN(const Json* dtype, c.Member(*it, where, "dtype", true, Json::value_t::string));
      TraceScalar scalar{it.key(), dtype->get<std::string>(), 0, false};
      if (kScalarTypes.count(scalar.dtype) == 0)
        return c.Fail(where + ".dtype", absl::StrCat("unknown scalar dtype '", scalar.dtype,
                                                     "' (allowed: ", absl::StrJoin(kScalarTypes, ", "), ")"));
      if (auto d = it->find("default"); d != it->end()) {
        if (!d->is_number() && !d->is_boolean()) return c.Fail(where + ".default", "must be a number or a boolean");
        scalar.default_value = d->is_boolean() ? (d->get<bool>() ? 1 : 0) : d->get<double>();
        scalar.has_default = true;
      }
      def->scalars.push_back(scalar);
    }
  }

  std::set<std::string> axis_names;
  for (const auto& a : def->axes) axis_names.insert(a.name);
  KILN_ABSL_ASSIGN_OR_RETURN(const Json* constraints,
                             c.Member(doc, "document", "constraints", false, Json::value_t::array));
  if (constraints != nullptr) {
    for (size_t i = 0; i < constraints->size(); ++i) {
      const Json& e = (*constraints)[i];
      const std::string where = absl::StrCat("constraints[", i, "]");
      if (!e.is_string()) return c.Fail(where, "must be a string (a Python expression over the axes)");
      if (auto s = CheckExpression(e.get<std::string>(), axis_names); !s.ok())
        return c.Fail(where, std::string(s.message()));
      def->constraints.push_back(e.get<std::string>());
    }
  }
  KILN_ABSL_ASSIGN_OR_RETURN(const Json* tags, c.Member(doc, "document", "tags", false, Json::value_t::array));
  if (tags != nullptr) {
    for (const auto& t : *tags) {
      if (!t.is_string() || t.get<std::string>().empty()) return c.Fail("tags", "entries are non-empty strings");
      def->tags.push_back(t.get<std::string>());
    }
  }

  KILN_ABSL_ASSIGN_OR_RETURN(const Json* composed,
                             c.Member(doc, "document", "composed_of", false, Json::value_t::array));
  if (composed != nullptr) {
    if (composed->empty()) return c.Fail("composed_of", "names at least one op");
    for (const auto& op : *composed) {
      if (!op.is_string() || !IsIdentifier(op.get<std::string>()))
        return c.Fail("composed_of", "entries are op names (identifiers)");
      if (op.get<std::string>() == def->name) return c.Fail("composed_of", "an op is not composed of itself");
      def->composed_of.push_back(op.get<std::string>());
    }
  }

  KILN_ABSL_ASSIGN_OR_RETURN(const Json* reference,
                             c.Member(doc, "document", "reference", true, Json::value_t::object));
  KILN_ABSL_RETURN_IF_ERROR(c.OnlyKeys(*reference, "reference", {"torch", "cpp"}));
  KILN_ABSL_ASSIGN_OR_RETURN(const Json* torch,
                             c.Member(*reference, "reference", "torch", true, Json::value_t::string));
  KILN_ABSL_ASSIGN_OR_RETURN(const Json* ref_cpp,
                             c.Member(*reference, "reference", "cpp", true, Json::value_t::string));
  def->reference_torch = torch->get<std::string>();
  def->reference_cpp = ref_cpp->get<std::string>();
  if (def->reference_torch.find("def ") == std::string::npos)
    return c.Fail("reference.torch", "must be the text of a Python function (\"def ...\")");
  const size_t colon = def->reference_cpp.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == def->reference_cpp.size())
    return c.Fail("reference.cpp", "must be \"<file>:<function>\", found '" + def->reference_cpp + "'");

  KILN_ABSL_ASSIGN_OR_RETURN(const Json* no_examples,
                             c.Member(doc, "document", "no_examples", false, Json::value_t::string));
  if (no_examples != nullptr) {
    def->no_examples = no_examples->get<std::string>();
    if (def->no_examples.empty()) return c.Fail("no_examples", "must say why there are no examples");
  }
  KILN_ABSL_ASSIGN_OR_RETURN(const Json* examples, c.Member(doc, "document", "examples", true, Json::value_t::array));
  return ParseExamples(c, *examples, def);
}

}  // namespace

const std::set<std::string>& KnownDtypes() {
  static const std::set<std::string> kDtypes = {"fp32", "fp16", "bf16", "fp8_e4m3", "int8", "uint8", "int32", "int64"};
  return kDtypes;
}

const TraceAxis* TraceDefinition::FindAxis(std::string_view axis) const {
  for (const auto& a : axes)
    if (a.name == axis) return &a;
  return nullptr;
}

std::vector<std::string> TraceDefinition::VarAxes() const {
  std::vector<std::string> out;
  for (const auto& a : axes)
    if (!a.is_const) out.push_back(a.name);
  return out;
}

std::vector<std::string> TraceDefinition::OpDtypes() const {
  std::vector<std::string> out;
  for (const auto& t : inputs) {
    if (!t.dtype_is_list) continue;
    for (const auto& d : t.dtypes)
      if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
  }
  return out;
}

bool TraceDefinition::HasTag(std::string_view tag) const {
  return std::find(tags.begin(), tags.end(), tag) != tags.end();
}

std::map<std::string, int64_t> TraceDefinition::AxisValues(const TraceExample& example) const {
  std::map<std::string, int64_t> values;
  for (const auto& a : axes)
    if (a.is_const) values[a.name] = a.value;
  for (const auto& [name, value] : example.axes) values[name] = value;
  return values;
}

absl::StatusOr<TraceDefinition> ParseTraceDefinition(std::string_view json_text, std::string_view file_name) {
  Checker c(file_name);
  Json doc;
  try {
    doc = Json::parse(json_text.begin(), json_text.end());
  } catch (const Json::parse_error& e) {
    return c.Fail("JSON", e.what());
  }
  TraceDefinition def;
  def.file = std::string(file_name);
  KILN_ABSL_RETURN_IF_ERROR(Parse(c, doc, &def));
  return def;
}

absl::StatusOr<std::vector<TraceDefinition>> LoadTraceDefinitions(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return absl::NotFoundError(absl::StrCat("trace definitions: '", dir, "' is not a folder"));
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.is_regular_file() && entry.path().extension() == ".json") files.push_back(entry.path());
  if (ec) return absl::InternalError(absl::StrCat("trace definitions: listing '", dir, "': ", ec.message()));
  std::sort(files.begin(), files.end());
  std::vector<TraceDefinition> out;
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (!in.good() && !in.eof())
      return absl::InternalError(absl::StrCat("trace definitions: cannot read ", path.string()));
    KILN_ABSL_ASSIGN_OR_RETURN(TraceDefinition def, ParseTraceDefinition(text.str(), path.filename().string()));
    if (def.name != path.stem().string())
      return absl::InvalidArgumentError(absl::StrCat(path.filename().string(), ": name '", def.name,
                                                     "' must equal the file name's stem '", path.stem().string(), "'"));
    out.push_back(std::move(def));
  }
  return out;
}

}  // namespace kiln::traces
