#include "bench/op/bench_options.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>

#include "client/core/api/invalid_argument.h"

namespace kiln::bench {
namespace {

using client::InvalidArgument;

StatusOr<long long> ParseInteger(const std::string& flag, const std::string& value, long long lo, long long hi) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno != 0 || v < lo || v > hi)
    return InvalidArgument(flag + " '" + value + "': expected an integer in " + std::to_string(lo) + ".." +
                           std::to_string(hi));
  return v;
}

std::string Quote(const std::string& s) {
  if (!s.empty() && s.find_first_of(" \t\"'$;&|<>()*?`\\") == std::string::npos) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

const char* L2ModeName(L2Mode mode) {
  switch (mode) {
    case L2Mode::kRotate: return "rotate";
    case L2Mode::kFlush: return "flush";
    case L2Mode::kWarm: return "warm";
  }
  return "?";
}

const char* TimerChoiceName(TimerChoice choice) {
  switch (choice) {
    case TimerChoice::kAuto: return "auto";
    case TimerChoice::kCupti: return "cupti";
    case TimerChoice::kEvents: return "events";
  }
  return "?";
}

std::string BenchUsage() {
  return R"(kiln-bench: the ops of Kiln's kernel library, checked against a reference and timed.

  kiln-bench --routine NAME --shapes "AXIS=N,AXIS=N[;...]" [--dtype bf16[,fp16...]]
             [--backends kiln,reference[,...]|all] [--label TEXT] [options]
  kiln-bench --traces DIR [options]      the default cases: one per example of every trace
                                         definition of DIR (kernels/traces), backends
                                         kiln,reference (what --generate-list prints)
  kiln-bench --list FILE [options]       one case per line: routine dtype shape backends [label]
  kiln-bench --list-routines             routines, their axes, dtypes and backends
  kiln-bench --generate-list TRACES_DIR  the default test list from the trace definitions'
                                         examples (kernels/traces), to stdout or --out FILE
  kiln-bench --check [options]           correctness only: every backend of every routine, each
                                         dtype, at the routine's check shapes (small and
                                         awkward), on fresh random inputs with poisoned outputs,
                                         against the float64 CPU reference; nothing is timed;
                                         --only R1,R2 checks those routines alone
  kiln-bench --overhead [options]        host time per call of kiln::ops calls (silu_and_mul
                                         1x8, rms_norm 1x128) against a raw cuLaunchKernelEx of
                                         the same kernel (routine call_overhead)
options:
  --iters N          timed calls per row (default 100; fewer when --max-seconds is reached);
                     --overhead: timed batches of 1000 calls per backend
  --warmup N         untimed calls first (default 10); --overhead: untimed batches
  --max-seconds S    time budget of one row's timed calls (default 2; at least 10 calls)
  --l2 MODE          rotate (default): rotate through copies of every tensor totalling over
                     twice the L2; flush: memset a 2x-L2 buffer before each call; warm: no
                     defeat (diagnostic)
  --timer T          auto (default): CUPTI kernel activity when usable, else CUDA events;
                     cupti (CUPTI or fail); events
  --seed N           random inputs (default 1234)
  --device N         CUDA device ordinal (default 0)
  --socket PATH      kilnd's socket (default: KILN_SOCKET, else kilnd's default)
  --out FILE         .json or .csv; repeatable
  --quiet            no table on stdout
Every backend's output is checked against the "reference" backend (itself checked against
float64 on the CPU) before it is timed; a mismatch fails the row and the exit status.
Exit status: 0 all rows ok (or skipped), 1 a row failed, 2 bad usage, 77 no GPU.
)";
}

StatusOr<BenchOptions> ParseBenchOptions(const std::vector<std::string>& args) {
  BenchOptions o;
  bool have_mode = false;
  bool have_run_flags = false;
  std::string shapes_text;
  auto set_mode = [&](BenchMode mode, const std::string& flag) -> Status {
    if (have_mode && o.mode != mode)
      return InvalidArgument(flag +
                             ": give one of --routine, --traces, --list, --list-routines, --generate-list, --check, "
                             "--overhead, --help");
    have_mode = true;
    o.mode = mode;
    return OkStatus();
  };

  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::string value;
    bool inline_value = false;
    if (flag.rfind("--", 0) == 0) {
      if (const size_t eq = flag.find('='); eq != std::string::npos) {
        value = flag.substr(eq + 1);
        flag = flag.substr(0, eq);
        inline_value = true;
      }
    } else {
      return InvalidArgument("unexpected argument '" + flag + "' (flags start with --; see --help)");
    }
    auto take = [&]() -> StatusOr<std::string> {
      if (inline_value) return value;
      if (i + 1 >= args.size()) return InvalidArgument(flag + ": missing its value");
      return args[++i];
    };
    auto no_value = [&]() -> Status { return inline_value ? InvalidArgument(flag + " takes no value") : OkStatus(); };

    if (flag == "--help" || flag == "-h") {
      KILN_RETURN_IF_ERROR(no_value());
      KILN_RETURN_IF_ERROR(set_mode(BenchMode::kHelp, flag));
    } else if (flag == "--list-routines") {
      KILN_RETURN_IF_ERROR(no_value());
      KILN_RETURN_IF_ERROR(set_mode(BenchMode::kListRoutines, flag));
    } else if (flag == "--overhead") {
      KILN_RETURN_IF_ERROR(no_value());
      KILN_RETURN_IF_ERROR(set_mode(BenchMode::kOverhead, flag));
    } else if (flag == "--check") {
      KILN_RETURN_IF_ERROR(no_value());
      KILN_RETURN_IF_ERROR(set_mode(BenchMode::kCheck, flag));
    } else if (flag == "--quiet") {
      KILN_RETURN_IF_ERROR(no_value());
      o.quiet = true;
    } else {
      static const char* kValueFlags[] = {"--routine",     "--list",   "--traces", "--generate-list",
                                          "--shapes",      "--shape",  "--dtype",  "--dtypes",
                                          "--backends",    "--label",  "--iters",  "--warmup",
                                          "--max-seconds", "--l2",     "--timer",  "--seed",
                                          "--device",      "--socket", "--out",    "--only"};
      if (std::find(std::begin(kValueFlags), std::end(kValueFlags), flag) == std::end(kValueFlags))
        return InvalidArgument("unknown flag '" + flag + "' (see --help)");
      KILN_ASSIGN_OR_RETURN(auto v, take());
      const std::string& s = v;
      if (flag == "--only") {
        // --check's filter: routines by name, comma-separated.
        KILN_ASSIGN_OR_RETURN(auto names, ParseNameList(s, "--only"));
        o.only = names;
      } else if (flag == "--routine") {
        KILN_RETURN_IF_ERROR(set_mode(BenchMode::kRun, flag));
        if (s.empty()) return InvalidArgument("--routine: empty; see --list-routines");
        o.routine = s;
      } else if (flag == "--list") {
        KILN_RETURN_IF_ERROR(set_mode(BenchMode::kList, flag));
        o.list_file = s;
      } else if (flag == "--traces") {
        KILN_RETURN_IF_ERROR(set_mode(BenchMode::kTraces, flag));
        o.traces_dir = s;
      } else if (flag == "--generate-list") {
        KILN_RETURN_IF_ERROR(set_mode(BenchMode::kGenerateList, flag));
        o.traces_dir = s;
      } else if (flag == "--shapes" || flag == "--shape") {
        have_run_flags = true;
        shapes_text = s;
      } else if (flag == "--dtype" || flag == "--dtypes") {
        have_run_flags = true;
        KILN_ASSIGN_OR_RETURN(auto d, ParseNameList(s, "--dtype"));
        o.dtypes = d;
      } else if (flag == "--backends") {
        have_run_flags = true;
        KILN_ASSIGN_OR_RETURN(auto b, ParseNameList(s, "--backends"));
        o.backends = b;
      } else if (flag == "--label") {
        have_run_flags = true;
        if (s.find_first_of(" \t#") != std::string::npos)
          return InvalidArgument("--label '" + s + "': no spaces or '#'");
        o.label = s;
      } else if (flag == "--iters") {
        KILN_ASSIGN_OR_RETURN(auto n, ParseInteger(flag, s, 1, 1000000));
        o.iters = static_cast<int>(n);
      } else if (flag == "--warmup") {
        KILN_ASSIGN_OR_RETURN(auto n, ParseInteger(flag, s, 0, 100000));
        o.warmup = static_cast<int>(n);
      } else if (flag == "--max-seconds") {
        char* end = nullptr;
        const double d = std::strtod(s.c_str(), &end);
        if (s.empty() || *end != '\0' || !std::isfinite(d) || d <= 0 || d > 3600)
          return InvalidArgument("--max-seconds '" + s + "': expected a number of seconds in (0, 3600]");
        o.max_seconds = d;
      } else if (flag == "--l2") {
        static const std::map<std::string, L2Mode> kModes = {
            {"rotate", L2Mode::kRotate}, {"flush", L2Mode::kFlush}, {"warm", L2Mode::kWarm}};
        auto it = kModes.find(s);
        if (it == kModes.end()) return InvalidArgument("--l2 '" + s + "': expected rotate, flush or warm");
        o.l2 = it->second;
      } else if (flag == "--timer") {
        static const std::map<std::string, TimerChoice> kTimers = {
            {"auto", TimerChoice::kAuto}, {"cupti", TimerChoice::kCupti}, {"events", TimerChoice::kEvents}};
        auto it = kTimers.find(s);
        if (it == kTimers.end()) return InvalidArgument("--timer '" + s + "': expected auto, cupti or events");
        o.timer = it->second;
      } else if (flag == "--seed") {
        KILN_ASSIGN_OR_RETURN(auto n, ParseInteger(flag, s, 0, (1LL << 62)));
        o.seed = static_cast<uint64_t>(n);
      } else if (flag == "--device") {
        KILN_ASSIGN_OR_RETURN(auto n, ParseInteger(flag, s, 0, 63));
        o.device = static_cast<int>(n);
      } else if (flag == "--socket") {
        o.socket = s;
      } else if (flag == "--out") {
        if (s.empty()) return InvalidArgument("--out: empty file name");
        o.outs.push_back(s);
      } else {
        return InvalidArgument("unknown flag '" + flag + "' (see --help)");
      }
    }
  }

  if (!have_mode)
    return InvalidArgument(
        "nothing to do: give --routine, --traces, --list, --list-routines, --generate-list, --check or --overhead (see "
        "--help)");
  if (!o.only.empty() && o.mode != BenchMode::kCheck)
    return InvalidArgument("--only goes with --check (a list file or --routine names the routines of a run)");
  if (o.mode != BenchMode::kRun && have_run_flags)
    return InvalidArgument(
        "--shapes, --dtype, --backends and --label go with --routine (a list file names them per line)");
  if (o.mode == BenchMode::kRun) {
    if (shapes_text.empty())
      return InvalidArgument("--routine " + o.routine + ": give --shapes \"AXIS=N,...\" (see --list-routines)");
    size_t start = 0;
    while (start <= shapes_text.size()) {
      size_t end = shapes_text.find(';', start);
      if (end == std::string::npos) end = shapes_text.size();
      auto shape = ParseShape(shapes_text.substr(start, end - start));
      if (!shape.ok()) return InvalidArgument("--shapes: " + shape.status().message());
      o.shapes.push_back(*shape);
      start = end + 1;
    }
  }
  if (o.mode == BenchMode::kGenerateList && o.outs.size() > 1)
    return InvalidArgument("--generate-list writes one --out file");
  if (o.mode != BenchMode::kGenerateList) {
    for (const auto& out : o.outs) {
      const bool json = out.size() > 5 && out.compare(out.size() - 5, 5, ".json") == 0;
      const bool csv = out.size() > 4 && out.compare(out.size() - 4, 4, ".csv") == 0;
      if (!json && !csv) return InvalidArgument("--out '" + out + "': the file name must end in .json or .csv");
    }
  }
  return o;
}

std::vector<BenchCase> CommandLineCases(const BenchOptions& options) {
  std::vector<BenchCase> cases;
  for (const auto& dtype : options.dtypes)
    for (const auto& shape : options.shapes)
      cases.push_back({options.routine, dtype, shape, options.backends, options.label, "command line"});
  return cases;
}

std::string ReproduceCommand(const BenchOptions& o, const BenchCase& c, const std::string& backend) {
  std::string cmd = "kiln-bench --routine " + Quote(c.routine) + " --dtype " + Quote(c.dtype) + " --shapes " +
                    Quote(FormatShape(c.shape)) + " --backends " + Quote(backend) + " --iters " +
                    std::to_string(o.iters) + " --warmup " + std::to_string(o.warmup) + " --l2 " + L2ModeName(o.l2) +
                    " --timer " + TimerChoiceName(o.timer) + " --seed " + std::to_string(o.seed);
  if (o.device != 0) cmd += " --device " + std::to_string(o.device);
  if (!c.label.empty()) cmd += " --label " + Quote(c.label);
  return cmd;
}

}  // namespace kiln::bench
