#include "bench/op/timing_stats.h"

#include <catch2/catch.hpp>

namespace kiln::bench {
namespace {

TEST_CASE("timing statistics: median, sample std, min, max, count", "[bench]") {
  const TimingStats odd = SummarizeTimes({5, 1, 3});
  CHECK(odd.n == 3);
  CHECK(odd.median == 3);
  CHECK(odd.min == 1);
  CHECK(odd.max == 5);
  CHECK(odd.mean == 3);
  CHECK(odd.std == Approx(2.0));  // sqrt(((-2)^2 + 0 + 2^2) / (3 - 1))

  const TimingStats even = SummarizeTimes({4, 1, 3, 2});
  CHECK(even.median == 2.5);  // the mean of the two middle values
  CHECK(even.std == Approx(1.2909944));

  const TimingStats one = SummarizeTimes({7});
  CHECK(one.median == 7);
  CHECK(one.std == 0);

  const TimingStats none = SummarizeTimes({});
  CHECK(none.n == 0);
  CHECK(none.median == 0);
}

TEST_CASE("timing statistics: the median resists an outlier that the mean does not", "[bench]") {
  std::vector<double> v(99, 10.0);
  v.push_back(1000.0);  // one preempted call
  const TimingStats s = SummarizeTimes(v);
  CHECK(s.median == 10.0);
  CHECK(s.mean == Approx(19.9));
  CHECK(s.max == 1000.0);
}

}  // namespace
}  // namespace kiln::bench
