#include "client/ops/op_args.h"

#include <cstdlib>

#include "client/core/api/invalid_argument.h"
#include "client/core/capi/dlpack_tensor.h"

namespace kiln::client {
namespace {

// strtod / strtoll / strtoull over the whole text, as the call record wrote it.
template <typename T, typename Parse>
bool ParseWhole(const std::string& text, T* value, Parse parse) {
  char* end = nullptr;
  const auto v = parse(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0') return false;
  *value = static_cast<T>(v);
  return true;
}

}  // namespace

TraceWriter& TraceWriter::PerRequest(const char* name, const ops::PerRequestInt& p) {
  return p.values != nullptr ? In(name, p.values) : Param(name, p.scalar);
}

TraceWriter& TraceWriter::PerRequest(const char* name, const ops::PerRequestFloat& p) {
  return p.values != nullptr ? In(name, p.values) : Param(name, p.scalar);
}

void ArgReader::Fail(std::string message) {
  if (status_.ok()) status_ = InvalidArgument(std::move(message));
}

ArgReader& ArgReader::Need(const char* name, const TensorView*& t) {
  t = args_.Tensor(name);
  if (t == nullptr) Fail("the call records no tensor '" + std::string(name) + "'");
  return *this;
}

const std::string* ArgReader::Text(const char* name) {
  const std::string* text = args_.Param(name);
  if (text == nullptr) Fail("the call records no param '" + std::string(name) + "'");
  return text;
}

ArgReader& ArgReader::Param(const char* name, double& value) {
  const std::string* text = Text(name);
  if (text != nullptr && !ParseWhole(*text, &value, [](const char* s, char** e) { return std::strtod(s, e); }))
    Fail("param " + std::string(name) + "='" + *text + "' is not a number");  // strtod reads inf and nan too
  return *this;
}

ArgReader& ArgReader::Param(const char* name, float& value) {
  double d = 0;
  Param(name, d);
  value = static_cast<float>(d);
  return *this;
}

ArgReader& ArgReader::Param(const char* name, int64_t& value) {
  const std::string* text = Text(name);
  if (text != nullptr && !ParseWhole(*text, &value, [](const char* s, char** e) { return std::strtoll(s, e, 10); }))
    Fail("param " + std::string(name) + "='" + *text + "' is not an integer");
  return *this;
}

ArgReader& ArgReader::Param(const char* name, int& value) {
  int64_t v = 0;
  Param(name, v);
  value = static_cast<int>(v);
  return *this;
}

ArgReader& ArgReader::Param(const char* name, uint64_t& value) {
  const std::string* text = Text(name);
  if (text != nullptr && !ParseWhole(*text, &value, [](const char* s, char** e) { return std::strtoull(s, e, 10); }))
    Fail("param " + std::string(name) + "='" + *text + "' is not an integer");
  return *this;
}

ArgReader& ArgReader::Param(const char* name, bool& value) {
  const std::string* text = Text(name);
  if (text == nullptr) return *this;
  if (*text != "true" && *text != "false") Fail("param " + std::string(name) + "='" + *text + "' is not true/false");
  value = *text == "true";
  return *this;
}

ArgReader& ArgReader::Param(const char* name, std::string& value) {
  if (const std::string* text = Text(name)) value = *text;
  return *this;
}

ArgReader& ArgReader::PerRequest(const char* name, ops::PerRequestInt& p) {
  if ((p.values = args_.Tensor(name)) != nullptr) return *this;
  return Param(name, p.scalar);
}

ArgReader& ArgReader::PerRequest(const char* name, ops::PerRequestFloat& p) {
  if ((p.values = args_.Tensor(name)) != nullptr) return *this;
  return Param(name, p.scalar);
}

const TensorView* CTensors::Tensor(const DLTensor* t, const char* name) {
  if (!status_.ok()) return nullptr;
  if (count_ == kMax) {
    status_ = Status(StatusCode::kInternal, "more than " + std::to_string(kMax) + " tensor arguments");
    return nullptr;
  }
  auto view = FromDLTensor(t, name);
  if (!view.ok()) {
    status_ = view.status();
    return nullptr;
  }
  views_[static_cast<size_t>(count_)] = *view;
  return &views_[static_cast<size_t>(count_++)];
}

StatusOr<const TensorView*> ReplayWorkspace(NamedArgs& named, int64_t bytes, TensorView* scratch) {
  if (const TensorView* own = named.Tensor("workspace"); own != nullptr) return own;
  KILN_ASSIGN_OR_RETURN(void* memory, named.Scratch(static_cast<size_t>(bytes)));
  *scratch = TensorView::Contiguous(memory, DType::kUInt8, {bytes}, Device::CUDA(named.device()));
  return scratch;
}

}  // namespace kiln::client
