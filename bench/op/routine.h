// Routine: what kiln-bench knows about one op — its axes, dtypes and backends, the tensors a
// case allocates, the float64 CPU reference, and how each backend is called — and the registry
// a routine file adds itself to. Adding a routine is one file in bench/op/routines/
// (docs/benchmarking.md); the framework (case_runner.h) does allocation, random inputs,
// refchecks, L2 defeat and timing for every routine alike.
//
// Every routine has the backends "kiln" (the op through kiln::ops) and "reference" (a plain,
// obviously correct kernel compiled by kilnd from a raw source: the refcheck baseline).
#pragma once

#include <cuda.h>

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "bench/op/host_tensor.h"
#include "bench/op/test_list.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::bench {

enum class TensorRole {
  kInput,   // read only: random data
  kOutput,  // written only: poisoned (NaN) before each checked call
  kInOut,   // read and written in place: random data, restored before each checked call
};

struct TensorSpec {
  std::string name;  // the API's argument name
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  TensorRole role = TensorRole::kInput;
  double lo = -2, hi = 2;  // range of the random inputs
  // The routine's FillInputs writes it (a page table, probabilities); the framework leaves it
  // zero instead of drawing random data.
  bool routine_fills = false;
  // Written outputs: compared bit for bit (a copy) instead of within a tolerance.
  bool exact = false;
  // Written outputs: the tolerance against float64 where the dtype's default does not fit
  // (an fp32 output of a bf16 op; an average whose magnitude is far below 1). Between two GPU
  // results, twice it. Unset (abs and rel 0, exact false): Float64Tolerance(the case's dtype).
  Tolerance tolerance;

  size_t numel() const;
  size_t bytes() const { return numel() * DTypeSize(dtype); }
};

struct CaseSpec {
  std::vector<TensorSpec> tensors;
  double bytes = 0;    // what one call must read plus write (the GB/s figure's numerator)
  double flops = NAN;  // where meaningful
  // The bytes of a tensor set one call touches, where it is far less than the set (64 new
  // tokens appended to a 2 GB cache): the L2 rotation must pass 2x L2 between two uses of
  // *these* bytes. 0: the whole set.
  double footprint = 0;
  // The case's axes, for a check that needs what the tensors do not show (batch_prefill's mask);
  // set by the routines that use it.
  ShapeAxes axes;
};

// The tolerance of written output `t` of a case of `dtype` against float64 (cross = false) or
// between two GPU results (cross = true: twice it). Integer tensors: exact. Not for exact
// tensors (CompareBits).
Tolerance ToleranceFor(const TensorSpec& t, DType dtype, bool cross);

// A check of a backend's outputs (every tensor of the case, indexed as CaseSpec::tensors; the
// unwritten ones empty) by what they may be, for ops whose outputs are random draws.
struct DrawValidity {
  std::function<Comparison(const std::vector<HostTensor>& outputs)> check;
  std::string what;  // the allowed sets, for the rows' refcheck_detail
};

// One set of the case's tensors on the device, contiguous, in the order of CaseSpec::tensors.
using TensorSet = std::vector<TensorView>;

// One call of a backend on a tensor set; enqueued on `stream`, never synchronizing.
using BackendFn = std::function<Status(const TensorSet& tensors, CUstream stream)>;

struct BackendInfo {
  std::string name;
  std::string help;
};

class Routine {
 public:
  virtual ~Routine() = default;
  virtual std::string_view name() const = 0;  // the registry op name ("rmsnorm")
  virtual std::string_view description() const = 0;
  // The trace definition's var axes; a case gives exactly these.
  virtual std::vector<std::string> axes() const = 0;
  virtual std::vector<DType> dtypes() const = 0;
  virtual std::vector<BackendInfo> backends() const = 0;

  // The tensors of a case (axes checked to be exactly axes(), dtype one of dtypes()).
  // INVALID_ARGUMENT when the op does not take these sizes.
  virtual StatusOr<CaseSpec> Describe(const ShapeAxes& shape, DType dtype) const = 0;
  // A case small enough for the float64 CPU check of the reference backend.
  virtual ShapeAxes SmallShape() const = 0;
  // The cases kiln-bench --check runs every backend at against the float64 CPU reference (the
  // GPU correctness check every op gets from its routine): SmallShape() and the awkward sizes
  // a routine adds (one row, sizes no vector width divides, the largest the op takes).
  virtual std::vector<ShapeAxes> CheckShapes() const { return {SmallShape()}; }
  // After the framework drew random data for every input that is not routine_fills: the
  // routine's own inputs (page tables, probabilities, per-request parameters) and any pattern
  // its refcheck needs. Host tensors in CaseSpec order; `rng` is the case's.
  virtual Status FillInputs(const CaseSpec& spec, const ShapeAxes& shape, std::mt19937_64& rng,
                            std::vector<HostTensor>* tensors) const {
    return OkStatus();
  }
  // float64 on the host: what every kOutput and kInOut tensor (by index) must hold after one
  // call on `tensors` (every tensor's contents before the call). Every routine has this or
  // ChecksDraws().
  virtual Status CpuReference(const CaseSpec& spec, const std::vector<HostTensor>& tensors,
                              std::map<size_t, std::vector<double>>* expected) const {
    return Status(StatusCode::kUnimplemented, std::string(name()) + " has no float64 reference");
  }
  // Ops whose outputs are random draws (sampling): there is nothing to compare element by
  // element. Instead every backend's outputs (the reference's too) pass DrawCheck() of the
  // case's inputs, and a second call on the same inputs reproduces them bit for bit.
  virtual bool ChecksDraws() const { return false; }
  // The float64 check of any backend's outputs on `inputs` (run once per case; may sort).
  virtual StatusOr<DrawValidity> DrawCheck(const CaseSpec& spec, const std::vector<HostTensor>& inputs) const {
    return Status(StatusCode::kUnimplemented, std::string(name()) + " checks values, not draws");
  }
  // Everything `backend` needs before timing (kernels fetched from kilnd and loaded), and the
  // call. INVALID_ARGUMENT when the backend cannot run this case (a forced vec that does not
  // divide the row); NOT_FOUND for an unknown backend.
  virtual StatusOr<BackendFn> Prepare(const std::string& backend, const CaseSpec& spec, const ShapeAxes& shape,
                                      DType dtype) const = 0;
};

class RoutineRegistry {
 public:
  static RoutineRegistry& Global();
  bool Add(std::unique_ptr<Routine> routine);  // aborts on a duplicate name
  const Routine* Find(std::string_view name) const;
  std::vector<const Routine*> All() const;  // sorted by name

 private:
  std::map<std::string, std::unique_ptr<Routine>, std::less<>> routines_;
};

// In a routine's .cpp, at namespace scope: KILN_BENCH_REGISTER_ROUTINE(RmsNormRoutine);
#define KILN_BENCH_REGISTER_ROUTINE(Type)                                                                         \
  [[maybe_unused]] static const bool kiln_bench_registered_##Type = ::kiln::bench::RoutineRegistry::Global().Add( \
      std::make_unique<Type>())

// "fp32" -> kFloat32 ...; INVALID_ARGUMENT listing the names otherwise.
StatusOr<DType> ParseDType(std::string_view name);

// The backend names of a routine, and "kiln_vec<N>"-style lookups in one place.
bool HasBackend(const Routine& routine, std::string_view backend);

}  // namespace kiln::bench
