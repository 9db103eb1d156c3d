// TuningService against a real kilnd on a temp socket with a real SQLite store: round trips,
// replacement, environment mismatches, bad inputs, no store, kill -9 in the middle of writes,
// and the tactic blocklist (served; a bad line stops the daemon naming file:line).
#include <catch2/catch.hpp>

#include <sqlite3.h>

#include <atomic>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "kiln/v1/tuning.grpc.pb.h"
#include "tests/support/daemon_process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tuning_fixtures.h"

using kiln::testing::DaemonOptions;
using kiln::testing::DaemonProcess;
using kiln::testing::TempDir;
using kiln::testing::TestEnvironment;
using kiln::testing::TestRecord;
namespace v1 = kiln::v1;

namespace {

struct Tuning {
  explicit Tuning(const DaemonProcess& d) : stub(v1::TuningService::NewStub(d.channel())) {}
  std::unique_ptr<v1::TuningService::Stub> stub;

  grpc::Status Put(const v1::TuningRecord& record, bool* replaced = nullptr) {
    grpc::ClientContext c;
    v1::PutTuningRequest request;
    *request.mutable_record() = record;
    v1::PutTuningResponse reply;
    grpc::Status s = stub->PutTuning(&c, request, &reply);
    if (replaced != nullptr) *replaced = reply.replaced();
    return s;
  }
  grpc::Status Lookup(const std::string& bucket, const v1::TuningEnvironment& e, v1::TuningRecord* out,
                      std::string* mismatch = nullptr) {
    grpc::ClientContext c;
    v1::LookupTuningRequest request;
    request.set_op("gemm");
    request.set_bucket(bucket);
    *request.mutable_environment() = e;
    v1::LookupTuningResponse reply;
    grpc::Status s = stub->LookupTuning(&c, request, &reply);
    *out = reply.record();
    if (mismatch != nullptr) {
      auto it = c.GetServerTrailingMetadata().find("kiln-tuning-mismatch-bin");
      *mismatch = it == c.GetServerTrailingMetadata().end() ? "" : std::string(it->second.data(), it->second.size());
    }
    return s;
  }
  std::vector<v1::TuningRecord> List(const std::string& op = "") {
    grpc::ClientContext c;
    v1::ListTuningsRequest request;
    request.set_op(op);
    v1::ListTuningsResponse reply;
    grpc::Status s = stub->ListTunings(&c, request, &reply);
    INFO(s.error_message());
    REQUIRE(s.ok());
    return {reply.records().begin(), reply.records().end()};
  }
  grpc::Status Delete(const std::string& op, const std::string& bucket, bool all, uint64_t* deleted = nullptr) {
    grpc::ClientContext c;
    v1::DeleteTuningsRequest request;
    request.set_op(op);
    request.set_bucket(bucket);
    request.set_all(all);
    v1::DeleteTuningsResponse reply;
    grpc::Status s = stub->DeleteTunings(&c, request, &reply);
    if (deleted != nullptr) *deleted = reply.deleted();
    return s;
  }
  v1::TuningInfo Info() {
    grpc::ClientContext c;
    v1::TuningInfo info;
    REQUIRE(stub->GetTuningInfo(&c, v1::GetTuningInfoRequest(), &info).ok());
    return info;
  }
};

DaemonOptions WithStore(const TempDir& dir, std::vector<std::string> more = {}) {
  DaemonOptions o{.root = dir.path(), .extra_args = {"--tuning-store", dir / "tuning.db"}};
  o.extra_args.insert(o.extra_args.end(), more.begin(), more.end());
  return o;
}

}  // namespace

TEST_CASE("TuningService: put, lookup, replace, list and delete through a real kilnd", "[tuning][daemon]") {
  TempDir dir;
  DaemonProcess d(WithStore(dir));
  Tuning t(d);
  bool replaced = true;
  REQUIRE(t.Put(TestRecord("b1"), &replaced).ok());
  CHECK_FALSE(replaced);
  REQUIRE(t.Put(TestRecord("b1", TestEnvironment("NVIDIA H100 80GB HBM3"), "t128x128x64s7g8")).ok());
  REQUIRE(t.Put(TestRecord("b2")).ok());
  CHECK(t.Info().records() == 3);
  CHECK(t.Info().store_path() == dir / "tuning.db");

  v1::TuningRecord found;
  REQUIRE(t.Lookup("b1", TestEnvironment(), &found).ok());
  CHECK(found.tactic() == "t128x256x64s4g8");
  CHECK(found.environment().gpu_name() == "NVIDIA H200");
  CHECK(found.candidates_size() == 2);
  REQUIRE(t.Lookup("b1", TestEnvironment("NVIDIA H100 80GB HBM3"), &found).ok());
  CHECK(found.tactic() == "t128x128x64s7g8");

  // The same key again replaces the record.
  REQUIRE(t.Put(TestRecord("b1", TestEnvironment(), "t64x256x64s5g8", 399.0), &replaced).ok());
  CHECK(replaced);
  REQUIRE(t.Lookup("b1", TestEnvironment(), &found).ok());
  CHECK(found.tactic() == "t64x256x64s5g8");
  CHECK(found.median_us() == 399.0);
  CHECK(t.List().size() == 3);
  CHECK(t.List("gemm").size() == 3);
  CHECK(t.List("rmsnorm").empty());

  uint64_t deleted = 0;
  REQUIRE(t.Delete("gemm", "b2", false, &deleted).ok());
  CHECK(deleted == 1);
  CHECK(t.Lookup("b2", TestEnvironment(), &found).error_code() == grpc::StatusCode::NOT_FOUND);
  REQUIRE(t.Delete("", "", true, &deleted).ok());
  CHECK(deleted == 2);
  CHECK(t.List().empty());
}

TEST_CASE("TuningService: a record of another environment is not reused, NOT_FOUND says what differs",
          "[tuning][daemon]") {
  TempDir dir;
  DaemonProcess d(WithStore(dir));
  Tuning t(d);
  REQUIRE(t.Put(TestRecord("b1")).ok());
  v1::TuningEnvironment here = TestEnvironment();
  here.set_driver_version(12080);
  here.set_tactic_space_version(2);
  v1::TuningRecord found;
  std::string mismatch;
  grpc::Status s = t.Lookup("b1", here, &found, &mismatch);
  CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(s.error_message() ==
        "no tuning record of gemm for bucket b1 in this environment; 1 record under another environment: "
        "driver_version: stored 13000, here 12080, tactic_space_version: stored 1, here 2");
  CHECK(mismatch ==
        "1 record under another environment: driver_version: stored 13000, here 12080, tactic_space_version: "
        "stored 1, here 2");
  // No record of the bucket at all: NOT_FOUND without an explanation.
  s = t.Lookup("b9", here, &found, &mismatch);
  CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(s.error_message() == "no tuning record of gemm for bucket b9 in this environment");
  CHECK(mismatch.empty());
}

TEST_CASE("TuningService: bad inputs are INVALID_ARGUMENT naming the field", "[tuning][daemon]") {
  TempDir dir;
  DaemonProcess d(WithStore(dir));
  Tuning t(d);
  auto put_after = [&](auto edit) {
    v1::TuningRecord r = TestRecord("b1");
    edit(r);
    return t.Put(r);
  };
  grpc::Status s = put_after([](auto& r) { r.set_op(""); });
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message() == "record.op '' is empty; expected an op name: 1 to 64 of a-z, 0-9 and _, e.g. gemm");
  s = put_after([](auto& r) { r.set_tactic("t128 x256"); });
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(s.error_message(), Catch::StartsWith("record.tactic 't128 x256' has the character ' '"));
  s = put_after([](auto& r) { r.mutable_environment()->set_sm_count(0); });
  CHECK(s.error_message() == "record.environment.sm_count 0 must be positive (is it set?)");
  s = put_after([](auto& r) {
    r.mutable_environment()->GetReflection()->MutableUnknownFields(r.mutable_environment())->AddVarint(99, 1);
  });
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message() ==
        "request.record.environment: unknown field number 99 in kiln.v1.TuningEnvironment (written by a newer "
        "Kiln? this one cannot keep it)");
  {
    grpc::ClientContext c;
    v1::PutTuningResponse reply;
    s = t.stub->PutTuning(&c, v1::PutTuningRequest(), &reply);
    CHECK(s.error_message() == "record is missing");
  }
  v1::TuningRecord found;
  s = t.Lookup("b 1", TestEnvironment(), &found);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(s.error_message(), Catch::StartsWith("bucket 'b 1' has the character ' '"));
  s = t.Lookup("b1", v1::TuningEnvironment(), &found);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message() == "environment.gpu_name '' must be the device's name, 1 to 256 characters");
  s = t.Delete("", "", false);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message() == "name what to delete: op (and optionally bucket), or set all: true to empty the store");
  s = t.Delete("gemm", "", true);
  CHECK(s.error_message() == "all: true cannot be combined with op or bucket");
  s = t.Delete("GEMM", "", false);
  CHECK_THAT(s.error_message(), Catch::StartsWith("op 'GEMM' has the character 'G'"));
  CHECK(t.List().empty());  // nothing bad was kept
}

TEST_CASE("TuningService: without --tuning-store the store RPCs are FAILED_PRECONDITION", "[tuning][daemon]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  Tuning t(d);
  grpc::Status s = t.Put(TestRecord("b1"));
  CHECK(s.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK_THAT(s.error_message(), Catch::StartsWith("this daemon runs without a tuning store (kilnd --tuning-store"));
  v1::TuningRecord found;
  CHECK(t.Lookup("b1", TestEnvironment(), &found).error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(t.Delete("", "", true).error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  {
    grpc::ClientContext c;
    v1::ListTuningsResponse reply;
    CHECK(t.stub->ListTunings(&c, v1::ListTuningsRequest(), &reply).error_code() ==
          grpc::StatusCode::FAILED_PRECONDITION);
  }
  // What a client asks first still answers: no store, the daemon's NVRTC.
  v1::TuningInfo info = t.Info();
  CHECK(info.store_path().empty());
  CHECK_FALSE(info.nvrtc_version().empty());
  CHECK(info.kiln_version() == KILN_TEST_VERSION);
}

TEST_CASE("TuningService: kill -9 while records are written leaves a valid store with every acknowledged one",
          "[tuning][daemon]") {
  TempDir dir;
  std::atomic<int> acknowledged{0};
  {
    DaemonProcess d(WithStore(dir));
    std::atomic<bool> stop{false};
    std::thread writer([&] {
      Tuning t(d);
      for (int i = 0; !stop; ++i) {
        if (!t.Put(TestRecord("m" + std::to_string(i))).ok()) break;
        acknowledged = i + 1;
      }
    });
    while (acknowledged < 20) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    d.Kill9();
    stop = true;
    writer.join();
  }
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open((dir / "tuning.db").c_str(), &db) == SQLITE_OK);
  sqlite3_stmt* check = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &check, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(check) == SQLITE_ROW);
  CHECK(std::string(reinterpret_cast<const char*>(sqlite3_column_text(check, 0))) == "ok");
  sqlite3_finalize(check);
  sqlite3_close(db);

  DaemonProcess again(WithStore(dir));
  Tuning t(again);
  const auto records = t.List("gemm");
  CHECK(records.size() >= static_cast<size_t>(acknowledged.load()));
  for (int i = 0; i < acknowledged; ++i) {
    v1::TuningRecord found;
    INFO("bucket m" << i);
    CHECK(t.Lookup("m" + std::to_string(i), TestEnvironment(), &found).ok());
  }
}

TEST_CASE("kilnd --tactic-blocklist: ListBlockedTactics serves it, a bad line stops kilnd naming file:line",
          "[tuning][daemon]") {
  TempDir dir;
  kiln::testing::WriteFile(dir / "blocklist",
                           "# hangs with driver 580\ngemm t128x256x64s4g8 gpu=H200\ngemm t64x64x64s8g8\n");
  {
    DaemonProcess d({.root = dir / "a", .extra_args = {"--tactic-blocklist", dir / "blocklist"}});
    Tuning t(d);
    grpc::ClientContext c;
    v1::ListBlockedTacticsResponse reply;
    REQUIRE(t.stub->ListBlockedTactics(&c, v1::ListBlockedTacticsRequest(), &reply).ok());
    CHECK(reply.blocklist_path() == dir / "blocklist");
    REQUIRE(reply.blocked_size() == 2);
    CHECK(reply.blocked(0).tactic() == "t128x256x64s4g8");
    CHECK(reply.blocked(0).gpu() == "H200");
    CHECK(reply.blocked(0).source() == dir / "blocklist:2");
    CHECK(reply.blocked(1).gpu().empty());
    CHECK(t.Info().blocked() == 2);
  }
  kiln::testing::WriteFile(dir / "bad", "gemm t128x256x64s4g8\n\ngemm t128x256x64s4g8 gpu=H200 driver=new\n");
  DaemonProcess bad({.root = dir / "b", .extra_args = {"--tactic-blocklist", dir / "bad"}, .wait_ready = false});
  auto code = bad.process().Wait(std::chrono::seconds(30));
  REQUIRE(code.has_value());
  CHECK(*code == 2);
  CHECK_THAT(bad.Log(), Catch::Contains("kilnd: --tactic-blocklist " + (dir / "bad") +
                                        ":3: 'gemm t128x256x64s4g8 gpu=H200 driver=new': driver=new: expected"));
}
