// CompileScheduler: never more than max_jobs at once, never over the memory budget, FIFO,
// and queued work abandoned on stop.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include "server/engine/compile_scheduler.h"

using kiln::server::CompileScheduler;
using namespace std::chrono_literals;

namespace {
struct Gauge {
  std::atomic<int> now{0}, peak{0};
  std::atomic<int64_t> mb_now{0}, mb_peak{0};
  void Enter(int64_t mb) {
    int n = ++now;
    int p = peak.load();
    while (n > p && !peak.compare_exchange_weak(p, n)) {
    }
    int64_t m = mb_now += mb;
    int64_t mp = mb_peak.load();
    while (m > mp && !mb_peak.compare_exchange_weak(mp, m)) {
    }
  }
  void Leave(int64_t mb) {
    --now;
    mb_now -= mb;
  }
};
}  // namespace

TEST_CASE("at most max_jobs compiles run at once", "[scheduler]") {
  CompileScheduler s(3, 1 << 20);
  Gauge g;
  std::atomic<int> done{0};
  for (int i = 0; i < 12; ++i)
    REQUIRE(s.Submit(
        1,
        [&] {
          g.Enter(1);
          std::this_thread::sleep_for(20ms);
          g.Leave(1);
          ++done;
        },
        nullptr));
  while (done < 12) std::this_thread::sleep_for(5ms);
  CHECK(g.peak == 3);
}

TEST_CASE("the memory budget bounds concurrent compiles, an oversized job runs alone", "[scheduler]") {
  CompileScheduler s(8, 1000);
  Gauge g;
  std::atomic<int> done{0};
  for (int i = 0; i < 8; ++i)
    s.Submit(
        400,
        [&] {
          g.Enter(400);
          std::this_thread::sleep_for(20ms);
          g.Leave(400);
          ++done;
        },
        nullptr);
  s.Submit(
      5000,
      [&] {
        g.Enter(5000);
        CHECK(g.now == 1);
        std::this_thread::sleep_for(5ms);
        g.Leave(5000);
        ++done;
      },
      nullptr);
  while (done < 9) std::this_thread::sleep_for(5ms);
  CHECK(g.peak <= 2);  // 2 × 400 fits in 1000, 3 × 400 does not
  CHECK(g.peak >= 1);
}

TEST_CASE("jobs start in submission order", "[scheduler]") {
  CompileScheduler s(1, 100);
  std::vector<int> order;
  std::mutex mu;
  std::atomic<int> done{0};
  for (int i = 0; i < 10; ++i)
    s.Submit(
        1,
        [&, i] {
          std::lock_guard<std::mutex> l(mu);
          order.push_back(i);
          ++done;
        },
        nullptr);
  while (done < 10) std::this_thread::sleep_for(2ms);
  CHECK(order == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
}

TEST_CASE("stopping abandons queued work, lets running work finish, and refuses new work", "[scheduler]") {
  CompileScheduler s(1, 100);
  std::atomic<bool> release{false};
  std::atomic<int> ran{0}, abandoned{0};
  s.Submit(
      1,
      [&] {
        while (!release) std::this_thread::sleep_for(1ms);
        ++ran;
      },
      [&] { ++abandoned; });
  while (s.running() == 0) std::this_thread::sleep_for(1ms);
  for (int i = 0; i < 4; ++i)
    s.Submit(
        1, [&] { ++ran; }, [&] { ++abandoned; });
  std::thread releaser([&] {
    std::this_thread::sleep_for(50ms);
    release = true;
  });
  CHECK(s.Stop(10s));
  releaser.join();
  CHECK(ran == 1);
  CHECK(abandoned == 4);
  CHECK_FALSE(s.Submit(
      1, [&] { ++ran; }, [&] { ++abandoned; }));
}
