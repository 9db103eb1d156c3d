// Level-10 call dumps (client/diag/call_dump.h) and the safetensors files they are made of,
// read back by an independent reader (tests/client/diag/read_safetensors.py: Python's json and
// struct, no Kiln code); the dump limits and op filters, a process killed mid-call, and
// `kiln replay` where it needs no GPU (--no-run, refusals and their exit codes). The calls
// are kiln_diag_child's host calls: the real trace path around a body that computes on the
// host (no GPU here; tests/client/diag/gpu_call_log_test.cpp dumps and replays real ops).
#include <catch2/catch.hpp>

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "client/diag/dumped_call.h"
#include "client/diag/safetensors.h"
#include "client/diag/tensor_copy.h"
#include "tests/client/diag/diag_test_support.h"
#include "tests/support/daemon_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace {

using Json = nlohmann::json;
using kiln::DType;
using kiln::TensorView;
using kiln::testing::RunResult;
using kiln::testing::TempDir;

kiln::testing::SubprocessOptions ChildOptions(std::vector<std::string> args, std::map<std::string, std::string> env) {
  env["CUDA_VISIBLE_DEVICES"] = "";  // the host calls need no GPU, and must not find one
  return kiln::testing::DiagChildOptions(std::move(args), std::move(env));
}

RunResult Child(std::vector<std::string> args, std::map<std::string, std::string> env) {
  return kiln::testing::Run(ChildOptions(std::move(args), std::move(env)), std::chrono::seconds(60));
}

RunResult Replay(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  return kiln::testing::Run(kiln::testing::ReplayOptions({}, std::move(args), std::move(env)),
                            std::chrono::seconds(60));
}

std::vector<std::string> Folders(const std::string& dir) { return kiln::testing::FolderEntries(dir); }

int Mode(const std::string& path) {
  struct stat st = {};
  REQUIRE(stat(path.c_str(), &st) == 0);
  return st.st_mode & 0777;
}

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

size_t Count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// python3 from PATH (deploy/install-deps.sh installs it for CI).
std::string Python3() {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  for (size_t start = 0; start <= dirs.size();) {
    size_t colon = dirs.find(':', start);
    if (colon == std::string::npos) colon = dirs.size();
    const std::string candidate = dirs.substr(start, colon - start) + "/python3";
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    start = colon + 1;
  }
  FAIL("python3 is not on PATH; the dump tests read safetensors files with it (deploy/install-deps.sh)");
  return "";
}

// The file as the independent Python reader sees it.
Json ReadWithPython(const std::string& path) {
  kiln::testing::SubprocessOptions p;
  p.argv = {Python3(), std::string(KILN_TEST_SOURCE_DIR) + "/tests/client/diag/read_safetensors.py", path};
  const RunResult r = kiln::testing::Run(std::move(p), std::chrono::seconds(60));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return Json::parse(r.output);
}

Json ReadJson(const std::string& path) { return Json::parse(kiln::testing::ReadFile(path)); }

// What kiln_diag_child's host call of round r holds (see diag_child.cpp).
std::vector<double> InputValues(int round) {
  std::vector<double> v;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) v.push_back(round * 100 + i * 10 + j);
  return v;
}

std::vector<double> Values(const Json& tensor) { return tensor.at("values").get<std::vector<double>>(); }

TEST_CASE("safetensors: strided views are written dense and read back by Kiln and by Python", "[client][diag]") {
  TempDir dir;
  // A [3, 2] view with strides [4, 2] of 12 floats, and a bf16 vector.
  std::vector<float> base(12);
  for (int i = 0; i < 12; ++i) base[static_cast<size_t>(i)] = 0.5f * static_cast<float>(i) - 1.f;
  const TensorView view = TensorView::Strided(base.data(), DType::kFloat32, {3, 2}, {4, 2}, kiln::Device::CPU());
  auto dense = kiln::client::diag::ReadTensor(view, nullptr);
  REQUIRE(dense.ok());
  const uint16_t bf16[3] = {0x3F80, 0xC040, 0x0000};  // 1, -3, 0
  std::vector<uint8_t> bf_bytes(6);
  std::memcpy(bf_bytes.data(), bf16, 6);
  const std::string path = dir / "t.safetensors";
  {
    auto w = kiln::client::diag::SafetensorsWriter::Create(
        path, {{"view", DType::kFloat32, {3, 2}}, {"b", DType::kBFloat16, {3}}, {"empty", DType::kInt64, {0, 5}}},
        {{"view.strides", "[4,2]"}});
    REQUIRE(w.ok());
    REQUIRE(w->Append(*dense).ok());
    REQUIRE(w->Append(bf_bytes).ok());
    REQUIRE(w->Append({}).ok());
    CHECK(access(path.c_str(), F_OK) != 0);  // nothing at the final name before the commit
    REQUIRE(w->Commit().ok());
  }
  const Json py = ReadWithPython(path);
  CHECK(py["metadata"]["view.strides"] == "[4,2]");
  CHECK(py["tensors"]["view"]["dtype"] == "F32");
  CHECK(py["tensors"]["view"]["shape"] == Json::array({3, 2}));
  CHECK(Values(py["tensors"]["view"]) == std::vector<double>{-1, 0, 1, 2, 3, 4});
  CHECK(Values(py["tensors"]["b"]) == std::vector<double>{1, -3, 0});
  CHECK(py["tensors"]["empty"]["shape"] == Json::array({0, 5}));

  auto back = kiln::client::diag::ReadSafetensors(path);
  REQUIRE(back.ok());
  REQUIRE(back->tensors.size() == 3);
  CHECK(back->Find("view")->bytes == *dense);
  CHECK(back->Find("b")->dtype == DType::kBFloat16);
  // A damaged header is refused with the reason.
  std::string bytes = kiln::testing::ReadFile(path);
  bytes[0] = static_cast<char>(0xFF);
  kiln::testing::WriteFile(dir / "bad.safetensors", bytes);
  auto bad = kiln::client::diag::ReadSafetensors(dir / "bad.safetensors");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == kiln::StatusCode::kDataLoss);
  // Scatter is Gather's inverse.
  std::vector<uint8_t> image(12 * 4, 0);
  kiln::client::diag::ScatterInto(view, *dense, 0, &image);
  CHECK(kiln::client::diag::GatherFrom(view, image.data(), 0) == *dense);
}

TEST_CASE("level 10 dumps each call: 0700 folders, meta.json, inputs and outputs in safetensors", "[client][diag]") {
  TempDir dir;
  const std::string root = dir / "dumps/nested";  // made, with every missing parent, 0700
  auto r = Child({"host-calls", "2", "double_op"},
                 {{"KILN_LOGLEVEL", "10"}, {"KILN_DUMP_DIR", root}, {"KILN_LOGDEST", dir / "log-%p.txt"}});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(Mode(dir / "dumps") == 0700);
  CHECK(Mode(root) == 0700);
  const auto folders = Folders(root);
  REQUIRE(folders.size() == 2);
  for (int round = 0; round < 2; ++round) {
    const std::string folder = root + "/" + folders[static_cast<size_t>(round)];
    INFO(folder);
    CHECK(folders[static_cast<size_t>(round)].rfind("00000" + std::to_string(round + 1) + "_", 0) == 0);
    CHECK(Has(folders[static_cast<size_t>(round)], "_double_op"));
    CHECK(Mode(folder) == 0700);
    const Json meta = ReadJson(folder + "/meta.json");
    CHECK(meta["format"] == "kiln-call-dump/1");
    CHECK(meta["status"] == "completed");
    CHECK(meta["result"]["code"] == "OK");
    CHECK(meta["op"] == "double_op");
    CHECK(meta["api"] == "host::double_op");
    CHECK(meta["params"]["scale"] == "2");
    CHECK(meta["params"]["round"] == std::to_string(round));
    CHECK(meta["device"]["name"] == "cpu");
    CHECK(meta["pid"].get<int64_t>() > 0);
    CHECK(meta["tid"].get<int64_t>() > 0);
    CHECK(meta["time"].get<std::string>().size() == 24);
    REQUIRE(meta["kernels"].size() == 1);
    CHECK(meta["kernels"][0]["entry"] == "host_double");
    CHECK(meta["kernels"][0]["grid"] == Json::array({3, 1, 1}));
    REQUIRE(meta["tensors"].size() == 4);
    CHECK(meta["tensors"][1]["name"] == "input");
    CHECK(meta["tensors"][1]["strides"] == Json::array({8, 2}));
    CHECK(meta["environment"]["KILN_LOGLEVEL"] == "10");

    const Json in = ReadWithPython(folder + "/inputs.safetensors");
    CHECK(in["tensors"].size() == 3);  // input, weight, index: not the output
    CHECK(in["tensors"]["input"]["shape"] == Json::array({3, 4}));
    CHECK(Values(in["tensors"]["input"]) == InputValues(round));  // gathered from the strided view
    CHECK(in["metadata"]["input.strides"] == "[8,2]");
    CHECK(in["metadata"]["input.role"] == "input");
    CHECK(in["metadata"]["kiln.op"] == "double_op");
    CHECK(Values(in["tensors"]["weight"]) == std::vector<double>{1.5, -2, 0.25, 3});
    CHECK(in["tensors"]["index"]["dtype"] == "I32");
    CHECK(Values(in["tensors"]["index"]) == std::vector<double>{7, -1, 42});
    const Json out = ReadWithPython(folder + "/outputs.safetensors");
    REQUIRE(out["tensors"].size() == 1);
    std::vector<double> doubled = InputValues(round);
    for (double& v : doubled) v *= 2;
    CHECK(Values(out["tensors"]["out"]) == doubled);
  }
  std::string log;
  for (const auto& f : Folders(dir.path()))
    if (f.rfind("log-", 0) == 0) log = kiln::testing::ReadFile(dir / f);
  INFO(log);
  CHECK(Count(log, ": inputs written\n") == 2);
  CHECK(Count(log, ": outputs written, call completed\n") == 2);
  CHECK(
      Has(log, "[kiln api #1]   kernel: uri=- key=- arch=- entry=host_double grid=(3, 1, 1) block=(4, 1, 1) smem=0\n"));
  CHECK(Has(log, "[kiln api #2] -> OK\n"));
}

TEST_CASE("dump limits stop dumping and say so once, and filters choose the ops", "[client][diag]") {
  TempDir dir;
  {  // at most 2 calls
    const std::string root = dir / "count";
    auto r = Child({"host-calls", "5", "a_op"},
                   {{"KILN_LOGLEVEL", "10"}, {"KILN_DUMP_DIR", root}, {"KILN_DUMP_MAX_COUNT", "2"}});
    INFO(r.output);
    CHECK(Folders(root).size() == 2);
    CHECK(Count(r.output, "dumps stopped: KILN_DUMP_MAX_COUNT=2 calls dumped; no later call is dumped") == 1);
    CHECK(Count(r.output, "a_op: OK") == 5);  // the calls themselves go on
  }
  {  // every host call dumps 3*4*4 + 4*2 + 3*4 (inputs) + 3*4*4 (output) = 116 bytes: 3 fit in 400
    const std::string root = dir / "bytes";
    auto r = Child({"host-calls", "5", "a_op"},
                   {{"KILN_LOGLEVEL", "10"}, {"KILN_DUMP_DIR", root}, {"KILN_DUMP_MAX_BYTES", "400"}});
    INFO(r.output);
    CHECK(Folders(root).size() == 3);
    CHECK(Count(r.output,
                "dumps stopped: this call's 116 B of tensors would pass KILN_DUMP_MAX_BYTES=400 (348 B written)") == 1);
  }
  {  // include and exclude globs, on either name
    const std::string root = dir / "filter";
    auto r = Child({"host-calls", "1", "norm_a", "norm_b", "decode_c", "other"},
                   {{"KILN_LOGLEVEL", "10"},
                    {"KILN_DUMP_DIR", root},
                    {"KILN_DUMP_INCLUDE", "norm_*,host::decode*"},
                    {"KILN_DUMP_EXCLUDE", "*_b"}});
    INFO(r.output);
    const auto folders = Folders(root);
    REQUIRE(folders.size() == 2);
    CHECK(Has(folders[0], "_norm_a"));
    CHECK(Has(folders[1], "_decode_c"));
    // Every call is still logged by name; the filter gates statistics and dumps only.
    for (const char* api : {"host::norm_a", "host::norm_b", "host::decode_c", "host::other"}) CHECK(Has(r.output, api));
    CHECK(Count(r.output, "stats input: skipped (host memory)") == 2);
  }
  {  // level 10 without KILN_DUMP_DIR: said once, logged as level 5
    auto r = Child({"host-calls", "3", "a_op"}, {{"KILN_LOGLEVEL", "10"}});
    INFO(r.output);
    CHECK(Count(r.output, "asks for dumps, but KILN_DUMP_DIR is not set: calls are logged as at level 5") == 1);
    CHECK(Count(r.output, "stats input: skipped (host memory)") == 3);
  }
}

TEST_CASE("a process killed mid-call leaves its inputs and a meta.json that says started", "[client][diag]") {
  TempDir dir;
  const std::string root = dir / "dumps";
  // The test hook holds the call between the input dump and the launch for a minute.
  kiln::testing::Subprocess child(
      ChildOptions({"host-calls", "1", "crash_op"},
                   {{"KILN_LOGLEVEL", "10"}, {"KILN_DUMP_DIR", root}, {"KILN_DUMP_TEST_PAUSE_MS", "60000"}}));
  std::string folder;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    const auto folders = Folders(root);
    if (folders.size() == 1 && access((root + "/" + folders[0] + "/inputs.safetensors").c_str(), F_OK) == 0) {
      folder = root + "/" + folders[0];
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  REQUIRE_FALSE(folder.empty());
  child.Signal(SIGKILL);
  CHECK(child.Wait(std::chrono::seconds(10)) == 128 + SIGKILL);

  const Json meta = ReadJson(folder + "/meta.json");
  CHECK(meta["status"] == "started");
  CHECK_FALSE(meta.contains("result"));
  CHECK(access((folder + "/outputs.safetensors").c_str(), F_OK) != 0);
  const Json in = ReadWithPython(folder + "/inputs.safetensors");
  CHECK(Values(in["tensors"]["input"]) == InputValues(0));
  CHECK(Values(in["tensors"]["index"]) == std::vector<double>{7, -1, 42});

  // kiln replay reads it and says the call never completed (no GPU needed for --no-run).
  auto r = Replay({folder, "--no-run"});
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(Has(r.output, "status    started"));
  CHECK(Has(r.output, "op        crash_op (called as host::crash_op)"));
  CHECK(Has(r.output, "the call never completed (status 'started'): no outputs were recorded"));
}

TEST_CASE("kiln replay prints the reproduction of a dump and refuses what it cannot run", "[client][diag][cli]") {
  TempDir dir;
  const std::string root = dir / "dumps";
  auto made = Child({"host-calls", "1", "rms_norm", "all_reduce"}, {{"KILN_LOGLEVEL", "10"}, {"KILN_DUMP_DIR", root}});
  INFO(made.output);
  const auto folders = Folders(root);
  REQUIRE(folders.size() == 2);
  const std::string norm = root + "/" + folders[0], reduce = root + "/" + folders[1];

  auto r = Replay({norm, "--no-run"});
  INFO(r.output);
  CHECK(r.exit_code == 0);
  for (const char* line : {"status    completed (call #1 of pid ", "op        rms_norm (called as host::rms_norm)",
                           "params    scale=2 round=0", "tensors   out: output fp32[3, 4] strides [4, 1] cpu align ",
                           "          input: input fp32[3, 4] strides [8, 2] cpu align ",
                           "kernels   - key - arch - entry host_double grid (3, 1, 1) block (4, 1, 1) smem 0",
                           "env       KILN_DUMP_DIR=", "result    OK", "not run (--no-run)"})
    CHECK(Has(r.output, line));

  auto j = Replay({norm, "--no-run", "--json"});
  INFO(j.output);
  CHECK(j.exit_code == 0);
  const Json report = Json::parse(j.output);
  CHECK(report["recorded"]["op"] == "rms_norm");
  CHECK(report["recorded"]["tensors"][1]["strides"] == Json::array({8, 2}));
  CHECK(report["verdict"] == "not run (--no-run)");

  // No GPU: a clear error and exit 2 (CUDA_VISIBLE_DEVICES hides any).
  auto no_gpu = Replay({norm}, {{"CUDA_VISIBLE_DEVICES", ""}});
  INFO(no_gpu.output);
  CHECK(no_gpu.exit_code == 2);
  CHECK(Has(no_gpu.output, "kiln replay: needs a GPU to run the call: "));
  // A collective: exit 1, saying why.
  auto collective = Replay({reduce});
  INFO(collective.output);
  CHECK(collective.exit_code == 1);
  CHECK(Has(collective.output, "all_reduce is a collective"));
  // Not a dump: exit 2.
  auto missing = Replay({dir / "nothing-here"});
  CHECK(missing.exit_code == 2);
  CHECK(Has(missing.output, "is not a call dump: cannot read"));
  REQUIRE(mkdir((dir / "fake").c_str(), 0700) == 0);
  kiln::testing::WriteFile(dir / "fake/meta.json", "{\"format\": \"something-else\"}");
  auto other = Replay({dir / "fake", "--no-run"});
  CHECK(other.exit_code == 2);
  CHECK(Has(other.output, "is not kiln-call-dump/1"));
  // The reader behind replay sees the same call.
  auto dumped = kiln::client::diag::ReadDumpedCall(norm);
  REQUIRE(dumped.ok());
  CHECK(dumped->tensors.size() == 4);
  CHECK(dumped->inputs->Find("input") != nullptr);
  CHECK(dumped->outputs->Find("out") != nullptr);
  CHECK(dumped->kernels.size() == 1);
}

}  // namespace
