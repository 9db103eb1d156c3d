// ResultRow: one (case, backend) result of kiln-bench, and its three renderings — a line of
// the table on stdout, a CSV line, a JSON object. Numbers that do not apply are NaN: empty in
// CSV, null in JSON, "-" in the table.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/op/timing_stats.h"
#include "kiln/status.h"

namespace kiln::bench {

struct ResultRow {
  std::string routine;
  std::string backend;
  std::string label;  // the case's label (trace example name), may be empty
  std::string shape;  // "rows=2048,hidden=4096"
  std::string dtype;
  std::string arch;  // "sm_90"
  std::string gpu;   // "NVIDIA H200"
  // ok | refcheck_failed | error | skipped. Only "ok" rows carry timings.
  std::string status = "ok";
  // pass | baseline (the reference backend itself, checked against float64 on the CPU) |
  // FAIL | not run
  std::string refcheck = "not run";
  std::string refcheck_detail;
  double max_abs_err = NAN;  // against the reference backend's output
  TimingStats stats;         // microseconds per call
  // The stream's time per call over the timed batches (Timer's TimedRun::stream_us): launch
  // gaps and programmatic waits included; NaN with CUDA events and with an L2 flush between
  // calls (the flush would be in it).
  double stream_us = NAN;
  int warmup = 0;
  std::string mechanism;   // cupti_activity | cuda_events
  std::string l2;          // how L2 was defeated: "rotate 40 sets (2.7 GB)", "flush", "warm"
  double bytes = NAN;      // bytes one call must read and write
  double flops = NAN;      // floating-point operations of one call, where meaningful
  double copy_gbps = NAN;  // device-to-device copy bandwidth (read + write) of this run
  double read_gbps = NAN;  // read-only bandwidth of this run (the ceiling of read-mostly ops)
  // call_overhead rows (kiln-bench --overhead): median host time per call minus that of a raw
  // cuLaunchKernelEx of the same kernel.
  double overhead_us = NAN;
  std::string kernels;  // the kernels timed (CUPTI names them)
  // For a call of several kernels: each one's median µs and the gap before it (kernel_parts.h).
  std::string kernel_parts;
  std::string message;    // why a row failed or was skipped, and warnings
  std::string reproduce;  // the command line of this row alone
};

double AchievedGBps(const ResultRow& row);  // bytes / median
double AchievedTFlops(const ResultRow& row);
double PercentOfCopy(const ResultRow& row);  // AchievedGBps / copy_gbps * 100
double PercentOfRead(const ResultRow& row);  // AchievedGBps / read_gbps * 100

nlohmann::json RowToJson(const ResultRow& row);
std::string CsvHeader();
std::string RowToCsv(const ResultRow& row);  // RFC 4180 quoting where needed
std::string TableHeader();
std::string RowToTableLine(const ResultRow& row);

// "<path>" ending in .json: {"meta": meta, "rows": [...]}; ending in .csv: header + rows.
// INVALID_ARGUMENT for another extension; INTERNAL when the file cannot be written.
Status WriteRows(const std::string& path, const nlohmann::json& meta, const std::vector<ResultRow>& rows);

}  // namespace kiln::bench
