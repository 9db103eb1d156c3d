// kiln._native: the C ABI of libkiln_client (kiln/kiln.h) for Python, one function per C function,
// taking any object with __dlpack__ (torch, CuPy, JAX, NumPy ...) and Python scalars.
//
// NOTES:
// - A tensor argument costs one __dlpack__() call: the producer's capsule holds a
//   DLManagedTensor whose DLTensor is handed to the C ABI as is. The capsule is neither renamed
//   nor consumed: it stays owned by the producer's capsule destructor, which frees the
//   DLManagedTensor when the last reference goes, and this file holds that reference until the C
//   function has returned (TensorArg's destructor). __dlpack__() is called without a stream: torch
//   then records no event and waits on nothing, so a call stays legal inside CUDA-graph capture.
// - Only <...> includes: client/python is not a folder of cmake/CheckIncludes.cmake, and
//   libkiln_client's public headers are all this file needs.
// - The GIL is released around each C call: the first call of a specialization may wait for
//   kilnd to compile it, and other Python threads should run meanwhile.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <kiln/kiln.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

// DLPack 1.0's versioned capsule ("dltensor_versioned"); the installed dlpack.h (0.6) predates
// it. A producer returns it only when asked with max_version, which this module never passes,
// but the layout is read anyway in case one does.
struct DLPackVersion {
  uint32_t major;
  uint32_t minor;
};
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
};

PyObject* g_error_classes = nullptr;  // a tuple indexed by kiln_status, set by kiln/_errors.py
PyObject* g_dlpack_name = nullptr;    // "__dlpack__", interned
// torch.Tensor and torch._C._to_dlpack, registered by kiln/_framework.py the first time a torch
// tensor is seen (this module never imports torch). Tensor.__dlpack__ is Python code around
// the same C++ export; calling the export directly saves most of its cost per tensor.
PyTypeObject* g_torch_tensor = nullptr;
PyObject* g_torch_to_dlpack = nullptr;

// Raises the exception class registered for `code` with (message, code).
PyObject* RaiseStatus(int code, const char* message) {
  PyObject* cls = PyExc_RuntimeError;
  if (g_error_classes != nullptr && code >= 0 && code < PyTuple_GET_SIZE(g_error_classes))
    cls = PyTuple_GET_ITEM(g_error_classes, code);
  PyObject* exc = PyObject_CallFunction(cls, "si", message, code);
  if (exc == nullptr) return nullptr;
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc)), exc);
  Py_DECREF(exc);
  return nullptr;
}

PyObject* Finish(kiln_status status) {
  if (status == KILN_OK) Py_RETURN_NONE;
  return RaiseStatus(static_cast<int>(status), kiln_last_error());
}

// A tensor argument: the DLTensor of obj.__dlpack__(), kept alive until the call returns.
class TensorArg {
 public:
  TensorArg() = default;
  TensorArg(const TensorArg&) = delete;
  TensorArg& operator=(const TensorArg&) = delete;
  ~TensorArg() { Py_XDECREF(capsule_); }

  // False with a Python exception set. None gives NULL when `optional`.
  bool Set(PyObject* obj, const char* name, bool optional) {
    if (obj == Py_None) {
      if (optional) return true;
      PyErr_Format(PyExc_TypeError, "%s: expected a tensor (an object with __dlpack__), found None", name);
      return false;
    }
    if (g_torch_tensor != nullptr && PyObject_TypeCheck(obj, g_torch_tensor)) {
      capsule_ = PyObject_CallOneArg(g_torch_to_dlpack, obj);
    } else {
      capsule_ = PyObject_CallMethodNoArgs(obj, g_dlpack_name);
    }
    if (capsule_ == nullptr) {
      if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: expected a tensor (an object with __dlpack__), found %.200s", name,
                     Py_TYPE(obj)->tp_name);
      }
      return false;
    }
    if (PyCapsule_IsValid(capsule_, "dltensor")) {
      tensor_ = &static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule_, "dltensor"))->dl_tensor;
    } else if (PyCapsule_IsValid(capsule_, "dltensor_versioned")) {
      tensor_ =
          &static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule_, "dltensor_versioned"))->dl_tensor;
    } else {
      PyErr_Format(PyExc_TypeError, "%s: %.200s.__dlpack__() returned no unused DLPack capsule", name,
                   Py_TYPE(obj)->tp_name);
      return false;
    }
    return true;
  }
  DLTensor* get() const { return tensor_; }
  // The bytes of a tensor (shape product times element size); 0 for NULL.
  size_t bytes() const {
    if (tensor_ == nullptr) return 0;
    size_t n = (tensor_->dtype.bits * tensor_->dtype.lanes + 7) / 8;
    for (int d = 0; d < tensor_->ndim; ++d) n *= static_cast<size_t>(tensor_->shape[d] > 0 ? tensor_->shape[d] : 0);
    return n;
  }
  void* data() const {
    if (tensor_ == nullptr || tensor_->data == nullptr) return nullptr;
    return static_cast<char*>(tensor_->data) + tensor_->byte_offset;
  }

 private:
  PyObject* capsule_ = nullptr;
  DLTensor* tensor_ = nullptr;
};

// Host int32 arrays for the planners: a buffer (array.array('i'), NumPy int32), a CPU DLPack
// tensor (torch int32 on the CPU) or a sequence of ints.
bool HostInt32(PyObject* obj, const char* api, const char* name, std::vector<int32_t>* out) {
  if (PyObject_CheckBuffer(obj)) {
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0) {
      const char* f = view.format != nullptr ? view.format : "B";
      if (f[0] == '<' || f[0] == '=' || f[0] == '@') ++f;
      const bool int32 = view.itemsize == 4 && (std::strcmp(f, "i") == 0 || std::strcmp(f, "l") == 0);
      if (int32) out->assign(static_cast<int32_t*>(view.buf), static_cast<int32_t*>(view.buf) + view.len / 4);
      PyBuffer_Release(&view);
      if (int32) return true;
      RaiseStatus(
          KILN_ERROR_INVALID_ARGUMENT,
          (std::string(api) + ": " + name + ": expected a host array of int32, found item format '" + f + "'").c_str());
      return false;
    }
    PyErr_Clear();
  }
  if (PyObject_HasAttrString(obj, "__dlpack__")) {
    TensorArg t;
    if (!t.Set(obj, name, false)) return false;
    const DLTensor* d = t.get();
    if (d->device.device_type != kDLCPU && d->device.device_type != kDLCUDAHost) {
      RaiseStatus(KILN_ERROR_INVALID_ARGUMENT, (std::string(api) + ": " + name +
                                                ": expected a host (CPU) array, found a device tensor; planning reads "
                                                "it on the host: pass the host copy")
                                                   .c_str());
      return false;
    }
    if (d->dtype.code != kDLInt || d->dtype.bits != 32 || d->dtype.lanes != 1 || d->ndim != 1 ||
        (d->strides != nullptr && d->shape[0] > 1 && d->strides[0] != 1)) {
      RaiseStatus(KILN_ERROR_INVALID_ARGUMENT,
                  (std::string(api) + ": " + name + ": expected a contiguous 1-D int32 host array").c_str());
      return false;
    }
    const int32_t* p = static_cast<const int32_t*>(t.data());
    out->assign(p, p + d->shape[0]);
    return true;
  }
  PyObject* seq = PySequence_Fast(obj, "");
  if (seq == nullptr) {
    PyErr_Clear();
    RaiseStatus(KILN_ERROR_INVALID_ARGUMENT,
                (std::string(api) + ": " + name + ": expected a host int32 array or a sequence of ints, found " +
                 Py_TYPE(obj)->tp_name)
                    .c_str());
    return false;
  }
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  out->resize(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
    if (v == -1 && PyErr_Occurred()) {
      Py_DECREF(seq);
      return false;
    }
    if (v < INT32_MIN || v > INT32_MAX) {
      Py_DECREF(seq);
      RaiseStatus(KILN_ERROR_INVALID_ARGUMENT, (std::string(api) + ": " + name + ": entry " + std::to_string(i) +
                                                " = " + std::to_string(v) + " does not fit in int32")
                                                   .c_str());
      return false;
    }
    (*out)[static_cast<size_t>(i)] = static_cast<int32_t>(v);
  }
  Py_DECREF(seq);
  return true;
}

// Argument helpers: each returns false with a Python exception set.
bool ArgCount(const char* fn, Py_ssize_t n, Py_ssize_t want) {
  if (n == want) return true;
  PyErr_Format(PyExc_TypeError, "_native.%s takes %zd arguments, %zd given", fn, want, n);
  return false;
}
bool Double(PyObject* o, double* v) {
  *v = PyFloat_AsDouble(o);
  return !(*v == -1.0 && PyErr_Occurred());
}
bool Int64(PyObject* o, int64_t* v) {
  *v = PyLong_AsLongLong(o);
  return !(*v == -1 && PyErr_Occurred());
}
bool UInt64(PyObject* o, uint64_t* v) {
  *v = PyLong_AsUnsignedLongLongMask(o);  // seeds and offsets wrap as in C
  return !(*v == static_cast<uint64_t>(-1) && PyErr_Occurred());
}
bool Stream(PyObject* o, void** v) {
  if (o == Py_None) {
    *v = nullptr;
    return true;
  }
  *v = PyLong_AsVoidPtr(o);
  return !(*v == nullptr && PyErr_Occurred());
}

#define KILN_CALL(expr)   \
  kiln_status status_;    \
  Py_BEGIN_ALLOW_THREADS; \
  status_ = (expr);       \
  Py_END_ALLOW_THREADS;   \
  return Finish(status_)

// ---- common ----------------------------------------------------------------------------------

PyObject* SetErrorClasses(PyObject*, PyObject* classes) {
  if (!PyTuple_Check(classes)) return PyErr_Format(PyExc_TypeError, "expected a tuple of exception classes");
  Py_INCREF(classes);
  Py_XSETREF(g_error_classes, classes);
  Py_RETURN_NONE;
}

// _register_torch(torch.Tensor, torch._C._to_dlpack)
PyObject* RegisterTorch(PyObject*, PyObject* const* a, Py_ssize_t n) {
  if (!ArgCount("_register_torch", n, 2)) return nullptr;
  if (!PyType_Check(a[0]) || !PyCallable_Check(a[1]))
    return PyErr_Format(PyExc_TypeError, "_register_torch: expected (torch.Tensor, torch._C._to_dlpack)");
  Py_INCREF(a[0]);
  Py_INCREF(a[1]);
  Py_XSETREF(g_torch_tensor, reinterpret_cast<PyTypeObject*>(a[0]));
  Py_XSETREF(g_torch_to_dlpack, a[1]);
  Py_RETURN_NONE;
}

PyObject* Version(PyObject*, PyObject*) { return PyUnicode_FromString(kiln_version()); }

PyObject* StatusName(PyObject*, PyObject* code) {
  long c = PyLong_AsLong(code);
  if (c == -1 && PyErr_Occurred()) return nullptr;
  return PyUnicode_FromString(kiln_status_name(static_cast<kiln_status>(c)));
}

PyObject* Connect(PyObject*, PyObject* const* a, Py_ssize_t n) {
  if (!ArgCount("connect", n, 2)) return nullptr;
  const char* socket = a[0] == Py_None ? nullptr : PyUnicode_AsUTF8(a[0]);
  if (a[0] != Py_None && socket == nullptr) return nullptr;
  long timeout_ms = PyLong_AsLong(a[1]);
  if (timeout_ms == -1 && PyErr_Occurred()) return nullptr;
  // A negative timeout means "set the socket only" (kiln_set_socket).
  if (timeout_ms < 0) {
    KILN_CALL(kiln_set_socket(socket));
  }
  KILN_CALL(kiln_connect(socket, static_cast<int>(timeout_ms)));
}

// mode: None or a word ("auto", "daemon", "embedded"); the library checks the word.
PyObject* SetMode(PyObject*, PyObject* mode) {
  const char* word = mode == Py_None ? nullptr : PyUnicode_AsUTF8(mode);
  if (mode != Py_None && word == nullptr) return nullptr;
  KILN_CALL(kiln_set_mode(word));
}

// prefetch(op, params, arch): params are "KEY=VALUE" words; returns the summary string.
PyObject* Prefetch(PyObject*, PyObject* const* a, Py_ssize_t n) {
  if (!ArgCount("prefetch", n, 3)) return nullptr;
  const char* op = PyUnicode_AsUTF8(a[0]);
  const char* params = op == nullptr ? nullptr : PyUnicode_AsUTF8(a[1]);
  const char* arch = params == nullptr ? nullptr : PyUnicode_AsUTF8(a[2]);
  if (arch == nullptr) return nullptr;
  const char* summary = nullptr;
  kiln_status status;
  // A compile can take seconds: other Python threads run meanwhile.
  Py_BEGIN_ALLOW_THREADS;
  status = kiln_prefetch(op, params, arch, &summary);
  Py_END_ALLOW_THREADS;
  if (status != KILN_OK) return Finish(status);
  return PyUnicode_FromString(summary);
}

PyObject* DescribeMode(PyObject*, PyObject*) {
  const char* described;
  // It may start the embedded engine (its SQLite index, its threads): not under the GIL.
  Py_BEGIN_ALLOW_THREADS;
  described = kiln_describe_mode();
  Py_END_ALLOW_THREADS;
  return PyUnicode_FromString(described);
}

// ---- norm, activation ------------------------------------------------------------------------

PyObject* RmsNorm(PyObject*, PyObject* const* a, Py_ssize_t n) {
  TensorArg out, input, weight;
  double eps;
  void* stream;
  if (!ArgCount("rms_norm", n, 5) || !out.Set(a[0], "out", false) || !input.Set(a[1], "input", false) ||
      !weight.Set(a[2], "weight", false) || !Double(a[3], &eps) || !Stream(a[4], &stream))
    return nullptr;
  KILN_CALL(kiln_rms_norm(out.get(), input.get(), weight.get(), eps, stream));
}

PyObject* FusedAddRmsNorm(PyObject*, PyObject* const* a, Py_ssize_t n) {
  TensorArg input, residual, weight;
  double eps;
  void* stream;
  if (!ArgCount("fused_add_rms_norm", n, 5) || !input.Set(a[0], "input", false) ||
      !residual.Set(a[1], "residual", false) || !weight.Set(a[2], "weight", false) || !Double(a[3], &eps) ||
      !Stream(a[4], &stream))
    return nullptr;
  KILN_CALL(kiln_fused_add_rms_norm(input.get(), residual.get(), weight.get(), eps, stream));
}

template <kiln_status (*F)(DLTensor*, const DLTensor*, void*)>
PyObject* GatedActivation(PyObject*, PyObject* const* a, Py_ssize_t n) {
  TensorArg out, input;
  void* stream;
  if (!ArgCount("activation", n, 3) || !out.Set(a[0], "out", false) || !input.Set(a[1], "input", false) ||
      !Stream(a[2], &stream))
    return nullptr;
  KILN_CALL(F(out.get(), input.get(), stream));
}

// ---- rope ------------------------------------------------------------------------------------

// apply_rope(q, k, positions, rotary_dim, interleaved, theta, llama31, stream); llama31 is None
// or (factor, low_freq_factor, high_freq_factor, original_max_position).
PyObject* ApplyRopeScaled(PyObject*, PyObject* const* a, Py_ssize_t n) {
  TensorArg q, k, positions;
  int64_t rotary_dim;
  int interleaved;
  double theta;
  void* stream;
  kiln_llama31_rope_scaling scaling{};
  if (!ArgCount("apply_rope", n, 8) || !q.Set(a[0], "q", false) || !k.Set(a[1], "k", false) ||
      !positions.Set(a[2], "positions", false) || !Int64(a[3], &rotary_dim) ||
      (interleaved = PyObject_IsTrue(a[4])) < 0 || !Double(a[5], &theta) || !Stream(a[7], &stream))
    return nullptr;
  const bool scaled = a[6] != Py_None;
  if (scaled && !PyArg_ParseTuple(a[6],
                                  "dddL;llama31: expected (factor, low_freq_factor, high_freq_factor, "
                                  "original_max_position)",
                                  &scaling.factor, &scaling.low_freq_factor, &scaling.high_freq_factor,
                                  &scaling.original_max_position))
    return nullptr;
  KILN_CALL(kiln_apply_rope(q.get(), k.get(), positions.get(), rotary_dim, interleaved, theta,
                            scaled ? &scaling : nullptr, stream));
}

PyObject* ApplyRopeWithCosSinCache(PyObject*, PyObject* const* a, Py_ssize_t n) {
  TensorArg q, k, positions, cache;
  int interleaved;
  void* stream;
  if (!ArgCount("apply_rope_with_cos_sin_cache", n, 6) || !q.Set(a[0], "q", false) || !k.Set(a[1], "k", false) ||
      !positions.Set(a[2], "positions", false) || !cache.Set(a[3], "cos_sin_cache", false) ||
      (interleaved = PyObject_IsTrue(a[4])) < 0 || !Stream(a[5], &stream))
    return nullptr;
  KILN_CALL(kiln_apply_rope_with_cos_sin_cache(q.get(), k.get(), positions.get(), cache.get(), interleaved, stream));
}

// ---- paged KV, decode ------------------------------------------------------------------------

PyObject* AppendPagedKv(PyObject*, PyObject* const* a, Py_ssize_t n) {
  TensorArg k_cache, v_cache, k, v, batch_indices, positions, kv_indptr, kv_indices, kv_last_page_len;
  void* stream;
  if (!ArgCount("append_paged_kv", n, 10) || !k_cache.Set(a[0], "k_cache", false) ||
      !v_cache.Set(a[1], "v_cache", false) || !k.Set(a[2], "k", false) || !v.Set(a[3], "v", false) ||
      !batch_indices.Set(a[4], "batch_indices", false) || !positions.Set(a[5], "positions", false) ||
      !kv_indptr.Set(a[6], "kv_indptr", false) || !kv_indices.Set(a[7], "kv_indices", false) ||
      !kv_last_page_len.Set(a[8], "kv_last_page_len", false) || !Stream(a[9], &stream))
    return nullptr;
  KILN_CALL(kiln_append_paged_kv(k_cache.get(), v_cache.get(), k.get(), v.get(), batch_indices.get(), positions.get(),
                                 kv_indptr.get(), kv_indices.get(), kv_last_page_len.get(), stream));
}

constexpr const char* kDecodePlanCapsule = "kiln_batch_decode_plan";
constexpr const char* kPrefillPlanCapsule = "kiln_batch_prefill_plan";

void DestroyDecodePlan(PyObject* capsule) {
  kiln_batch_decode_plan_destroy(
      static_cast<kiln_batch_decode_plan*>(PyCapsule_GetPointer(capsule, kDecodePlanCapsule)));
}
void DestroyPrefillPlan(PyObject* capsule) {
  kiln_batch_prefill_plan_destroy(
      static_cast<kiln_batch_prefill_plan*>(PyCapsule_GetPointer(capsule, kPrefillPlanCapsule)));
}

bool DType(PyObject* code, PyObject* bits, DLDataType* t) {
  long c = PyLong_AsLong(code), b = PyLong_AsLong(bits);
  if (PyErr_Occurred()) return false;
  *t = DLDataType{static_cast<uint8_t>(c), static_cast<uint8_t>(b), 1};
  return true;
}

// The host copies' lengths: batch_size entries of `per_request`, batch_size + 1 of `indptr`.
bool CheckLength(const char* api, const char* name, const std::vector<int32_t>& v, size_t want) {
  if (v.size() == want) return true;
  RaiseStatus(KILN_ERROR_INVALID_ARGUMENT, (std::string(api) + ": " + name + ": expected " + std::to_string(want) +
                                            " entries, found " + std::to_string(v.size()))
                                               .c_str());
  return false;
}

// decode_plan(kv_indptr_host, kv_last_page_len_host, num_qo_heads, num_kv_heads, head_dim,
//             page_size, dtype_code, dtype_bits, sm_scale, logits_soft_cap, window_left, device)
// -> (capsule, workspace_bytes); batch_size = len(kv_last_page_len_host).
PyObject* DecodePlan(PyObject*, PyObject* const* a, Py_ssize_t n) {
  const char* api = "kiln.BatchDecodePlan";
  std::vector<int32_t> indptr, last;
  int64_t qo, kv, hd, ps, window;
  double sm_scale, cap;
  DLDataType dtype;
  long device;
  if (!ArgCount("decode_plan", n, 12) || !HostInt32(a[0], api, "kv_indptr", &indptr) ||
      !HostInt32(a[1], api, "kv_last_page_len", &last) || !Int64(a[2], &qo) || !Int64(a[3], &kv) || !Int64(a[4], &hd) ||
      !Int64(a[5], &ps) || !DType(a[6], a[7], &dtype) || !Double(a[8], &sm_scale) || !Double(a[9], &cap) ||
      !Int64(a[10], &window))
    return nullptr;
  device = PyLong_AsLong(a[11]);
  if (device == -1 && PyErr_Occurred()) return nullptr;
  if (!CheckLength(api, "kv_indptr", indptr, last.size() + 1)) return nullptr;
  kiln_batch_decode_plan* plan = nullptr;
  kiln_status status;
  Py_BEGIN_ALLOW_THREADS;
  status = kiln_batch_decode_plan_create(indptr.data(), last.data(), static_cast<int64_t>(last.size()), qo, kv, hd, ps,
                                         dtype, sm_scale, cap, window, static_cast<int>(device), &plan);
  Py_END_ALLOW_THREADS;
  if (status != KILN_OK) return RaiseStatus(status, kiln_last_error());
  PyObject* capsule = PyCapsule_New(plan, kDecodePlanCapsule, DestroyDecodePlan);
  if (capsule == nullptr) {
    kiln_batch_decode_plan_destroy(plan);
    return nullptr;
  }
  return Py_BuildValue("(Nn)", capsule, static_cast<Py_ssize_t>(kiln_batch_decode_plan_workspace_bytes(plan)));
}

// batch_decode(plan, out, lse, q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len,
//              workspace, stream)
PyObject* BatchDecode(PyObject*, PyObject* const* a, Py_ssize_t n) {
  TensorArg out, lse, q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, workspace;
  void* stream;
  if (!ArgCount("batch_decode", n, 11)) return nullptr;
  auto* plan = static_cast<kiln_batch_decode_plan*>(PyCapsule_GetPointer(a[0], kDecodePlanCapsule));
  if (plan == nullptr || !out.Set(a[1], "out", false) || !lse.Set(a[2], "lse", true) || !q.Set(a[3], "q", false) ||
      !k_cache.Set(a[4], "k_cache", false) || !v_cache.Set(a[5], "v_cache", false) ||
      !kv_indptr.Set(a[6], "kv_indptr", false) || !kv_indices.Set(a[7], "kv_indices", false) ||
      !kv_last_page_len.Set(a[8], "kv_last_page_len", false) || !workspace.Set(a[9], "workspace", true) ||
      !Stream(a[10], &stream))
    return nullptr;
  KILN_CALL(kiln_batch_decode(plan, out.get(), lse.get(), q.get(), k_cache.get(), v_cache.get(), kv_indptr.get(),
                              kv_indices.get(), kv_last_page_len.get(), workspace.data(), workspace.bytes(), stream));
}

// ---- prefill ---------------------------------------------------------------------------------

PyObject* FinishPrefillPlan(kiln_status status, kiln_batch_prefill_plan* plan) {
  if (status != KILN_OK) return RaiseStatus(status, kiln_last_error());
  PyObject* capsule = PyCapsule_New(plan, kPrefillPlanCapsule, DestroyPrefillPlan);
  if (capsule == nullptr) {
    kiln_batch_prefill_plan_destroy(plan);
    return nullptr;
  }
  return Py_BuildValue("(Nn)", capsule, static_cast<Py_ssize_t>(kiln_batch_prefill_plan_workspace_bytes(plan)));
}

// prefill_plan_ragged(qo_indptr_host, kv_indptr_host, num_qo_heads, num_kv_heads, head_dim,
//                     dtype_code, dtype_bits, causal, sm_scale, logits_soft_cap, window_left, device)
PyObject* PrefillPlanRagged(PyObject*, PyObject* const* a, Py_ssize_t n) {
  const char* api = "kiln.BatchPrefillPlan.ragged";
  std::vector<int32_t> qo_indptr, kv_indptr;
  int64_t qo, kv, hd, window;
  double sm_scale, cap;
  DLDataType dtype;
  int causal;
  long device;
  if (!ArgCount("prefill_plan_ragged", n, 12) || !HostInt32(a[0], api, "qo_indptr", &qo_indptr) ||
      !HostInt32(a[1], api, "kv_indptr", &kv_indptr) || !Int64(a[2], &qo) || !Int64(a[3], &kv) || !Int64(a[4], &hd) ||
      !DType(a[5], a[6], &dtype) || (causal = PyObject_IsTrue(a[7])) < 0 || !Double(a[8], &sm_scale) ||
      !Double(a[9], &cap) || !Int64(a[10], &window))
    return nullptr;
  device = PyLong_AsLong(a[11]);
  if (device == -1 && PyErr_Occurred()) return nullptr;
  if (qo_indptr.empty()) {
    return RaiseStatus(KILN_ERROR_INVALID_ARGUMENT,
                       (std::string(api) + ": qo_indptr: expected batch_size + 1 entries, found 0").c_str());
  }
  if (!CheckLength(api, "kv_indptr", kv_indptr, qo_indptr.size())) return nullptr;
  kiln_batch_prefill_plan* plan = nullptr;
  kiln_status status;
  Py_BEGIN_ALLOW_THREADS;
  status = kiln_batch_prefill_plan_create_ragged(qo_indptr.data(), kv_indptr.data(),
                                                 static_cast<int64_t>(qo_indptr.size()) - 1, qo, kv, hd, dtype, causal,
                                                 sm_scale, cap, window, static_cast<int>(device), &plan);
  Py_END_ALLOW_THREADS;
  return FinishPrefillPlan(status, plan);
}

// prefill_plan_paged(qo_indptr_host, kv_indptr_host, kv_last_page_len_host, num_qo_heads,
//                    num_kv_heads, head_dim, page_size, dtype_code, dtype_bits, causal, sm_scale,
//                    logits_soft_cap, window_left, device)
PyObject* PrefillPlanPaged(PyObject*, PyObject* const* a, Py_ssize_t n) {
  const char* api = "kiln.BatchPrefillPlan.paged";
  std::vector<int32_t> qo_indptr, kv_indptr, last;
  int64_t qo, kv, hd, ps, window;
  double sm_scale, cap;
  DLDataType dtype;
  int causal;
  long device;
  if (!ArgCount("prefill_plan_paged", n, 14) || !HostInt32(a[0], api, "qo_indptr", &qo_indptr) ||
      !HostInt32(a[1], api, "kv_indptr", &kv_indptr) || !HostInt32(a[2], api, "kv_last_page_len", &last) ||
      !Int64(a[3], &qo) || !Int64(a[4], &kv) || !Int64(a[5], &hd) || !Int64(a[6], &ps) || !DType(a[7], a[8], &dtype) ||
      (causal = PyObject_IsTrue(a[9])) < 0 || !Double(a[10], &sm_scale) || !Double(a[11], &cap) ||
      !Int64(a[12], &window))
    return nullptr;
  device = PyLong_AsLong(a[13]);
  if (device == -1 && PyErr_Occurred()) return nullptr;
  if (!CheckLength(api, "qo_indptr", qo_indptr, last.size() + 1) ||
      !CheckLength(api, "kv_indptr", kv_indptr, last.size() + 1))
    return nullptr;
  kiln_batch_prefill_plan* plan = nullptr;
  kiln_status status;
  Py_BEGIN_ALLOW_THREADS;
  status = kiln_batch_prefill_plan_create_paged(qo_indptr.data(), kv_indptr.data(), last.data(),
                                                static_cast<int64_t>(last.size()), qo, kv, hd, ps, dtype, causal,
                                                sm_scale, cap, window, static_cast<int>(device), &plan);
  Py_END_ALLOW_THREADS;
  return FinishPrefillPlan(status, plan);
}

// prefill_ragged(plan, out, lse, q, k, v, qo_indptr, kv_indptr, workspace, stream)
PyObject* PrefillRagged(PyObject*, PyObject* const* a, Py_ssize_t n) {
  TensorArg out, lse, q, k, v, qo_indptr, kv_indptr, workspace;
  void* stream;
  if (!ArgCount("prefill_ragged", n, 10)) return nullptr;
  auto* plan = static_cast<kiln_batch_prefill_plan*>(PyCapsule_GetPointer(a[0], kPrefillPlanCapsule));
  if (plan == nullptr || !out.Set(a[1], "out", false) || !lse.Set(a[2], "lse", true) || !q.Set(a[3], "q", false) ||
      !k.Set(a[4], "k", false) || !v.Set(a[5], "v", false) || !qo_indptr.Set(a[6], "qo_indptr", false) ||
      !kv_indptr.Set(a[7], "kv_indptr", false) || !workspace.Set(a[8], "workspace", true) || !Stream(a[9], &stream))
    return nullptr;
  KILN_CALL(kiln_batch_prefill_ragged(plan, out.get(), lse.get(), q.get(), k.get(), v.get(), qo_indptr.get(),
                                      kv_indptr.get(), workspace.data(), workspace.bytes(), stream));
}

// prefill_paged(plan, out, lse, q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices,
//               kv_last_page_len, workspace, stream)
PyObject* PrefillPaged(PyObject*, PyObject* const* a, Py_ssize_t n) {
  TensorArg out, lse, q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, workspace;
  void* stream;
  if (!ArgCount("prefill_paged", n, 12)) return nullptr;
  auto* plan = static_cast<kiln_batch_prefill_plan*>(PyCapsule_GetPointer(a[0], kPrefillPlanCapsule));
  if (plan == nullptr || !out.Set(a[1], "out", false) || !lse.Set(a[2], "lse", true) || !q.Set(a[3], "q", false) ||
      !k_cache.Set(a[4], "k_cache", false) || !v_cache.Set(a[5], "v_cache", false) ||
      !qo_indptr.Set(a[6], "qo_indptr", false) || !kv_indptr.Set(a[7], "kv_indptr", false) ||
      !kv_indices.Set(a[8], "kv_indices", false) || !kv_last_page_len.Set(a[9], "kv_last_page_len", false) ||
      !workspace.Set(a[10], "workspace", true) || !Stream(a[11], &stream))
    return nullptr;
  KILN_CALL(kiln_batch_prefill_paged(plan, out.get(), lse.get(), q.get(), k_cache.get(), v_cache.get(), qo_indptr.get(),
                                     kv_indptr.get(), kv_indices.get(), kv_last_page_len.get(), workspace.data(),
                                     workspace.bytes(), stream));
}

// ---- sampling --------------------------------------------------------------------------------

// top_k_sampling(samples, probs, top_k, top_k_scalar, seed, offset, stream)
PyObject* TopKSampling(PyObject*, PyObject* const* a, Py_ssize_t n) {
  TensorArg samples, probs, top_k;
  int64_t k;
  uint64_t seed, offset;
  void* stream;
  if (!ArgCount("top_k_sampling", n, 7) || !samples.Set(a[0], "samples", false) || !probs.Set(a[1], "probs", false) ||
      !top_k.Set(a[2], "top_k", true) || !Int64(a[3], &k) || !UInt64(a[4], &seed) || !UInt64(a[5], &offset) ||
      !Stream(a[6], &stream))
    return nullptr;
  KILN_CALL(kiln_top_k_sampling(samples.get(), probs.get(), top_k.get(), k, seed, offset, stream));
}

// top_p_sampling / min_p_sampling(samples, probs, param, param_scalar, seed, offset, stream)
template <kiln_status (*F)(DLTensor*, const DLTensor*, const DLTensor*, double, uint64_t, uint64_t, void*)>
PyObject* ThresholdSampling(PyObject*, PyObject* const* a, Py_ssize_t n) {
  TensorArg samples, probs, param;
  double p;
  uint64_t seed, offset;
  void* stream;
  if (!ArgCount("sampling", n, 7) || !samples.Set(a[0], "samples", false) || !probs.Set(a[1], "probs", false) ||
      !param.Set(a[2], F == kiln_top_p_sampling ? "top_p" : "min_p", true) || !Double(a[3], &p) ||
      !UInt64(a[4], &seed) || !UInt64(a[5], &offset) || !Stream(a[6], &stream))
    return nullptr;
  KILN_CALL(F(samples.get(), probs.get(), param.get(), p, seed, offset, stream));
}

// top_k_top_p_sampling(samples, probs, top_k, top_k_scalar, top_p, top_p_scalar, seed, offset, stream)
PyObject* TopKTopPSampling(PyObject*, PyObject* const* a, Py_ssize_t n) {
  TensorArg samples, probs, top_k, top_p;
  int64_t k;
  double p;
  uint64_t seed, offset;
  void* stream;
  if (!ArgCount("top_k_top_p_sampling", n, 9) || !samples.Set(a[0], "samples", false) ||
      !probs.Set(a[1], "probs", false) || !top_k.Set(a[2], "top_k", true) || !Int64(a[3], &k) ||
      !top_p.Set(a[4], "top_p", true) || !Double(a[5], &p) || !UInt64(a[6], &seed) || !UInt64(a[7], &offset) ||
      !Stream(a[8], &stream))
    return nullptr;
  KILN_CALL(
      kiln_top_k_top_p_sampling(samples.get(), probs.get(), top_k.get(), k, top_p.get(), p, seed, offset, stream));
}

PyObject* Argmax(PyObject*, PyObject* const* a, Py_ssize_t n) {
  TensorArg samples, probs;
  void* stream;
  if (!ArgCount("argmax", n, 3) || !samples.Set(a[0], "samples", false) || !probs.Set(a[1], "probs", false) ||
      !Stream(a[2], &stream))
    return nullptr;
  KILN_CALL(kiln_argmax(samples.get(), probs.get(), stream));
}

// ---- moe -------------------------------------------------------------------------------------

// moe_route(topk_ids, topk_weights, logits, correction_bias, scoring, renormalize, n_group, topk_group,
//           routed_scaling_factor, stream); correction_bias may be None
PyObject* MoeRoute(PyObject*, PyObject* const* a, Py_ssize_t n) {
  TensorArg ids, weights, logits, bias;
  int64_t scoring, n_group, topk_group;
  int renormalize;
  double scale;
  void* stream;
  if (!ArgCount("moe_route", n, 10) || !ids.Set(a[0], "topk_ids", false) || !weights.Set(a[1], "topk_weights", false) ||
      !logits.Set(a[2], "logits", false) || !bias.Set(a[3], "correction_bias", true) || !Int64(a[4], &scoring) ||
      (renormalize = PyObject_IsTrue(a[5])) < 0 || !Int64(a[6], &n_group) || !Int64(a[7], &topk_group) ||
      !Double(a[8], &scale) || !Stream(a[9], &stream))
    return nullptr;
  KILN_CALL(kiln_moe_route(ids.get(), weights.get(), logits.get(), bias.get(), static_cast<kiln_moe_scoring>(scoring),
                           renormalize, n_group, topk_group, scale, stream));
}

// moe_permute(expert_counts, m_indptr, row_to_slot, slot_to_row, permuted_x, topk_ids, x, align, stream);
// permuted_x and x may be None (no gather)
PyObject* MoePermute(PyObject*, PyObject* const* a, Py_ssize_t n) {
  TensorArg counts, indptr, row_to_slot, slot_to_row, permuted_x, ids, x;
  int64_t align;
  void* stream;
  if (!ArgCount("moe_permute", n, 9) || !counts.Set(a[0], "expert_counts", false) ||
      !indptr.Set(a[1], "m_indptr", false) || !row_to_slot.Set(a[2], "row_to_slot", false) ||
      !slot_to_row.Set(a[3], "slot_to_row", false) || !permuted_x.Set(a[4], "permuted_x", true) ||
      !ids.Set(a[5], "topk_ids", false) || !x.Set(a[6], "x", true) || !Int64(a[7], &align) || !Stream(a[8], &stream))
    return nullptr;
  KILN_CALL(kiln_moe_permute(counts.get(), indptr.get(), row_to_slot.get(), slot_to_row.get(), permuted_x.get(),
                             ids.get(), x.get(), align, stream));
}

// moe_unpermute(out, expert_out, slot_to_row, topk_weights, stream)
PyObject* MoeUnpermute(PyObject*, PyObject* const* a, Py_ssize_t n) {
  TensorArg out, expert_out, slot_to_row, weights;
  void* stream;
  if (!ArgCount("moe_unpermute", n, 5) || !out.Set(a[0], "out", false) || !expert_out.Set(a[1], "expert_out", false) ||
      !slot_to_row.Set(a[2], "slot_to_row", false) || !weights.Set(a[3], "topk_weights", false) ||
      !Stream(a[4], &stream))
    return nullptr;
  KILN_CALL(kiln_moe_unpermute(out.get(), expert_out.get(), slot_to_row.get(), weights.get(), stream));
}

// fused_moe(out, x, w13, w2, topk_ids, topk_weights, workspace, stream)
PyObject* FusedMoe(PyObject*, PyObject* const* a, Py_ssize_t n) {
  TensorArg out, x, w13, w2, ids, weights, workspace;
  void* stream;
  if (!ArgCount("fused_moe", n, 8) || !out.Set(a[0], "out", false) || !x.Set(a[1], "x", false) ||
      !w13.Set(a[2], "w13", false) || !w2.Set(a[3], "w2", false) || !ids.Set(a[4], "topk_ids", false) ||
      !weights.Set(a[5], "topk_weights", false) || !workspace.Set(a[6], "workspace", false) || !Stream(a[7], &stream))
    return nullptr;
  KILN_CALL(kiln_fused_moe(out.get(), x.get(), w13.get(), w2.get(), ids.get(), weights.get(), workspace.get(), stream));
}

// fused_moe_workspace_bytes(tokens, top_k, experts, hidden, intermediate): the C header's
// KILN_FUSED_MOE_WORKSPACE_BYTES (kiln.fused_moe_workspace_bytes computes it in Python; the tests
// compare the two).
PyObject* FusedMoeWorkspaceBytes(PyObject*, PyObject* const* a, Py_ssize_t n) {
  int64_t v[5];
  if (!ArgCount("fused_moe_workspace_bytes", n, 5)) return nullptr;
  for (int i = 0; i < 5; ++i)
    if (!Int64(a[i], &v[i])) return nullptr;
  return PyLong_FromLongLong(KILN_FUSED_MOE_WORKSPACE_BYTES(v[0], v[1], v[2], v[3], v[4]));
}

// fused_moe_fp8(out, x, w13, w13_scales, w2, w2_scales, topk_ids, topk_weights, workspace, stream)
PyObject* FusedMoeFp8(PyObject*, PyObject* const* a, Py_ssize_t n) {
  TensorArg out, x, w13, w13_scales, w2, w2_scales, ids, weights, workspace;
  void* stream;
  if (!ArgCount("fused_moe_fp8", n, 10) || !out.Set(a[0], "out", false) || !x.Set(a[1], "x", false) ||
      !w13.Set(a[2], "w13", false) || !w13_scales.Set(a[3], "w13_scales", false) || !w2.Set(a[4], "w2", false) ||
      !w2_scales.Set(a[5], "w2_scales", false) || !ids.Set(a[6], "topk_ids", false) ||
      !weights.Set(a[7], "topk_weights", false) || !workspace.Set(a[8], "workspace", false) || !Stream(a[9], &stream))
    return nullptr;
  KILN_CALL(kiln_fused_moe_fp8(out.get(), x.get(), w13.get(), w13_scales.get(), w2.get(), w2_scales.get(), ids.get(),
                               weights.get(), workspace.get(), stream));
}

// fused_moe_fp8_workspace_bytes(tokens, top_k, experts, hidden, intermediate): the C header's
// KILN_FUSED_MOE_FP8_WORKSPACE_BYTES (compared with the Python function by the tests).
PyObject* FusedMoeFp8WorkspaceBytes(PyObject*, PyObject* const* a, Py_ssize_t n) {
  int64_t v[5];
  if (!ArgCount("fused_moe_fp8_workspace_bytes", n, 5)) return nullptr;
  for (int i = 0; i < 5; ++i)
    if (!Int64(a[i], &v[i])) return nullptr;
  return PyLong_FromLongLong(KILN_FUSED_MOE_FP8_WORKSPACE_BYTES(v[0], v[1], v[2], v[3], v[4]));
}

// ---- gemm ------------------------------------------------------------------------------------

// gemm(d, a, b, bias, c, beta, stream)
PyObject* Gemm(PyObject*, PyObject* const* a, Py_ssize_t n) {
  TensorArg d, ta, tb, bias, c;
  double beta;
  void* stream;
  if (!ArgCount("gemm", n, 7) || !d.Set(a[0], "d", false) || !ta.Set(a[1], "a", false) || !tb.Set(a[2], "b", false) ||
      !bias.Set(a[3], "bias", true) || !c.Set(a[4], "c", true) || !Double(a[5], &beta) || !Stream(a[6], &stream))
    return nullptr;
  KILN_CALL(kiln_gemm(d.get(), ta.get(), tb.get(), bias.get(), c.get(), beta, stream));
}

// grouped_gemm / grouped_gemm_masked(d, a, b, m_indptr or masked_m, stream)
template <kiln_status (*F)(DLTensor*, const DLTensor*, const DLTensor*, const DLTensor*, void*)>
PyObject* GroupedGemm(PyObject*, PyObject* const* a, Py_ssize_t n) {
  TensorArg d, ta, tb, groups;
  void* stream;
  if (!ArgCount("grouped_gemm", n, 5) || !d.Set(a[0], "d", false) || !ta.Set(a[1], "a", false) ||
      !tb.Set(a[2], "b", false) || !groups.Set(a[3], F == kiln_grouped_gemm ? "m_indptr" : "masked_m", false) ||
      !Stream(a[4], &stream))
    return nullptr;
  KILN_CALL(F(d.get(), ta.get(), tb.get(), groups.get(), stream));
}

// fp8_gemm(d, a, b, a_scales, b_scales, stream)
PyObject* Fp8Gemm(PyObject*, PyObject* const* a, Py_ssize_t n) {
  TensorArg d, ta, tb, sa, sb;
  void* stream;
  if (!ArgCount("fp8_gemm", n, 6) || !d.Set(a[0], "d", false) || !ta.Set(a[1], "a", false) ||
      !tb.Set(a[2], "b", false) || !sa.Set(a[3], "a_scales", false) || !sb.Set(a[4], "b_scales", false) ||
      !Stream(a[5], &stream))
    return nullptr;
  KILN_CALL(kiln_fp8_gemm(d.get(), ta.get(), tb.get(), sa.get(), sb.get(), stream));
}

// grouped_fp8_gemm / grouped_fp8_gemm_masked(d, a, b, a_scales, b_scales, m_indptr or masked_m, stream)
template <kiln_status (*F)(DLTensor*, const DLTensor*, const DLTensor*, const DLTensor*, const DLTensor*,
                           const DLTensor*, void*)>
PyObject* GroupedFp8Gemm(PyObject*, PyObject* const* a, Py_ssize_t n) {
  TensorArg d, ta, tb, sa, sb, groups;
  void* stream;
  if (!ArgCount("grouped_fp8_gemm", n, 7) || !d.Set(a[0], "d", false) || !ta.Set(a[1], "a", false) ||
      !tb.Set(a[2], "b", false) || !sa.Set(a[3], "a_scales", false) || !sb.Set(a[4], "b_scales", false) ||
      !groups.Set(a[5], F == kiln_grouped_fp8_gemm ? "m_indptr" : "masked_m", false) || !Stream(a[6], &stream))
    return nullptr;
  KILN_CALL(F(d.get(), ta.get(), tb.get(), sa.get(), sb.get(), groups.get(), stream));
}

// ---- comm (kiln/comm.h) --------------------------------------------------------------------------
// A communicator lives in a CommHolder behind a capsule. close() (comm_destroy) frees it early;
// registered tensors keep the capsule alive (their DLPack deleter drops the reference), and
// close() is refused while any is alive, since their memory goes with the communicator.

constexpr const char* kCommCapsule = "kiln_comm";

struct CommHolder {
  kiln_comm* comm = nullptr;
  Py_ssize_t live_tensors = 0;
};

void DestroyCommCapsule(PyObject* capsule) {
  auto* holder = static_cast<CommHolder*>(PyCapsule_GetPointer(capsule, kCommCapsule));
  if (holder == nullptr) return;
  kiln_comm* comm = holder->comm;
  delete holder;
  Py_BEGIN_ALLOW_THREADS;
  kiln_comm_destroy(comm);  // waits for this rank's work on it
  Py_END_ALLOW_THREADS;
}

// The open communicator of a capsule, or NULL with an exception naming `api`.
kiln_comm* OpenComm(PyObject* capsule, const char* api, CommHolder** holder_out = nullptr) {
  auto* holder = static_cast<CommHolder*>(PyCapsule_GetPointer(capsule, kCommCapsule));
  if (holder == nullptr) return nullptr;
  if (holder->comm == nullptr) {
    RaiseStatus(KILN_ERROR_FAILED_PRECONDITION, (std::string(api) + ": the communicator is closed").c_str());
    return nullptr;
  }
  if (holder_out != nullptr) *holder_out = holder;
  return holder->comm;
}

// device, buffer_bytes, setup_timeout_ms, kernel_timeout_ms -> kiln_comm_options
bool CommOptions(PyObject* const* a, kiln_comm_options* options) {
  kiln_comm_options_init(options);
  int64_t device, setup, kernel;
  uint64_t buffer;
  if (!Int64(a[0], &device) || !UInt64(a[1], &buffer) || !Int64(a[2], &setup) || !Int64(a[3], &kernel)) return false;
  if (device < INT32_MIN || device > INT32_MAX || setup > INT32_MAX || kernel > INT32_MAX || setup < INT32_MIN ||
      kernel < INT32_MIN) {
    PyErr_SetString(PyExc_OverflowError, "kiln.comm: device or a timeout does not fit in int32");
    return false;
  }
  options->device = static_cast<int>(device);
  options->buffer_bytes = static_cast<size_t>(buffer);
  options->setup_timeout_ms = static_cast<int>(setup);
  options->kernel_timeout_ms = static_cast<int>(kernel);
  return true;
}

PyObject* FinishComm(kiln_status status, kiln_comm* comm) {
  if (status != KILN_OK) return RaiseStatus(status, kiln_last_error());
  auto* holder = new CommHolder{comm, 0};
  PyObject* capsule = PyCapsule_New(holder, kCommCapsule, DestroyCommCapsule);
  if (capsule == nullptr) {
    delete holder;
    kiln_comm_destroy(comm);
  }
  return capsule;
}

// comm_create(rank, world_size, address, device, buffer_bytes, setup_timeout_ms,
//             kernel_timeout_ms) -> capsule; address None: from the environment (kiln-launch).
PyObject* CommCreate(PyObject*, PyObject* const* a, Py_ssize_t n) {
  if (!ArgCount("comm_create", n, 7)) return nullptr;
  kiln_comm_options options;
  if (!CommOptions(a + 3, &options)) return nullptr;
  kiln_comm* comm = nullptr;
  kiln_status status;
  if (a[2] == Py_None) {
    // Waits for the other ranks (up to the setup timeout): not under the GIL.
    Py_BEGIN_ALLOW_THREADS;
    status = kiln_comm_create_from_env(&options, &comm);
    Py_END_ALLOW_THREADS;
    return FinishComm(status, comm);
  }
  long rank = PyLong_AsLong(a[0]), world = PyLong_AsLong(a[1]);
  if (PyErr_Occurred()) return nullptr;
  const char* address = PyUnicode_AsUTF8(a[2]);
  if (address == nullptr) return nullptr;
  if (rank < INT32_MIN || rank > INT32_MAX || world < INT32_MIN || world > INT32_MAX)
    return RaiseStatus(KILN_ERROR_INVALID_ARGUMENT, "kiln.comm.Communicator: rank or world_size does not fit in int32");
  std::string owned(address);
  Py_BEGIN_ALLOW_THREADS;
  status = kiln_comm_create(static_cast<int>(rank), static_cast<int>(world), owned.c_str(), &options, &comm);
  Py_END_ALLOW_THREADS;
  return FinishComm(status, comm);
}

// comm_info(capsule) -> (rank, world_size, device)
PyObject* CommInfo(PyObject*, PyObject* capsule) {
  kiln_comm* comm = OpenComm(capsule, "kiln.comm.Communicator");
  if (comm == nullptr) return nullptr;
  return Py_BuildValue("(iii)", kiln_comm_rank(comm), kiln_comm_world_size(comm), kiln_comm_device(comm));
}

// comm_destroy(capsule): frees the communicator now (waits for its work); a closed one is left.
PyObject* CommDestroy(PyObject*, PyObject* capsule) {
  auto* holder = static_cast<CommHolder*>(PyCapsule_GetPointer(capsule, kCommCapsule));
  if (holder == nullptr) return nullptr;
  if (holder->live_tensors > 0)
    return RaiseStatus(KILN_ERROR_FAILED_PRECONDITION,
                       ("kiln.comm.Communicator.close: " + std::to_string(holder->live_tensors) +
                        " registered tensor(s) still alive; their memory is the communicator's (drop them first)")
                           .c_str());
  kiln_comm* comm = holder->comm;
  holder->comm = nullptr;
  Py_BEGIN_ALLOW_THREADS;
  kiln_comm_destroy(comm);
  Py_END_ALLOW_THREADS;
  Py_RETURN_NONE;
}

// all_reduce(capsule, out, in, algorithm, stream)
PyObject* AllReduce(PyObject*, PyObject* const* a, Py_ssize_t n) {
  TensorArg out, in;
  void* stream;
  long algorithm;
  if (!ArgCount("all_reduce", n, 5)) return nullptr;
  kiln_comm* comm = OpenComm(a[0], "kiln.comm.Communicator.all_reduce");
  if (comm == nullptr || !out.Set(a[1], "out", false) || !in.Set(a[2], "input", false)) return nullptr;
  algorithm = PyLong_AsLong(a[3]);
  if ((algorithm == -1 && PyErr_Occurred()) || !Stream(a[4], &stream)) return nullptr;
  KILN_CALL(kiln_all_reduce(comm, out.get(), in.get(), static_cast<kiln_all_reduce_algorithm>(algorithm), stream));
}

// all_reduce_add_rms_norm(capsule, out, in, residual, weight, eps, stream)
PyObject* AllReduceAddRmsNorm(PyObject*, PyObject* const* a, Py_ssize_t n) {
  TensorArg out, in, residual, weight;
  double eps;
  void* stream;
  if (!ArgCount("all_reduce_add_rms_norm", n, 7)) return nullptr;
  kiln_comm* comm = OpenComm(a[0], "kiln.comm.Communicator.all_reduce_add_rms_norm");
  if (comm == nullptr || !out.Set(a[1], "out", false) || !in.Set(a[2], "input", false) ||
      !residual.Set(a[3], "residual", false) || !weight.Set(a[4], "weight", false) || !Double(a[5], &eps) ||
      !Stream(a[6], &stream))
    return nullptr;
  KILN_CALL(kiln_all_reduce_add_rms_norm(comm, out.get(), in.get(), residual.get(), weight.get(), eps, stream));
}

// comm_synchronize(capsule, stream); comm_async_error(capsule)
PyObject* CommSynchronize(PyObject*, PyObject* const* a, Py_ssize_t n) {
  void* stream;
  if (!ArgCount("comm_synchronize", n, 2)) return nullptr;
  kiln_comm* comm = OpenComm(a[0], "kiln.comm.Communicator.synchronize");
  if (comm == nullptr || !Stream(a[1], &stream)) return nullptr;
  KILN_CALL(kiln_comm_synchronize(comm, stream));
}

PyObject* CommAsyncError(PyObject*, PyObject* capsule) {
  kiln_comm* comm = OpenComm(capsule, "kiln.comm.Communicator.check");
  if (comm == nullptr) return nullptr;
  return Finish(kiln_comm_async_error(comm));
}

// A registered buffer as a DLPack tensor: the managed tensor holds a reference to the
// communicator's capsule, dropped by its deleter (under the GIL: a consumer may free it anywhere).
struct RegisteredTensor {
  DLManagedTensor managed;
  std::vector<int64_t> shape;
  PyObject* owner;  // the communicator's capsule
};

void DeleteRegisteredTensor(DLManagedTensor* self) {
  auto* t = static_cast<RegisteredTensor*>(self->manager_ctx);
  PyGILState_STATE gil = PyGILState_Ensure();
  auto* holder = static_cast<CommHolder*>(PyCapsule_GetPointer(t->owner, kCommCapsule));
  if (holder != nullptr) --holder->live_tensors;
  Py_DECREF(t->owner);
  PyGILState_Release(gil);
  delete t;
}

void DestroyUnusedDLTensorCapsule(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;  // consumed ("used_dltensor"): the consumer owns it
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  managed->deleter(managed);
}

// comm_alloc_registered(capsule, shape, dtype_code, dtype_bits) -> a "dltensor" capsule over a
// new registered buffer of that shape (contiguous) on the communicator's device.
PyObject* CommAllocRegistered(PyObject*, PyObject* const* a, Py_ssize_t n) {
  const char* api = "kiln.comm.Communicator.registered_empty";
  if (!ArgCount("comm_alloc_registered", n, 4)) return nullptr;
  CommHolder* holder = nullptr;
  kiln_comm* comm = OpenComm(a[0], api, &holder);
  DLDataType dtype;
  if (comm == nullptr || !DType(a[2], a[3], &dtype)) return nullptr;
  PyObject* seq = PySequence_Fast(a[1], "kiln.comm: shape must be a sequence of ints");
  if (seq == nullptr) return nullptr;
  std::vector<int64_t> shape;
  size_t bytes = (dtype.bits + 7) / 8;
  bool overflow = false;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); ++i) {
    int64_t d;
    if (!Int64(PySequence_Fast_GET_ITEM(seq, i), &d)) {
      Py_DECREF(seq);
      return nullptr;
    }
    if (d < 0) {
      Py_DECREF(seq);
      return RaiseStatus(KILN_ERROR_INVALID_ARGUMENT,
                         (std::string(api) + ": shape[" + std::to_string(i) + "] is negative").c_str());
    }
    shape.push_back(d);
    if (d != 0 && bytes > SIZE_MAX / static_cast<size_t>(d)) overflow = true;
    bytes *= static_cast<size_t>(d);
  }
  Py_DECREF(seq);
  if (overflow) return RaiseStatus(KILN_ERROR_INVALID_ARGUMENT, (std::string(api) + ": shape is too large").c_str());
  void* ptr = nullptr;
  kiln_status status;
  Py_BEGIN_ALLOW_THREADS;  // collective: waits for the peers to map it
  status = kiln_comm_alloc_registered(comm, bytes, &ptr);
  Py_END_ALLOW_THREADS;
  if (status != KILN_OK) return RaiseStatus(status, kiln_last_error());
  auto* t = new RegisteredTensor{};
  t->shape = std::move(shape);
  t->owner = a[0];
  Py_INCREF(t->owner);
  ++holder->live_tensors;
  DLTensor& dl = t->managed.dl_tensor;
  dl.data = ptr;
  dl.device = DLDevice{kDLCUDA, kiln_comm_device(comm)};
  dl.ndim = static_cast<int32_t>(t->shape.size());
  dl.dtype = dtype;
  dl.shape = t->shape.data();
  dl.strides = nullptr;  // contiguous
  dl.byte_offset = 0;
  t->managed.manager_ctx = t;
  t->managed.deleter = DeleteRegisteredTensor;
  PyObject* capsule = PyCapsule_New(&t->managed, "dltensor", DestroyUnusedDLTensorCapsule);
  if (capsule == nullptr) DeleteRegisteredTensor(&t->managed);
  return capsule;
}

#define FASTCALL(name, fn) \
  { name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(fn)), METH_FASTCALL, nullptr }

PyMethodDef kMethods[] = {{"_set_error_classes", SetErrorClasses, METH_O, nullptr},
                          FASTCALL("_register_torch", RegisterTorch),
                          {"version", Version, METH_NOARGS, nullptr},
                          {"status_name", StatusName, METH_O, nullptr},
                          FASTCALL("connect", Connect),
                          {"set_mode", SetMode, METH_O, nullptr},
                          {"describe_mode", DescribeMode, METH_NOARGS, nullptr},
                          FASTCALL("prefetch", Prefetch),
                          FASTCALL("rms_norm", RmsNorm),
                          FASTCALL("fused_add_rms_norm", FusedAddRmsNorm),
                          FASTCALL("silu_and_mul", GatedActivation<kiln_silu_and_mul>),
                          FASTCALL("gelu_and_mul", GatedActivation<kiln_gelu_and_mul>),
                          FASTCALL("gelu_tanh_and_mul", GatedActivation<kiln_gelu_tanh_and_mul>),
                          FASTCALL("apply_rope", ApplyRopeScaled),
                          FASTCALL("apply_rope_with_cos_sin_cache", ApplyRopeWithCosSinCache),
                          FASTCALL("append_paged_kv", AppendPagedKv),
                          FASTCALL("decode_plan", DecodePlan),
                          FASTCALL("batch_decode", BatchDecode),
                          FASTCALL("prefill_plan_ragged", PrefillPlanRagged),
                          FASTCALL("prefill_plan_paged", PrefillPlanPaged),
                          FASTCALL("prefill_ragged", PrefillRagged),
                          FASTCALL("prefill_paged", PrefillPaged),
                          FASTCALL("top_k_sampling", TopKSampling),
                          FASTCALL("top_p_sampling", ThresholdSampling<kiln_top_p_sampling>),
                          FASTCALL("min_p_sampling", ThresholdSampling<kiln_min_p_sampling>),
                          FASTCALL("top_k_top_p_sampling", TopKTopPSampling),
                          FASTCALL("argmax", Argmax),
                          FASTCALL("moe_route", MoeRoute),
                          FASTCALL("moe_permute", MoePermute),
                          FASTCALL("moe_unpermute", MoeUnpermute),
                          FASTCALL("fused_moe", FusedMoe),
                          FASTCALL("fused_moe_workspace_bytes", FusedMoeWorkspaceBytes),
                          FASTCALL("fused_moe_fp8", FusedMoeFp8),
                          FASTCALL("fused_moe_fp8_workspace_bytes", FusedMoeFp8WorkspaceBytes),
                          FASTCALL("gemm", Gemm),
                          FASTCALL("grouped_gemm", GroupedGemm<kiln_grouped_gemm>),
                          FASTCALL("grouped_gemm_masked", GroupedGemm<kiln_grouped_gemm_masked>),
                          FASTCALL("fp8_gemm", Fp8Gemm),
                          FASTCALL("grouped_fp8_gemm", GroupedFp8Gemm<kiln_grouped_fp8_gemm>),
                          FASTCALL("grouped_fp8_gemm_masked", GroupedFp8Gemm<kiln_grouped_fp8_gemm_masked>),
                          FASTCALL("comm_create", CommCreate),
                          {"comm_info", CommInfo, METH_O, nullptr},
                          {"comm_destroy", CommDestroy, METH_O, nullptr},
                          FASTCALL("all_reduce", AllReduce),
                          FASTCALL("all_reduce_add_rms_norm", AllReduceAddRmsNorm),
                          FASTCALL("comm_synchronize", CommSynchronize),
                          {"comm_async_error", CommAsyncError, METH_O, nullptr},
                          FASTCALL("comm_alloc_registered", CommAllocRegistered),
                          {nullptr, nullptr, 0, nullptr}};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "kiln._native", "The C ABI of libkiln_client (kiln/kiln.h).", -1,
                       kMethods};

}  // namespace

PyMODINIT_FUNC PyInit__native(void) {
  g_dlpack_name = PyUnicode_InternFromString("__dlpack__");
  if (g_dlpack_name == nullptr) return nullptr;
  PyObject* m = PyModule_Create(&kModule);
  if (m == nullptr) return nullptr;
  if (PyModule_AddStringConstant(m, "header_version", KILN_VERSION_STRING) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
