#include "core/base/dtype.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/base/absl_compat.h"

namespace tensord::core {
namespace {

// Promotion rank along bool < int32 < int64 < float16/bfloat16 < float32 <
// float64. float16 and bfloat16 share a rank; PromoteTypes resolves the tie.
int PromotionRank(DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return 0;
    case DType::kInt32:
      return 1;
    case DType::kInt64:
      return 2;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 3;
    case DType::kFloat32:
      return 4;
    case DType::kFloat64:
      return 5;
  }
  return -1;
}

// PyTorch's categories for result_type: bool < integral < floating.
int Category(DType dtype) {
  if (dtype == DType::kBool) return 0;
  return IsIntegral(dtype) ? 1 : 2;
}

}  // namespace

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kFloat64:
      return 8;
    case DType::kInt32:
      return 4;
    case DType::kInt64:
      return 8;
    case DType::kBool:
      return 1;
    case DType::kFloat16:
      return 2;
    case DType::kBFloat16:
      return 2;
  }
  return 0;  // Not a DType value; IsValidDType() callers never get here.
}

std::string_view ScalarTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "Float";
    case DType::kFloat64:
      return "Double";
    case DType::kInt32:
      return "Int";
    case DType::kInt64:
      return "Long";
    case DType::kBool:
      return "Bool";
    case DType::kFloat16:
      return "Half";
    case DType::kBFloat16:
      return "BFloat16";
  }
  return "Undefined";
}

std::string_view CppTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float";
    case DType::kFloat64:
      return "double";
    case DType::kInt32:
      return "int";
    case DType::kInt64:
      return "long int";
    case DType::kBool:
      return "bool";
    case DType::kFloat16:
      return "c10::Half";
    case DType::kBFloat16:
      return "c10::BFloat16";
  }
  return "unknown";
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kBool:
      return "bool";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
  }
  return "invalid";
}

absl::StatusOr<DType> ParseDType(std::string_view name) {
  struct Spelling {
    std::string_view name;
    DType dtype;
  };
  static constexpr Spelling kSpellings[] = {
      {"float32", DType::kFloat32}, {"float", DType::kFloat32},
      {"float64", DType::kFloat64}, {"double", DType::kFloat64},
      {"int32", DType::kInt32},     {"int", DType::kInt32},
      {"int64", DType::kInt64},     {"long", DType::kInt64},
      {"bool", DType::kBool},       {"float16", DType::kFloat16},
      {"half", DType::kFloat16},    {"bfloat16", DType::kBFloat16},
  };
  for (const Spelling& s : kSpellings) {
    if (s.name == name) return s.dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dtype '", ToAbsl(name),
      "'; expected one of float32, float64, float16, bfloat16, int32, int64, "
      "bool"));
}

bool IsFloating(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 ||
         dtype == DType::kFloat16 || dtype == DType::kBFloat16;
}

bool IsIntegral(DType dtype) {
  return dtype == DType::kInt32 || dtype == DType::kInt64;
}

DType PromoteTypes(DType a, DType b) {
  if (a == b) return a;
  if ((a == DType::kFloat16 && b == DType::kBFloat16) ||
      (a == DType::kBFloat16 && b == DType::kFloat16)) {
    return DType::kFloat32;
  }
  return PromotionRank(a) >= PromotionRank(b) ? a : b;
}

DType ResultType(DType a, bool a_is_scalar, DType b, bool b_is_scalar) {
  if (a_is_scalar == b_is_scalar) return PromoteTypes(a, b);
  // c10's combine_categories(dim_result, zero_dim_result): the 0-d operand
  // only matters when it is of a higher category than the dimensioned one.
  const DType dim = a_is_scalar ? b : a;
  const DType zero_dim = a_is_scalar ? a : b;
  if (Category(zero_dim) > Category(dim)) return PromoteTypes(dim, zero_dim);
  return dim;
}

}  // namespace tensord::core
