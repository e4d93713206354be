#include "python/src/dtype.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "pybind11/pybind11.h"

namespace py = pybind11;

namespace gpumux::python {

Dtype DtypeOf(const std::string& name) {
  static const std::pair<const char*, Dtype> kNames[] = {
      {"float32", Dtype::kFloat32},   {"float", Dtype::kFloat32},   {"float64", Dtype::kFloat64},
      {"double", Dtype::kFloat64},    {"float16", Dtype::kFloat16}, {"half", Dtype::kFloat16},
      {"bfloat16", Dtype::kBFloat16}, {"int32", Dtype::kInt32},     {"int", Dtype::kInt32},
      {"int64", Dtype::kInt64},       {"long", Dtype::kInt64},      {"uint8", Dtype::kUInt8},
  };
  for (const auto& [text, dtype] : kNames) {
    if (name == text) return dtype;
  }
  throw py::value_error(absl::StrCat("unknown dtype '", name,
                                     "': expected float32, float64, float16, bfloat16, int32, "
                                     "int64 or uint8"));
}

const char* DtypeName(Dtype dtype) {
  switch (dtype) {
    case Dtype::kFloat32:
      return "float32";
    case Dtype::kFloat64:
      return "float64";
    case Dtype::kFloat16:
      return "float16";
    case Dtype::kBFloat16:
      return "bfloat16";
    case Dtype::kInt32:
      return "int32";
    case Dtype::kInt64:
      return "int64";
    case Dtype::kUInt8:
      return "uint8";
  }
  return "uint8";
}

}  // namespace gpumux::python
