// Element types and PyTorch's type-promotion rules.
// Thread-safety: stateless.
#ifndef TENSORD_CORE_BASE_DTYPE_H_
#define TENSORD_CORE_BASE_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tensord::core {

// Numbering matches tensord.v1.DType, but the server converts explicitly.
enum class DType : int {
  kFloat32 = 1,
  kFloat64 = 2,
  kInt32 = 3,
  kInt64 = 4,
  kBool = 5,
  kFloat16 = 6,
  kBFloat16 = 7,
};
// Every dtype, in enum order.
inline constexpr DType kEveryDType[] = {
    DType::kFloat32, DType::kFloat64, DType::kInt32,   DType::kInt64,
    DType::kBool,    DType::kFloat16, DType::kBFloat16};

// Bytes per element.
size_t DTypeSize(DType dtype);

// PyTorch spelling without the "torch." prefix: "float32", "int64", "bool".
std::string_view DTypeName(DType dtype);
// PyTorch's ScalarType name, as torch's messages spell a dtype ("Float",
// "Double", "Half", "BFloat16", "Int", "Long", "Bool").
std::string_view ScalarTypeName(DType dtype);
// The C++ type's name as torch's TypeMeta spells it in a few messages
// ("float", "double", "c10::Half", "long int").
std::string_view CppTypeName(DType dtype);

// Parses DTypeName()'s spelling (also "float", "double", "int", "long",
// "half", "bfloat16"). INVALID_ARGUMENT naming the text otherwise.
absl::StatusOr<DType> ParseDType(std::string_view name);

bool IsFloating(DType dtype);  // float16/bfloat16/float32/float64
bool IsIntegral(DType dtype);  // int32/int64 (not bool)

// torch.promote_types(a, b): bool < int32 < int64 < float16/bfloat16 <
// float32 < float64; float16 with bfloat16 gives float32.
DType PromoteTypes(DType a, DType b);

// torch.result_type for two tensor operands, including the rule that a 0-d
// operand does not raise the dtype of a dimensioned operand of the same or a
// higher category (bool < integral < floating). `a_is_scalar` is true when
// operand a is 0-d.
DType ResultType(DType a, bool a_is_scalar, DType b, bool b_is_scalar);

}  // namespace tensord::core

#endif  // TENSORD_CORE_BASE_DTYPE_H_
