// kiln compile --source FILE --entry NAME...: your own CUDA C++ source through the daemon.
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "client/cli/command.h"
#include "client/cli/kernel_fetch.h"
#include "client/core/rpc/kernel_request.h"

namespace kiln::cli {
namespace {

std::string ReadSource(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw UsageError("cannot read " + path);
  std::ostringstream s;
  s << file.rdbuf();
  return s.str();
}

// The file's stem as a request name: [A-Za-z0-9_].
std::string NameFromPath(const std::string& path) {
  std::string name = std::filesystem::path(path).stem().string();
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  return name.empty() ? "source" : name;
}

int RunCompile(Invocation& inv) {
  if (!inv.Has("--source")) throw UsageError("--source FILE is required");
  if (!inv.Has("--entry")) throw UsageError("at least one --entry NAME is required");
  SourceRequest source;
  const std::string path = inv.Get("--source");
  source.name = inv.Has("--name") ? inv.Get("--name") : NameFromPath(path);
  source.code = ReadSource(path);
  source.entries = inv.All("--entry");
  source.options = inv.All("--option");
  for (const auto& unit : inv.All("--unit"))
    source.extra_units.push_back({std::filesystem::path(unit).filename().string(), ReadSource(unit)});
  return FetchAndReport(inv, client::MakeKernelRequest(source, ""));
}

}  // namespace

void AddCompileCommand(std::vector<CommandSpec>& commands) {
  CommandSpec c;
  c.path = "compile";
  c.arguments = "--source FILE --entry NAME...";
  c.summary = "compile your own CUDA C++ source through the daemon (cached like any kernel)";
  c.details = "Entries are extern \"C\" __global__ functions. Options come from the daemon's allow-list\n"
              "(-DNAME=VALUE, -std=c++20, --use_fast_math, -lineinfo, -maxrregcount=N, ...); #include may\n"
              "name the kernels include folder and the CUDA headers. A compile error exits with 1 and\n"
              "prints the compiler's message.\n\n"
              "Example:\n"
              "  kiln compile --source axpy.cu --entry axpy --option -DN=4 --arch sm_90a --out axpy.cubin";
  c.options = {
      {"--source", "FILE", "the main compilation unit"},
      {"--entry", "NAME", "a kernel to export", true},
      {"--option", "OPT", "a compiler option", true},
      {"--unit", "FILE", "an extra compilation unit, linked with nvJitLink", true},
      {"--name", "NAME", "the request's name in its URI (default: the file's stem)"},
  };
  for (auto& o : KernelFetchOptions()) c.options.push_back(o);
  c.run = RunCompile;
  commands.push_back(std::move(c));
}

}  // namespace kiln::cli
