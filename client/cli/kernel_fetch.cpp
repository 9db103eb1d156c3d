#include "client/cli/kernel_fetch.h"

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <ostream>

#include "client/cli/output.h"
#include "client/core/driver/cuda_driver.h"
#include "client/core/driver/devices.h"
#include "client/core/loader/loader_log.h"
#include "client/core/rpc/client_identity.h"
#include "client/core/rpc/cubin_fetch.h"

namespace kiln::cli {
namespace {

// The arch of the local GPU 0, for when --arch is not given.
std::string LocalArch() {
  auto driver = client::CudaDriver::Get();
  if (!driver.ok())
    throw UsageError("no --arch given, and no GPU here to take it from (" + driver.status().message() +
                     "); pass one, e.g. --arch sm_90");
  auto device = client::DescribeDevice(**driver, 0);
  if (!device.ok())
    throw UsageError("no --arch given, and no GPU here to take it from (" + device.status().message() +
                     "); pass one, e.g. --arch sm_90");
  return device->arch();
}

std::string OriginText(const v1::GetKernelResponse& r) {
  switch (r.origin()) {
    case v1::ORIGIN_MEMORY: return "memory (the daemon's in-memory cache)";
    case v1::ORIGIN_DISK: return "disk (the on-disk cache)";
    case v1::ORIGIN_PREBUILT: return "prebuilt bundle";
    case v1::ORIGIN_REPOSITORY: return "artifact repository";
    case v1::ORIGIN_REMOTE: return "remote cache";
    case v1::ORIGIN_COMPILED: return "compiled" + (r.job_id().empty() ? std::string() : " (job " + r.job_id() + ")");
    default: return v1::Origin_Name(r.origin());
  }
}

std::string TimingsText(const v1::Timings& t) {
  std::string parts;
  auto add = [&parts](const char* name, double ms) {
    if (ms <= 0) return;
    parts += (parts.empty() ? "" : ", ") + std::string(name) + " " + HumanMs(ms);
  };
  add("spec", t.spec_ms());
  add("key", t.key_ms());
  add("lookup", t.lookup_ms());
  add("queue", t.queue_ms());
  add("lock", t.lock_ms());
  add("compile", t.compile_ms());
  add("link", t.link_ms());
  add("commit", t.commit_ms());
  return "total " + HumanMs(t.total_ms()) + (parts.empty() ? "" : " (" + parts + ")");
}

std::string KernelText(const v1::KernelAttributes& k) {
  std::string s = k.name() + ": " + std::to_string(k.registers()) + " registers, " +
                  HumanBytes(static_cast<uint64_t>(k.static_shared_bytes())) + " static smem";
  if (k.max_threads_per_block() > 0) s += ", up to " + std::to_string(k.max_threads_per_block()) + " threads/block";
  if (k.max_dynamic_shared_bytes() > 0)
    s += ", up to " + HumanBytes(static_cast<uint64_t>(k.max_dynamic_shared_bytes())) + " dynamic smem";
  s += ", " + std::to_string(k.stack_bytes()) + " B stack";
  if (k.spill_store_bytes() > 0 || k.spill_load_bytes() > 0)
    s += ", SPILLS " + std::to_string(k.spill_store_bytes()) + " B stored / " + std::to_string(k.spill_load_bytes()) +
         " B loaded";
  else s += ", no spills";
  return s;
}

void PrintHuman(std::ostream& out, const client::FetchedCubin& f, const std::string& written) {
  const v1::GetKernelResponse& r = f.reply;
  std::vector<std::vector<std::string>> rows = {
      {"uri", r.uri()},
      {"key", r.cache_key()},
      {"arch", r.arch()},
      {"origin", OriginText(r)},
      {"cubin", HumanBytes(f.cubin.size()) + ", sha256 " + r.sha256() + " (verified)"},
  };
  if (!f.blob_path.empty()) rows.push_back({"blob", f.blob_path});
  if (!written.empty()) rows.push_back({"written", written});
  rows.push_back({"timings", TimingsText(r.timings())});
  rows.push_back({"params", MapText(r.params())});
  rows.push_back({"launch", LaunchText(r.launch())});
  for (int i = 0; i < r.kernels_size(); ++i) rows.push_back({i == 0 ? "kernels" : "", KernelText(r.kernels(i))});
  PrintTable(out, rows);
}

}  // namespace

std::vector<OptionSpec> KernelFetchOptions() {
  return {
      {"--arch", "ARCH",
       "target arch: sm_90 for an H100/H200 (what its clients ask for), sm_80 for an A100, sm_90a for Hopper-only code "
       "(default: the local GPU 0's)"},
      {"--json", "", "print the daemon's reply as proto3 JSON (cacheKey, jobId; less the cubin bytes)"},
      {"--out", "FILE", "write the cubin to FILE"},
      {"--lineinfo", "", "compile with -lineinfo (a separate cache entry)"},
      {"--device-debug", "", "compile with -G for cuda-gdb (a separate cache entry)"},
      {"--verbose-log", "", "keep ptxas' verbose report in the compile log (a separate cache entry; see kiln inspect)"},
  };
}

int FetchAndReport(Invocation& inv, v1::GetKernelRequest request) {
  request.mutable_target()->set_arch(inv.Has("--arch") ? inv.Get("--arch") : LocalArch());
  if (inv.Has("--lineinfo")) request.mutable_debug()->set_lineinfo(true);
  if (inv.Has("--device-debug")) request.mutable_debug()->set_device_debug(true);
  if (inv.Has("--verbose-log")) request.mutable_debug()->set_verbose_log(true);

  client::FetchOptions options;
  options.timeout = inv.timeout;
  options.prefer_blob_path = true;
  options.client_id = "kiln-cli:" + client::DefaultClientId();
  const auto start = std::chrono::steady_clock::now();
  auto fetched = client::FetchCubin(inv.Connection(), request, options);
  if (!fetched.ok()) {
    client::LogFetchFailure(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(),
                            fetched.status());
    return inv.Fail(fetched.status());
  }
  client::LogFetch(client::LoaderEvent::kFetched, request, *fetched, 0);

  std::string written;
  if (inv.Has("--out")) {
    const std::string path = inv.Get("--out");
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file.write(fetched->cubin.data(), static_cast<std::streamsize>(fetched->cubin.size()));
    file.close();
    if (!file) {
      inv.err << "kiln " << inv.spec().path << ": cannot write the cubin to " << path << std::endl;
      return kExitUsage;
    }
    written = path;
  }
  if (inv.Has("--json")) {
    inv.out << ToJson(fetched->reply) << std::endl;
  } else {
    PrintHuman(inv.out, *fetched, written);
  }
  return kExitOk;
}

}  // namespace kiln::cli
