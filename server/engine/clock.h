// Small time helpers shared by the engine: elapsed milliseconds and wall-clock timestamps.
#pragma once

#include <chrono>

#include <google/protobuf/timestamp.pb.h>

namespace kiln::server {

using Clock = std::chrono::steady_clock;

inline double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

inline void SetTimestampNow(google::protobuf::Timestamp* ts) {
  auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  ts->set_seconds(ns / 1000000000);
  ts->set_nanos(int32_t(ns % 1000000000));
}

}  // namespace kiln::server
