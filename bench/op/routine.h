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

  size_t numel() const;
  size_t bytes() const { return numel() * DTypeSize(dtype); }
};

struct CaseSpec {
  std::vector<TensorSpec> tensors;
  double bytes = 0;    // what one call must read plus write (the GB/s figure's numerator)
  double flops = NAN;  // where meaningful
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
  // float64 on the host: what every kOutput and kInOut tensor (by index) must hold after one
  // call on `tensors` (every tensor's contents before the call).
  virtual Status CpuReference(const CaseSpec& spec, const std::vector<HostTensor>& tensors,
                              std::map<size_t, std::vector<double>>* expected) const = 0;
  // Everything `backend` needs before timing (kernels fetched from kilnd and loaded), and the
  // call. INVALID_ARGUMENT when the backend cannot run this case (a forced vec that does not
  // divide the row); NOT_FOUND for an unknown backend.
  virtual StatusOr<BackendFn> Prepare(const std::string& backend, const CaseSpec& spec,
                                      const ShapeAxes& shape, DType dtype) const = 0;
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
#define KILN_BENCH_REGISTER_ROUTINE(Type)                  \
  [[maybe_unused]] static const bool kiln_bench_registered_##Type = \
      ::kiln::bench::RoutineRegistry::Global().Add(std::make_unique<Type>())

// "fp32" -> kFloat32 ...; INVALID_ARGUMENT listing the names otherwise.
StatusOr<DType> ParseDType(std::string_view name);

// The backend names of a routine, and "kiln_vec<N>"-style lookups in one place.
bool HasBackend(const Routine& routine, std::string_view backend);

}  // namespace kiln::bench
