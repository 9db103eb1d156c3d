#include "tests/support/daemon_process.h"

#include <signal.h>

#include <cstdlib>
#include <stdexcept>
#include <thread>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <mutex>

namespace kiln::testing {

namespace {
std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' ? v : fallback;
}
}  // namespace

std::string KilndPath() { return EnvOr("KILN_TEST_KILND", std::string(KILN_TEST_BINARY_DIR) + "/server/kilnd"); }
std::string KilnCliPath() { return EnvOr("KILN_TEST_CLI", std::string(KILN_TEST_BINARY_DIR) + "/client/kiln"); }
std::string DiagChildPath() {
  return EnvOr("KILN_TEST_DIAG_CHILD", std::string(KILN_TEST_BINARY_DIR) + "/tests/client/kiln_diag_child");
}
std::string EmbeddedChildPath() {
  return EnvOr("KILN_TEST_EMBEDDED_CHILD", std::string(KILN_TEST_BINARY_DIR) + "/tests/client/kiln_embedded_child");
}
std::string KernelsDir() { return EnvOr("KILN_TEST_KERNELS_DIR", KILN_TEST_KERNELS_DIR); }

DaemonProcess::DaemonProcess(DaemonOptions options) : options_(std::move(options)) {
  if (options_.root.empty() && (options_.socket.empty() || options_.cache_dir.empty()))
    throw std::runtime_error("DaemonProcess: give a root folder or every path");
  if (options_.socket.empty()) options_.socket = options_.root + "/run/kilnd.sock";
  if (options_.cache_dir.empty()) options_.cache_dir = options_.root + "/cache";
  if (options_.gen_dir.empty()) options_.gen_dir = options_.root + "/gen";
  if (options_.kernels_dir.empty()) options_.kernels_dir = KernelsDir();

  SubprocessOptions p;
  p.argv = {KilndPath(), "--socket",       options_.socket, "--cache-dir",       options_.cache_dir,
            "--gen-dir", options_.gen_dir, "--kernels-dir", options_.kernels_dir};
  for (const auto& a : options_.extra_args) p.argv.push_back(a);
  p.set_env = options_.env;
  p.unset_env = options_.unset_env;
  // The daemon must not pick up the developer's own settings.
  for (const char* name :
       {"KILN_SOCKET", "KILN_CACHE_DIR", "KILN_GEN_DIR", "KILN_KERNELS_DIR", "KILN_DISABLE_JIT", "KILN_NO_CACHE",
        "KILN_ARCH_LIST", "KILN_LISTEN", "KILN_INSECURE", "KILN_TLS_CERT", "KILN_TLS_KEY", "KILN_TLS_CLIENT_CA"}) {
    if (!p.set_env.count(name)) p.unset_env.push_back(name);
  }
  p.run_as_uid = options_.run_as_uid;
  process_ = std::make_unique<Subprocess>(std::move(p));
  if (options_.wait_ready && !WaitReady(options_.ready_timeout))
    throw std::runtime_error("kilnd did not become ready; its log:\n" + Log());
}

DaemonProcess::~DaemonProcess() {
  if (process_->running()) Terminate(std::chrono::seconds(10));
}

std::shared_ptr<grpc::Channel> DaemonProcess::channel() const {
  return grpc::CreateChannel(target(), grpc::InsecureChannelCredentials());
}

bool DaemonProcess::WaitReady(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto ch = channel();
  auto stub = grpc::GenericStub(ch);
  while (std::chrono::steady_clock::now() < deadline) {
    if (!process_->running()) return false;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    // grpc.health.v1.HealthCheckRequest with an empty service name is an empty message;
    // the reply {status: SERVING} is field 1 varint 1.
    grpc::ByteBuffer request, reply;
    grpc::Slice empty("");
    request = grpc::ByteBuffer(&empty, 1);
    grpc::Status status;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &reply, [&](grpc::Status s) {
      std::lock_guard<std::mutex> lock(mu);
      status = s;
      done = true;
      cv.notify_one();
    });
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return done; });
    }
    if (status.ok()) {
      std::vector<grpc::Slice> slices;
      reply.Dump(&slices);
      std::string bytes;
      for (auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
      if (bytes == std::string("\x08\x01", 2)) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

void DaemonProcess::Kill9() {
  process_->Signal(SIGKILL);
  process_->Wait(std::chrono::seconds(10));
}

int DaemonProcess::Terminate(std::chrono::milliseconds timeout) {
  process_->Signal(SIGTERM);
  auto code = process_->Wait(timeout);
  if (!code.has_value()) {
    process_->Signal(SIGKILL);
    code = process_->Wait(std::chrono::seconds(10));
  }
  return code.value_or(-1);
}

RunResult RunCli(const DaemonProcess& daemon, std::vector<std::string> args, std::chrono::milliseconds timeout) {
  SubprocessOptions p;
  p.argv = {KilnCliPath(), "--socket", daemon.socket()};
  for (auto& a : args) p.argv.push_back(std::move(a));
  return Run(p, timeout);
}

}  // namespace kiln::testing
