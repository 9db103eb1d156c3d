// BenchOptions: kiln-bench's command line, parsed without touching a GPU (so every rule is
// tested on the CPU), and the command line that reproduces one row.
#pragma once

#include <string>
#include <vector>

#include "bench/op/test_list.h"
#include "kiln/status.h"

namespace kiln::bench {

enum class BenchMode {
  kRun,           // --routine ... (the cases of the command line)
  kList,          // --list FILE
  kTraces,        // --traces DIR: the default cases, generated from the trace definitions of DIR
  kListRoutines,  // --list-routines
  kGenerateList,  // --generate-list TRACES_DIR: the default test list from trace examples
  kOverhead,      // --overhead: host time of an op call against a raw launch (call_overhead.h)
  kCheck,         // --check: every backend of every routine against float64 at its CheckShapes()
  kHelp,
};

enum class L2Mode {
  kRotate,  // rotate through copies of every tensor whose total exceeds 2x L2 (default)
  kFlush,   // memset a 2x-L2 buffer before every timed call (outside the timed region)
  kWarm,    // one set of tensors: L2-resident where they fit (diagnostic)
};
const char* L2ModeName(L2Mode mode);  // "rotate", "flush", "warm"

enum class TimerChoice {
  kAuto,    // CUPTI kernel activity when it can be used, else CUDA events
  kCupti,   // CUPTI or fail
  kEvents,  // CUDA events (cuEventRecord / cuEventElapsedTime) around each call
};
const char* TimerChoiceName(TimerChoice choice);  // "auto", "cupti", "events"

struct BenchOptions {
  BenchMode mode = BenchMode::kHelp;
  // kRun
  std::string routine;
  std::vector<std::string> only;  // --check: these routines alone (empty: every routine)
  std::vector<std::string> dtypes = {"bf16"};
  std::vector<ShapeAxes> shapes;  // --shapes "a=1,b=2;a=3,b=4"
  std::vector<std::string> backends = {"kiln", "reference"};
  std::string label;
  // kList / kGenerateList
  std::string list_file;
  std::string traces_dir;
  // measurement (--overhead: batches of 1000 calls)
  int iters = 100;
  int warmup = 10;
  double max_seconds = 2.0;  // per row: fewer iterations (at least 10) when one call is slow
  L2Mode l2 = L2Mode::kRotate;
  TimerChoice timer = TimerChoice::kAuto;
  uint64_t seed = 1234;
  int device = 0;
  std::string socket;             // empty: KILN_SOCKET / kilnd's default socket
  std::vector<std::string> outs;  // --out FILE.json / FILE.csv (repeatable)
  bool quiet = false;
};

// INVALID_ARGUMENT naming the flag, the value and what is allowed; `args` excludes argv[0].
StatusOr<BenchOptions> ParseBenchOptions(const std::vector<std::string>& args);

std::string BenchUsage();

// The cases --routine/--dtype/--shapes/--backends describe (dtypes x shapes, in that order).
std::vector<BenchCase> CommandLineCases(const BenchOptions& options);

// The kiln-bench command that measures `backend` on `c` alone with these options (the
// reference backend always runs too: it is the refcheck baseline).
std::string ReproduceCommand(const BenchOptions& options, const BenchCase& c, const std::string& backend);

}  // namespace kiln::bench
