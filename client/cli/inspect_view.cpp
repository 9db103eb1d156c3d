#include "client/cli/inspect_view.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <system_error>

#include "client/cli/output.h"
#include "client/core/rpc/sha256.h"

namespace kiln::cli {
namespace fs = std::filesystem;
namespace {

std::string Joined(const google::protobuf::RepeatedPtrField<std::string>& items) {
  std::string text;
  for (const auto& item : items) text += (text.empty() ? "" : " ") + item;
  return text.empty() ? "-" : text;
}

// A title line, then `rows` as a table indented by two spaces.
void Section(std::ostream& out, const std::string& title, const std::vector<std::vector<std::string>>& rows) {
  out << "\n" << title << "\n";
  std::ostringstream table;
  PrintTable(table, rows);
  std::istringstream lines(table.str());
  for (std::string line; std::getline(lines, line);) out << "  " << line << "\n";
}

std::string ToolchainText(const std::string& nvrtc, const std::string& nvjitlink, const std::string& headers,
                          const std::string& kiln, uint32_t format) {
  return "NVRTC " + nvrtc + ", nvJitLink " + nvjitlink + ", CUDA headers " + (headers.empty() ? "-" : headers) +
         ", kiln " + kiln + ", cache format " + std::to_string(format);
}

std::string Bytes(int32_t bytes) { return HumanBytes(static_cast<uint64_t>(bytes < 0 ? 0 : bytes)); }

// ptxas' report is where spills come from; without one (the compile log says so) they are unknown.
bool SpillsUnknown(const v1::CacheEntry& e, const std::string& kernel) {
  return e.compile_log().find("ptxas printed no report for " + kernel + ";") != std::string::npos;
}

std::string StateText(v1::JobState state) {
  std::string name = v1::JobState_Name(state);
  if (name.rfind("JOB_STATE_", 0) == 0) name = name.substr(10);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

nlohmann::json ProtoJson(const google::protobuf::Message& message) {
  return nlohmann::json::parse(ToJson(message), nullptr, /*allow_exceptions=*/false);
}

void PrintLog(std::ostream& out, const std::string& title, const std::string& log) {
  out << "\n" << title << "\n";
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) out << "  " << line << "\n";
}

}  // namespace

std::string DebugText(const v1::DebugControls& d) {
  std::string text;
  for (auto [on, word] :
       {std::pair{d.lineinfo(), "lineinfo (-lineinfo)"}, std::pair{d.device_debug(), "device-debug (-G)"},
        std::pair{d.verbose_log(), "verbose-log (ptxas' report kept in the log)"}})
    if (on) text += (text.empty() ? "" : ", ") + std::string(word);
  return text.empty() ? "none (the optimized default, no line info)" : "DEBUG COMPILE: " + text;
}

GeneratedFolder ReadGeneratedFolder(const v1::Manifest& manifest, bool local) {
  GeneratedFolder folder;
  folder.path = manifest.generated_dir();
  if (folder.path.empty()) {
    folder.note = "the manifest names no generated-sources folder";
    return folder;
  }
  std::error_code error;
  if (!fs::is_directory(folder.path, error)) {
    folder.note = local ? "REMOVED: the folder no longer exists (the manifest above still names every source "
                          "and its SHA-256; the next compile of this URI writes it again)"
                        : "not on this machine: the daemon is reached over TCP and the folder is on its node";
    return folder;
  }
  folder.exists = true;
  std::map<std::string, std::string> expected;  // name → sha256, of the sources the compile wrote here
  for (const auto& s : manifest.sources()) expected[s.name()] = s.sha256();
  std::set<std::string> seen;
  for (auto it = fs::recursive_directory_iterator(folder.path, error); !error && it != fs::end(it);
       it.increment(error)) {
    if (!it->is_regular_file(error)) continue;
    GeneratedFile file;
    file.name = fs::relative(it->path(), folder.path, error).string();
    file.size_bytes = it->file_size(error);
    std::ifstream in(it->path(), std::ios::binary);
    if (in) {
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (!in.bad()) file.sha256 = client::Sha256Hex(bytes);
    }
    auto want = expected.find(file.name);
    if (want == expected.end()) file.versus_manifest = "not in the manifest";
    else if (file.sha256.empty()) file.versus_manifest = "unreadable";
    else if (file.sha256 == want->second) file.versus_manifest = "same";
    else file.versus_manifest = "DIFFERS (rewritten since, e.g. by a compile after a kernels edit)";
    seen.insert(file.name);
    folder.files.push_back(std::move(file));
  }
  if (error) folder.note = "could not read the whole folder: " + error.message();
  std::sort(folder.files.begin(), folder.files.end(),
            [](const GeneratedFile& a, const GeneratedFile& b) { return a.name < b.name; });
  for (const auto& [name, sha] : expected) {
    if (seen.count(name)) continue;
    GeneratedFile file;
    file.name = name;
    file.versus_manifest = "missing";
    folder.files.push_back(std::move(file));
  }
  return folder;
}

void PrintEntryView(std::ostream& out, const EntryView& view) {
  const v1::CacheEntry& e = view.entry;
  const v1::Manifest& m = e.manifest();
  PrintTable(out, {
                      {"key", e.cache_key()},
                      {"uri", e.uri()},
                      {"op", e.op() + "  " + MapText(e.params())},
                      {"arch", e.arch()},
                      {"debug", DebugText(e.debug())},
                      {"cubin", HumanBytes(e.size_bytes()) + ", sha256 " + e.sha256()},
                      {"blob", e.blob_path()},
                      {"created", HumanTime(e.created()) + (e.job_id().empty() ? "" : " by job " + e.job_id()) +
                                      " in " + HumanMs(e.compile_ms())},
                      {"used", std::to_string(e.hit_count()) + " hits, last " + HumanTime(e.last_used())},
                      {"versions", ToolchainText(e.nvrtc_version(), e.nvjitlink_version(), e.cuda_headers_version(),
                                                 e.kiln_version(), e.format_version())},
                      {"launch", LaunchText(e.launch())},
                  });

  if (e.has_manifest()) {
    Section(out, "manifest",
            {{"options", Joined(m.options())},
             {"link options", Joined(m.link_options())},
             {"entries", Joined(m.entries())},
             {"arch", m.arch()},
             {"toolchain", ToolchainText(m.toolchain().nvrtc(), m.toolchain().nvjitlink(), m.toolchain().cuda_headers(),
                                         m.toolchain().kiln(), m.toolchain().cache_format())},
             {"kernels tree", "sha256 " + m.kernels_tree_sha256()}});
    std::vector<std::vector<std::string>> sources = {{"NAME", "ORIGIN", "SIZE", "SHA256", "PATH"}};
    for (const auto& s : m.sources())
      sources.push_back({s.name(), s.origin(), HumanBytes(s.size_bytes()), s.sha256(), s.path()});
    Section(out, "manifest sources", sources);
  } else {
    out << "\nmanifest: not kept with this entry (written by an older kilnd)\n";
  }

  const GeneratedFolder& g = view.generated;
  if (!g.exists) {
    out << "\ngenerated sources  " << (g.path.empty() ? "-" : g.path) << "\n  " << g.note << "\n";
  } else {
    std::vector<std::vector<std::string>> files = {{"FILE", "SIZE", "SHA256", "VS THE MANIFEST"}};
    for (const auto& f : g.files)
      files.push_back({f.name, f.versus_manifest == "missing" ? "-" : HumanBytes(f.size_bytes),
                       f.sha256.empty() ? "-" : f.sha256.substr(0, 16), f.versus_manifest});
    Section(out, "generated sources  " + g.path, files);
    if (!g.note.empty()) out << "  " << g.note << "\n";
  }

  std::vector<std::vector<std::string>> kernels = {
      {"KERNEL", "REGISTERS", "STATIC SMEM", "MAX DYN SMEM", "STACK", "SPILL STORE/LOAD", "CONST", "MAX THREADS"}};
  for (const auto& k : e.kernels()) {
    std::string spills = SpillsUnknown(e, k.name())
                             ? "unknown (no ptxas report)"
                             : Bytes(k.spill_store_bytes()) + " / " + Bytes(k.spill_load_bytes());
    if (k.spill_store_bytes() > 0 || k.spill_load_bytes() > 0) spills = "SPILLS " + spills;
    kernels.push_back({k.name(), std::to_string(k.registers()), Bytes(k.static_shared_bytes()),
                       Bytes(k.max_dynamic_shared_bytes()), Bytes(k.stack_bytes()), spills, Bytes(k.const_bytes()),
                       std::to_string(k.max_threads_per_block())});
  }
  Section(out, "kernels", kernels);

  if (view.job) {
    const v1::Job& j = *view.job;
    const v1::JobTimings& t = j.timings();
    std::vector<std::vector<std::string>> rows = {
        {"state", StateText(j.state())},
        {"created", HumanTime(j.created())},
        {"finished", HumanTime(j.finished())},
        {"timings", "total " + HumanMs(t.total_ms()) + " (queue " + HumanMs(t.queue_ms()) + ", lock " +
                        HumanMs(t.lock_ms()) + ", compile " + HumanMs(t.compile_ms()) + ", link " +
                        HumanMs(t.link_ms()) + ", commit " + HumanMs(t.commit_ms()) + ")"}};
    if (!j.error().empty()) rows.push_back({"error", j.error()});
    for (int i = 0; i < j.waiters_size(); ++i) rows.push_back({i == 0 ? "waiters" : "", j.waiters(i).client()});
    Section(out, "job " + j.id() + (j.daemon().empty() ? "" : " (daemon " + j.daemon() + ")"), rows);
  } else {
    out << "\njob " << (e.job_id().empty() ? "-" : e.job_id()) << "\n  " << view.job_note << "\n";
  }

  if (!e.compile_log().empty()) {
    PrintLog(out, "compile log (kept with the entry)", e.compile_log());
  } else if (view.job && !view.job->log().empty()) {
    PrintLog(out, "compile log (of the job)", view.job->log());
  } else {
    out << "\ncompile log: empty (NVRTC printed no warnings"
        << (e.debug().verbose_log() ? ")" : "; a --verbose-log request builds an entry that keeps ptxas' report)")
        << "\n";
  }
  out << std::flush;
}

nlohmann::json EntryViewJson(const EntryView& view) {
  nlohmann::json out = nlohmann::json::object();
  out["entry"] = ProtoJson(view.entry);
  nlohmann::json generated = {{"path", view.generated.path}, {"exists", view.generated.exists}};
  if (!view.generated.note.empty()) generated["note"] = view.generated.note;
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : view.generated.files) {
    nlohmann::json file = {{"name", f.name}, {"versusManifest", f.versus_manifest}};
    if (f.versus_manifest != "missing") {
      file["sizeBytes"] = f.size_bytes;
      file["sha256"] = f.sha256;
    }
    files.push_back(std::move(file));
  }
  generated["files"] = std::move(files);
  out["generated"] = std::move(generated);
  if (view.job) out["job"] = ProtoJson(*view.job);
  else out["jobNote"] = view.job_note;
  return out;
}

}  // namespace kiln::cli
