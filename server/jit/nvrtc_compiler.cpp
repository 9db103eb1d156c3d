#include "server/jit/nvrtc_compiler.h"

#include <nvJitLink.h>
#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kiln_base/status_macros.h"
#include "server/jit/cubin_info.h"
#include "server/jit/pch_key.h"

namespace kiln::server {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// The in-memory headers of one compile, as #include names them: the spec's own headers
// ("kiln_config.cuh"), then every file under the tree's include/ by its path below it
// ("kiln/common/vec.cuh"). A spec header shadows a tree file of the same name.
struct Headers {
  std::vector<const char*> contents;
  std::vector<const char*> names;
};

Headers CollectHeaders(const kernels::JitSpec& spec, const kernels::TreeSnapshot* tree) {
  Headers headers;
  for (const kernels::SourceFile& header : spec.headers) {
    headers.contents.push_back(header.content.c_str());
    headers.names.push_back(header.name.c_str());
  }
  if (tree == nullptr) return headers;
  constexpr std::string_view kInclude = "include/";
  for (const auto& [path, content] : tree->files) {
    if (!path.starts_with(kInclude)) continue;
    std::string_view name = std::string_view(path).substr(kInclude.size());
    bool shadowed = std::any_of(spec.headers.begin(), spec.headers.end(),
                                [&](const kernels::SourceFile& h) { return h.name == name; });
    if (shadowed) continue;
    headers.contents.push_back(content.c_str());
    headers.names.push_back(path.c_str() + kInclude.size());
  }
  return headers;
}

class Program {
 public:
  Program() = default;
  ~Program() {
    if (program_ != nullptr) nvrtcDestroyProgram(&program_);
  }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  nvrtcProgram* out() { return &program_; }
  nvrtcProgram get() const { return program_; }

 private:
  nvrtcProgram program_ = nullptr;
};

class Linker {
 public:
  Linker() = default;
  ~Linker() {
    if (handle_ != nullptr) nvJitLinkDestroy(&handle_);
  }
  Linker(const Linker&) = delete;
  Linker& operator=(const Linker&) = delete;
  nvJitLinkHandle* out() { return &handle_; }
  nvJitLinkHandle get() const { return handle_; }

 private:
  nvJitLinkHandle handle_ = nullptr;
};

std::string ProgramLog(nvrtcProgram program) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(program, &size) != NVRTC_SUCCESS || size <= 1) return "";
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(program, log.data()) != NVRTC_SUCCESS) return "";
  log.resize(log.find('\0') == std::string::npos ? log.size() : log.find('\0'));
  return log;
}

std::string LinkerLog(nvJitLinkHandle handle) {
  std::string log;
  size_t size = 0;
  if (nvJitLinkGetErrorLogSize(handle, &size) == NVJITLINK_SUCCESS && size > 1) {
    std::string error(size, '\0');
    if (nvJitLinkGetErrorLog(handle, error.data()) == NVJITLINK_SUCCESS) log += error.c_str();
  }
  if (nvJitLinkGetInfoLogSize(handle, &size) == NVJITLINK_SUCCESS && size > 1) {
    std::string info(size, '\0');
    if (nvJitLinkGetInfoLog(handle, info.data()) == NVJITLINK_SUCCESS) log += info.c_str();
  }
  return log;
}

// The first error of a log and what follows it (NVRTC prints the source line and a caret
// under "file(line): error: ..."): enough for a status message; the payload has the rest.
// Each line is cut at kMaxLineBytes: the source line NVRTC quotes may be megabytes long (one
// line of macros), and the message becomes a grpc-message header, which has a size limit.
std::string FirstErrorLines(std::string_view log) {
  constexpr size_t kMaxLines = 8;
  constexpr size_t kMaxLineBytes = 512;
  std::vector<std::string_view> lines;
  for (std::string_view line : LogLines(log)) {
    if (line.find_first_not_of(" \t\r") != std::string_view::npos) lines.push_back(line);
  }
  size_t first = lines.size();
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find("error") != std::string_view::npos) {
      first = i;
      break;
    }
  }
  if (first == lines.size()) first = lines.size() > kMaxLines ? lines.size() - kMaxLines : 0;
  std::string shown;
  for (size_t i = first; i < std::min(lines.size(), first + kMaxLines); ++i) {
    if (!shown.empty()) shown += "\n";
    shown += lines[i].substr(0, kMaxLineBytes);
    if (lines[i].size() > kMaxLineBytes)
      absl::StrAppend(&shown, "... (", lines[i].size() - kMaxLineBytes, " more bytes)");
  }
  return shown.empty() ? "(empty log)" : shown;
}

std::string WithoutPtxasInfo(std::string_view log) {
  std::string kept;
  for (std::string_view line : LogLines(log)) {
    if (line.starts_with("ptxas info") || line.starts_with("ptxas         .")) continue;
    kept.append(line);
    kept += "\n";
  }
  return std::string(absl::StripTrailingAsciiWhitespace(kept));
}

absl::Status CompileFailure(const CompileRequest& request, const std::string& stage, const std::string& what,
                            const std::string& log) {
  const kernels::JitSpec& spec = *request.spec;
  const bool from_client = spec.op == "source";
  std::string message = absl::StrCat(stage, " ", what, " for ", spec.uri, " on ", request.arch.str(), " (sources in ",
                                     request.generated_dir.empty() ? "memory; not materialized" : request.generated_dir,
                                     "):\n", FirstErrorLines(log));
  if (!from_client) {
    absl::StrAppend(&message, "\nThe kernel library itself does not compile: fix the kernels tree "
                              "(the full log is attached).");
  }
  absl::Status status = from_client ? absl::InvalidArgumentError(message) : absl::FailedPreconditionError(message);
  status.SetPayload(kCompileLogPayload, absl::Cord(log));
  return status;
}

absl::Status ToolchainFailure(const CompileRequest& request, const std::string& call, const std::string& error,
                              const std::string& log) {
  absl::Status status = absl::InternalError(
      absl::StrCat(call, " failed (", error, ") for ", request.spec->uri, " on ", request.arch.str()));
  if (!log.empty()) status.SetPayload(kCompileLogPayload, absl::Cord(log));
  return status;
}

struct UnitOutput {
  bool compiled = false;
  std::string binary;  // cubin (direct), LTO-IR or PTX text
  std::string log;
};

// What NVRTC hands back for a unit: a cubin (the direct path), LTO-IR (the link path) or PTX
// (CompilePtx).
enum class UnitProduct { kCubin, kLtoIr, kPtx };

struct ProductGetters {
  nvrtcResult (*size)(nvrtcProgram, size_t*);
  nvrtcResult (*get)(nvrtcProgram, char*);
  const char* name;
};

ProductGetters GettersOf(UnitProduct product) {
  switch (product) {
    case UnitProduct::kLtoIr: return {nvrtcGetLTOIRSize, nvrtcGetLTOIR, "nvrtcGetLTOIR"};
    case UnitProduct::kPtx: return {nvrtcGetPTXSize, nvrtcGetPTX, "nvrtcGetPTX"};
    case UnitProduct::kCubin: break;
  }
  return {nvrtcGetCUBINSize, nvrtcGetCUBIN, "nvrtcGetCUBIN"};
}

absl::StatusOr<UnitOutput> CompileUnit(const CompileRequest& request, const kernels::SourceFile& unit,
                                       const Headers& headers, const std::vector<std::string>& options,
                                       UnitProduct product) {
  Program program;
  nvrtcResult result = nvrtcCreateProgram(program.out(), unit.content.c_str(), unit.name.c_str(),
                                          static_cast<int>(headers.names.size()), headers.contents.data(),
                                          headers.names.data());
  if (result != NVRTC_SUCCESS) {
    return ToolchainFailure(request, "nvrtcCreateProgram", nvrtcGetErrorString(result), "");
  }
  std::vector<const char*> argv;
  for (const std::string& option : options) argv.push_back(option.c_str());
  result = nvrtcCompileProgram(program.get(), static_cast<int>(argv.size()), argv.data());
  UnitOutput out;
  out.log = ProgramLog(program.get());
  if (result == NVRTC_ERROR_COMPILATION || result == NVRTC_ERROR_INVALID_OPTION) {
    if (result == NVRTC_ERROR_INVALID_OPTION) {
      out.log = absl::StrCat("error: ", nvrtcGetErrorString(result), "\n", out.log);
    }
    return out;
  }
  if (result != NVRTC_SUCCESS) {
    return ToolchainFailure(request, "nvrtcCompileProgram", nvrtcGetErrorString(result), out.log);
  }
  const ProductGetters getters = GettersOf(product);
  size_t size = 0;
  result = getters.size(program.get(), &size);
  if (result == NVRTC_SUCCESS) {
    out.binary.resize(size);
    result = getters.get(program.get(), out.binary.data());
  }
  if (result != NVRTC_SUCCESS || size == 0) {
    return ToolchainFailure(request, getters.name, nvrtcGetErrorString(result), out.log);
  }
  if (product == UnitProduct::kPtx && out.binary.back() == '\0') out.binary.pop_back();  // the size counts the NUL
  out.compiled = true;
  return out;
}

std::vector<std::string> NvrtcOptions(const CompileRequest& request, const CompilerOptions& options, bool lto) {
  std::vector<std::string> argv = {absl::StrCat("--gpu-architecture=", request.arch.str())};
  if (!options.cuda_include_dir.empty()) {
    argv.push_back(absl::StrCat("--include-path=", options.cuda_include_dir));
    // CUDA 13 keeps CCCL (<cuda/std/...>, <cub/...>) below include/cccl.
    std::error_code error;
    if (std::filesystem::is_directory(options.cuda_include_dir + "/cccl", error)) {
      argv.push_back(absl::StrCat("--include-path=", options.cuda_include_dir, "/cccl"));
    }
  }
  argv.insert(argv.end(), request.spec->nvrtc_options.begin(), request.spec->nvrtc_options.end());
  argv.insert(argv.end(), request.extra_options.begin(), request.extra_options.end());
  if (lto) {
    argv.push_back("-dlto");
    argv.push_back("-rdc=true");
  } else {
    argv.push_back("--ptxas-options=-v");  // the attributes come from ptxas' report
  }
  return argv;
}

std::vector<std::string> LinkOptions(const CompileRequest& request) {
  std::vector<std::string> argv = {absl::StrCat("-arch=", request.arch.str()), "-lto",
                                   "-Xptxas=-v"};  // ptxas' per-kernel report, as on the direct path
  argv.insert(argv.end(), request.spec->link_options.begin(), request.spec->link_options.end());
  for (const std::string& option : request.extra_options) {
    if (option == "-lineinfo" || option == "--generate-line-info") argv.push_back("-lineinfo");
    if (option == "-G" || option == "--device-debug") argv.push_back("-g");
  }
  return argv;
}

}  // namespace

NvrtcCompiler::NvrtcCompiler(CompilerOptions options)
    : options_(std::move(options)), toolchain_(DetectToolchain(options_.cuda_include_dir)) {}

bool NvrtcCompiler::UsesLinkPath(const kernels::JitSpec& spec) { return spec.link || spec.units.size() > 1; }

std::vector<std::string> NvrtcCompiler::KeyOptions(const CompileRequest& request) {
  std::vector<std::string> options;
  if (request.spec == nullptr) return options;
  options = request.spec->nvrtc_options;
  options.insert(options.end(), request.extra_options.begin(), request.extra_options.end());
  if (UsesLinkPath(*request.spec)) options.push_back("-dlto");
  return options;
}

absl::StatusOr<CompileResult> NvrtcCompiler::Compile(const CompileRequest& request) const {
  if (request.spec == nullptr) return absl::InvalidArgumentError("compile request without a spec");
  const kernels::JitSpec& spec = *request.spec;
  if (spec.units.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("spec ", spec.uri, " has no compilation unit"));
  }
  if (request.arch.cc == 0) {
    return absl::InvalidArgumentError(absl::StrCat("no target arch given for ", spec.uri));
  }
  const bool lto = UsesLinkPath(spec);
  const Headers headers = CollectHeaders(spec, request.tree);
  const std::vector<std::string> options = NvrtcOptions(request, options_, lto);

  CompileResult result;
  std::string log;
  std::vector<std::string> binaries;
  const auto compile_start = Clock::now();
  for (const kernels::SourceFile& unit : spec.units) {
    std::vector<std::string> unit_options = options;
    if (!options_.pch_dir.empty()) {
      // One sub-folder per set of in-memory headers the PCH can hold (see pch_key.h).
      const std::string pch_dir = absl::StrCat(options_.pch_dir, "/", PchKey(unit, spec, request.tree));
      std::error_code error;
      std::filesystem::create_directories(pch_dir, error);
      if (!error) {  // without the folder, the compile simply runs without PCH
        unit_options.push_back("-pch");
        unit_options.push_back(absl::StrCat("--pch-dir=", pch_dir));
        unit_options.push_back("--pch-messages=false");  // logs stay alike with and without PCH
      }
    }
    KILN_ABSL_ASSIGN_OR_RETURN(UnitOutput out, CompileUnit(request, unit, headers, unit_options,
                                                           lto ? UnitProduct::kLtoIr : UnitProduct::kCubin));
    if (spec.units.size() > 1 && !out.log.empty()) absl::StrAppend(&log, "--- NVRTC ", unit.name, " ---\n");
    absl::StrAppend(&log, out.log);
    if (!out.compiled) return CompileFailure(request, "NVRTC", absl::StrCat("could not compile ", unit.name), log);
    binaries.push_back(std::move(out.binary));
  }
  result.compile_ms = MsSince(compile_start);

  if (!lto) {
    result.cubin = std::move(binaries.front());
  } else {
    const auto link_start = Clock::now();
    std::vector<std::string> link_options = LinkOptions(request);
    std::vector<const char*> argv;
    for (const std::string& option : link_options) argv.push_back(option.c_str());
    Linker linker;
    nvJitLinkResult linked = nvJitLinkCreate(linker.out(), static_cast<uint32_t>(argv.size()), argv.data());
    if (linked != NVJITLINK_SUCCESS) {
      return CompileFailure(request, "nvJitLink", "refused the link options",
                            absl::StrCat(log, "--- nvJitLink ---\nerror: nvJitLinkCreate(",
                                         absl::StrJoin(link_options, " "), ") returned ", linked, "\n"));
    }
    for (size_t i = 0; i < binaries.size() && linked == NVJITLINK_SUCCESS; ++i) {
      linked = nvJitLinkAddData(linker.get(), NVJITLINK_INPUT_LTOIR, binaries[i].data(), binaries[i].size(),
                                spec.units[i].name.c_str());
    }
    if (linked == NVJITLINK_SUCCESS) linked = nvJitLinkComplete(linker.get());
    absl::StrAppend(&log, "--- nvJitLink ---\n", LinkerLog(linker.get()));
    if (linked != NVJITLINK_SUCCESS) {
      result.link_ms = MsSince(link_start);
      return CompileFailure(request, "nvJitLink", absl::StrCat("could not link (error ", linked, ")"), log);
    }
    size_t size = 0;
    if (nvJitLinkGetLinkedCubinSize(linker.get(), &size) != NVJITLINK_SUCCESS || size == 0) {
      return ToolchainFailure(request, "nvJitLinkGetLinkedCubinSize", "no cubin", log);
    }
    result.cubin.resize(size);
    if (nvJitLinkGetLinkedCubin(linker.get(), result.cubin.data()) != NVJITLINK_SUCCESS) {
      return ToolchainFailure(request, "nvJitLinkGetLinkedCubin", "no cubin", log);
    }
    result.link_ms = MsSince(link_start);
  }

  // The cubin says which kernels exist; ptxas' report (when NVRTC returns one) adds spills.
  const auto cubin_kernels = ReadCubinKernelInfo(result.cubin);
  std::vector<std::string> missing, present;
  for (const auto& [name, info] : cubin_kernels)
    if (info.is_kernel) present.push_back(name);
  for (const std::string& entry : spec.entries) {
    auto it = cubin_kernels.find(entry);
    if (it == cubin_kernels.end() || !it->second.is_kernel) missing.push_back(entry);
  }
  if (!missing.empty()) {
    return CompileFailure(request, "the cubin", "has no kernel named " + absl::StrJoin(missing, ", "),
                          absl::StrCat(log, "error: entry ", absl::StrJoin(missing, ", "),
                                       " is not a kernel of the cubin; "
                                       "its kernels are: ",
                                       present.empty() ? "(none)" : absl::StrJoin(present, ", "),
                                       ". An entry must be an extern \"C\" __global__ function.\n"));
  }
  std::vector<KernelAttributes> reported = ParsePtxasInfo(log, spec.entries, request.arch);
  for (const std::string& entry : spec.entries) {
    const CubinKernelInfo& info = cubin_kernels.find(entry)->second;
    auto it = std::find_if(reported.begin(), reported.end(),
                           [&](const KernelAttributes& k) { return k.name == entry; });
    KernelAttributes kernel;
    if (it != reported.end()) {
      kernel = *it;
    } else {
      // No ptxas report for this kernel: everything but spills comes from the cubin. The
      // shared section also holds the 1 KiB the system reserves on sm_90+, so static shared
      // memory is over-stated by that much here.
      kernel.name = entry;
      kernel.registers = std::max(info.registers, 0);
      kernel.stack_bytes = std::max(info.stack_bytes, 0);
      kernel.static_shared_bytes = std::max(info.shared_section_bytes, 0);
      kernel.max_threads_per_block = MaxThreadsForRegisters(kernel.registers);
      kernel.max_dynamic_shared_bytes = std::max(0, MaxOptInSharedBytes(request.arch.cc) - kernel.static_shared_bytes);
      absl::StrAppend(&log, "note: ptxas printed no report for ", entry,
                      "; its attributes come from the cubin (spills unknown)\n");
    }
    if (info.max_threads > 0) kernel.max_threads_per_block = std::min(kernel.max_threads_per_block, info.max_threads);
    if (kernel.const_bytes == 0 && info.const0_bytes > 0) kernel.const_bytes = info.const0_bytes;
    result.kernels.push_back(std::move(kernel));
  }
  result.log = request.verbose_log ? std::move(log) : WithoutPtxasInfo(log);
  return result;
}

absl::StatusOr<std::vector<std::string>> NvrtcCompiler::CompilePtx(const CompileRequest& request) const {
  if (request.spec == nullptr) return absl::InvalidArgumentError("compile request without a spec");
  const kernels::JitSpec& spec = *request.spec;
  if (spec.units.empty() || request.arch.cc == 0) {
    return absl::InvalidArgumentError(absl::StrCat("spec ", spec.uri, " has no unit or no target arch"));
  }
  // The cubin's options with the virtual target of the same arch (sm_90a -> compute_90a), no
  // ptxas report (ptxas does not run), and separate compilation for a spec that links units.
  std::vector<std::string> options;
  for (std::string& option : NvrtcOptions(request, options_, /*lto=*/false)) {
    if (option == "--ptxas-options=-v") continue;
    if (option.rfind("--gpu-architecture=sm_", 0) == 0) option = "--gpu-architecture=compute_" + option.substr(22);
    options.push_back(std::move(option));
  }
  if (UsesLinkPath(spec)) options.push_back("-rdc=true");
  const Headers headers = CollectHeaders(spec, request.tree);
  std::vector<std::string> ptx;
  for (const kernels::SourceFile& unit : spec.units) {
    KILN_ABSL_ASSIGN_OR_RETURN(UnitOutput out, CompileUnit(request, unit, headers, options, UnitProduct::kPtx));
    if (!out.compiled) return CompileFailure(request, "NVRTC", absl::StrCat("could not compile ", unit.name), out.log);
    ptx.push_back(std::move(out.binary));
  }
  return ptx;
}

std::optional<std::string> CompileLog(const absl::Status& status) {
  auto payload = status.GetPayload(kCompileLogPayload);
  if (!payload.has_value()) return std::nullopt;
  return std::string(*payload);
}

}  // namespace kiln::server
