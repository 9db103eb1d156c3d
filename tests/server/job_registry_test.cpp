// JobRegistry: ids, updates, listing newest first, history bound, watchers.
#include <catch2/catch.hpp>

#include <thread>

#include "server/engine/job_registry.h"

using kiln::server::JobRegistry;
namespace v1 = kiln::v1;

TEST_CASE("jobs get unique ids and are listed newest first with a state filter", "[jobs]") {
  JobRegistry r;
  v1::Job a, b;
  a.set_uri("a");
  b.set_uri("b");
  auto ida = r.Create(a);
  auto idb = r.Create(b);
  CHECK(ida != idb);
  r.Update(ida, [](v1::Job& j) { j.set_state(v1::JOB_STATE_COMPILING); });
  auto all = r.List(v1::JOB_STATE_UNSPECIFIED, 10, false);
  REQUIRE(all.size() == 2);
  CHECK(all[0].uri() == "b");
  auto compiling = r.List(v1::JOB_STATE_COMPILING, 10, false);
  REQUIRE(compiling.size() == 1);
  CHECK(compiling[0].id() == ida);
  r.AddWaiter(ida, "client-1");
  r.AddWaiter(ida, "client-2");
  CHECK(r.Get(ida)->waiters_size() == 2);
  CHECK_FALSE(r.Get("nope").has_value());
}

TEST_CASE("only the last finished jobs are kept, running ones always are", "[jobs]") {
  JobRegistry r(5);
  std::string running = r.Create(v1::Job());
  for (int i = 0; i < 20; ++i) {
    auto id = r.Create(v1::Job());
    r.Update(id, [](v1::Job& j) { j.set_state(v1::JOB_STATE_SUCCEEDED); });
  }
  auto all = r.List(v1::JOB_STATE_UNSPECIFIED, 100, false);
  CHECK(all.size() == 6);
  CHECK(r.Get(running).has_value());
}

TEST_CASE("watchers see existing unfinished jobs and every later change, and end on close", "[jobs]") {
  JobRegistry r;
  auto id = r.Create(v1::Job());
  auto w = r.Watch(true);
  v1::Job event;
  auto soon = [] { return std::chrono::steady_clock::now() + std::chrono::seconds(5); };
  REQUIRE(w->Next(&event, soon()));
  CHECK(event.id() == id);
  r.Update(id, [](v1::Job& j) { j.set_state(v1::JOB_STATE_SUCCEEDED); });
  REQUIRE(w->Next(&event, soon()));
  CHECK(event.state() == v1::JOB_STATE_SUCCEEDED);
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    r.Close();
  });
  CHECK_FALSE(w->Next(&event, soon()));
  CHECK(w->closed());
  closer.join();
}
