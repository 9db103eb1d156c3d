#include "client/cli/op_reference.h"

#include <algorithm>
#include <cctype>
#include <map>

#include <nlohmann/json.hpp>

#include "client/cli/output.h"

namespace kiln::cli {
namespace {

// File order matters to a reader (the axes as the definition states them), so ordered_json.
using Json = nlohmann::ordered_json;

std::string Join(const std::vector<std::string>& items, const std::string& separator) {
  std::string s;
  for (const auto& item : items) s += (s.empty() ? "" : separator) + item;
  return s;
}

std::string Families(const v1::OpInfo& op) {
  return Join(std::vector<std::string>(op.arch_families().begin(), op.arch_families().end()), ", ");
}

std::string DefaultText(const v1::ParamSpec& param) { return param.required() ? "required" : param.default_value(); }

// A size of a shape or a scalar's default: an axis name as written, a number as JSON prints it.
std::string Scalar(const Json& value) { return value.is_string() ? value.get<std::string>() : value.dump(); }

std::string DtypeText(const Json& dtype) {
  if (dtype.is_array()) {
    std::vector<std::string> names;
    for (const auto& d : dtype) names.push_back(Scalar(d));
    return Join(names, "/");
  }
  const std::string text = Scalar(dtype);
  constexpr std::string_view kSameAs = "same_as:";
  if (text.rfind(kSameAs, 0) == 0) return "same as " + text.substr(kSameAs.size());
  return text;
}

std::vector<std::string> Tensors(const Json& tensors) {
  std::vector<std::string> items;
  for (const auto& [name, tensor] : tensors.items()) {
    std::vector<std::string> dims;
    for (const auto& d : tensor.at("shape")) dims.push_back(Scalar(d));
    items.push_back(name + "[" + Join(dims, ", ") + "] " + DtypeText(tensor.at("dtype")));
  }
  return items;
}

TraceSummary Summarize(const Json& trace) {
  TraceSummary s;
  std::vector<std::string> axes;
  for (const auto& [name, axis] : trace.at("axes").items())
    axes.push_back(axis.value("type", "") == "const" ? name + " = " + Scalar(axis.at("value")) : name);
  s.lines.push_back({"axes", axes});
  s.lines.push_back({"inputs", Tensors(trace.at("inputs"))});
  s.lines.push_back({"outputs", Tensors(trace.at("outputs"))});
  if (trace.contains("scalars")) {
    std::vector<std::string> scalars;
    for (const auto& [name, scalar] : trace.at("scalars").items())
      scalars.push_back(name + " " + Scalar(scalar.at("dtype")) +
                        (scalar.contains("default") ? " = " + Scalar(scalar.at("default")) : ""));
    s.lines.push_back({"scalars", scalars});
  }
  if (trace.contains("returns")) {
    const Json& returns = trace.at("returns");
    std::vector<std::string> fields;
    for (const auto& [name, dtype] : returns.at("fields").items()) fields.push_back(name + " " + Scalar(dtype));
    s.lines.push_back({"returns", {Scalar(returns.at("type")) + " {" + Join(fields, ", ") + "}"}});
  }
  const Json& api = trace.at("api");
  if (api.contains("internal")) {
    s.lines.push_back({"internal api", {Scalar(api.at("cpp")), Scalar(api.at("internal"))}});
  } else {
    s.lines.push_back({"api", {Scalar(api.at("cpp")), Scalar(api.at("c"))}});
  }
  return s;
}

std::string TraceFile(const v1::OpInfo& op) { return "kernels/traces/" + op.name() + ".json"; }

// A table cell or a one-line paragraph of Markdown: no line breaks, no column separators.
std::string MarkdownText(const std::string& text) {
  std::string s;
  for (char c : text) {
    if (c == '\n') {
      s += ' ';
    } else {
      if (c == '|') s += '\\';
      s += c;
    }
  }
  return s;
}

std::string Code(const std::string& text) { return "`" + text + "`"; }

std::string Upper(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::toupper(c); });
  return text;
}

}  // namespace

std::string ParamSummaryText(const v1::ParamSpec& param) {
  return param.name() + " (" + param.allowed() + "; " +
         (param.required() ? std::string("required") : "default " + param.default_value()) + ")";
}

TraceSummary SummarizeTrace(const std::string& trace_definition) {
  if (trace_definition.empty()) return {};
  const Json trace = Json::parse(trace_definition, nullptr, /*allow_exceptions=*/false);
  if (!trace.is_object()) return {.error = "not a JSON object"};
  try {
    return Summarize(trace);
  } catch (const Json::exception& e) {
    return {.error = std::string("not in the schema kiln knows: ") + e.what()};
  }
}

void PrintOpsTable(std::ostream& out, const v1::ListOpsResponse& ops) {
  std::vector<std::vector<std::string>> rows = {{"NAME", "FAMILY", "ARCH", "PARAMS"}};
  for (const v1::OpInfo& op : ops.ops()) {
    std::vector<std::string> params;
    for (const auto& p : op.params()) params.push_back(ParamSummaryText(p));
    rows.push_back({op.name(), op.family(), Families(op), params.empty() ? "-" : Join(params, ", ")});
  }
  PrintTable(out, rows);
  out << ops.ops_size() << (ops.ops_size() == 1 ? " op" : " ops")
      << "; `kiln get OP --help` shows one op's params, arch families and trace definition" << std::endl;
}

void PrintOpsMarkdown(std::ostream& out, const v1::ListOpsResponse& ops) {
  std::map<std::string, std::vector<const v1::OpInfo*>> by_family;
  for (const v1::OpInfo& op : ops.ops()) by_family[op.family()].push_back(&op);
  for (auto& [family, members] : by_family)
    std::sort(members.begin(), members.end(), [](const auto* a, const auto* b) { return a->name() < b->name(); });

  out << "# Op reference\n\n"
         "The ops kilnd serves, by family. Printed by `kiln ops --markdown` from the daemon's ListOps\n"
         "reply: each op's params (what `kiln get OP KEY=VALUE...` and GetKernel's `op.params` take),\n"
         "the arch families its kernels are built for, and a summary of its trace definition\n"
         "(`kernels/traces/<op>.json`: axes, tensors, scalars, API).\n\n"
         "| family | ops |\n| --- | --- |\n";
  for (const auto& [family, members] : by_family) {
    std::vector<std::string> links;
    for (const v1::OpInfo* op : members) links.push_back("[" + Code(op->name()) + "](#" + op->name() + ")");
    out << "| " << MarkdownText(family) << " | " << Join(links, ", ") << " |\n";
  }
  for (const auto& [family, members] : by_family) {
    out << "\n## " << family << "\n";
    for (const v1::OpInfo* op : members) {
      out << "\n### " << Code(op->name()) << "\n\n" << MarkdownText(op->description()) << "\n\n";
      if (op->params_size() == 0) {
        out << "No params.\n\n";
      } else {
        out << "| param | allowed | default | meaning |\n| --- | --- | --- | --- |\n";
        for (const v1::ParamSpec& p : op->params())
          out << "| " << Code(p.name()) << " | " << MarkdownText(p.allowed()) << " | " << MarkdownText(DefaultText(p))
              << " | " << MarkdownText(p.help()) << " |\n";
        out << "\n";
      }
      out << "- arch families: " << Families(*op) << "\n";
      const TraceSummary trace = SummarizeTrace(op->trace_definition());
      if (!trace.error.empty()) {
        out << "- trace definition (" << Code(TraceFile(*op)) << "): unreadable, " << MarkdownText(trace.error) << "\n";
      } else if (trace.lines.empty()) {
        out << "- trace definition: none in the daemon's kernels folder\n";
      } else {
        out << "- trace definition (" << Code(TraceFile(*op)) << "):\n";
        for (const auto& [label, items] : trace.lines) {
          std::vector<std::string> code;
          for (const auto& item : items) code.push_back(Code(item));
          out << "  - " << label << ": " << (code.empty() ? "none" : Join(code, ", ")) << "\n";
        }
      }
    }
  }
  out << std::flush;
}

void PrintOpHelp(std::ostream& out, const v1::OpInfo& op) {
  std::string usage = "kiln get " + op.name();
  for (const v1::ParamSpec& p : op.params()) {
    const std::string word = p.name() + "=" + Upper(p.name());
    usage += " " + (p.required() ? word : "[" + word + "]");
  }
  out << "Usage: " << usage << " [OPTIONS]\n\n"
      << op.name() << " (family " << op.family() << "): " << op.description() << "\n\n";
  if (op.params_size() == 0) {
    out << "Params: none\n";
  } else {
    out << "Params:\n";
    std::vector<std::vector<std::string>> rows = {{"  NAME", "ALLOWED", "DEFAULT", "MEANING"}};
    for (const v1::ParamSpec& p : op.params()) rows.push_back({"  " + p.name(), p.allowed(), DefaultText(p), p.help()});
    PrintTable(out, rows);
  }
  out << "\nArch families: " << Families(op) << "\n\n";
  const TraceSummary trace = SummarizeTrace(op.trace_definition());
  if (!trace.error.empty()) {
    out << "Trace definition (" << TraceFile(op) << "): unreadable, " << trace.error << "\n";
  } else if (trace.lines.empty()) {
    out << "Trace definition: none in the daemon's kernels folder\n";
  } else {
    out << "Trace definition (" << TraceFile(op) << "):\n";
    std::vector<std::vector<std::string>> rows;
    for (const auto& [label, items] : trace.lines)
      rows.push_back({"  " + label, items.empty() ? "none" : Join(items, ", ")});
    PrintTable(out, rows);
  }
  out << "\nThe options of get (--arch, --out, --json, ...): kiln get --help." << std::endl;
}

}  // namespace kiln::cli
