// The value types the client library speaks in: devices, element types,
// device and tensor metadata, op selectors, Python-number operands.
// Part of the client library (tensord/client.h includes every part).
// Thread-safety: value types.
#ifndef TENSORD_CLIENT_TENSORD_TYPES_H_
#define TENSORD_CLIENT_TENSORD_TYPES_H_

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace tensord::client {

// ---------------------------------------------------------------------------
// Devices and element types

// A device name as the server spells it: "cpu", "cpu:1", "cuda:0". Names are
// checked by the server (unknown kinds are INVALID_ARGUMENT, absent devices
// NOT_FOUND); tensors report the server's canonical name.
class Device {
 public:
  Device(std::string name) : name_(std::move(name)) {}  // NOLINT: implicit
  Device(const char* name) : name_(name) {}             // NOLINT: implicit

  const std::string& str() const { return name_; }
  // The part before ':' ("cpu" or "cuda").
  std::string_view type() const;
  bool is_cuda() const { return type() == "cuda"; }

  friend bool operator==(const Device&, const Device&) = default;

 private:
  std::string name_;
};

std::ostream& operator<<(std::ostream& os, const Device& device);

// Element types; values match the wire enum tensord.v1.DType.
enum class DType : int {
  kFloat32 = 1,
  kFloat64 = 2,
  kInt32 = 3,
  kInt64 = 4,
  kBool = 5,
  kFloat16 = 6,
  kBFloat16 = 7,
};

// PyTorch's spelling without "torch.": "float32", "int64", "bool", ...
std::string_view DTypeName(DType dtype);
// Bytes per element (bool is one byte).
size_t DTypeSize(DType dtype);
std::ostream& operator<<(std::ostream& os, DType dtype);

// The DType of a C++ element type: float, double, int32_t, int64_t, bool.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> : std::integral_constant<DType, DType::kFloat32> {};
template <>
struct DTypeOf<double> : std::integral_constant<DType, DType::kFloat64> {};
template <>
struct DTypeOf<int32_t> : std::integral_constant<DType, DType::kInt32> {};
template <>
struct DTypeOf<int64_t> : std::integral_constant<DType, DType::kInt64> {};
template <>
struct DTypeOf<bool> : std::integral_constant<DType, DType::kBool> {};
template <typename T>
inline constexpr DType kDTypeOf = DTypeOf<T>::value;

// What ListDevices reports about one device (nvidia-smi-like).
struct DeviceInfo {
  std::string name;            // canonical name: "cpu", "cpu:1", "cuda:0"
                               // ("tensord-0/cuda:0" as a Cluster names it)
  std::string node;            // the server's node name (--node-name)
  std::string kind;            // "cpu" or "cuda"
  std::string model;           // CPU model or GPU product name
  uint64_t total_memory = 0;   // bytes the device has
  uint64_t free_memory = 0;    // bytes free as the OS/driver says
  uint64_t held_memory = 0;    // bytes held by tensord's live tensors
  uint64_t memory_budget = 0;  // bytes tensord may hold on the device
  int32_t compute_capability_major = 0;  // GPUs only
  int32_t compute_capability_minor = 0;  // GPUs only
  int32_t multiprocessor_count = 0;      // GPUs only
  uint64_t live_tensors = 0;
};

// Metadata of one live tensor of the session (ListTensors).
struct TensorInfo {
  uint64_t handle = 0;
  std::string device;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;  // empty = 0-d
  uint64_t nbytes = 0;
  std::string tag;
  int64_t age_ms = 0;   // since creation
  int64_t idle_ms = 0;  // since last use
};


// Op selectors; values match the wire enums (tensord.v1.BinaryOp, ...).
enum class BinaryOp : int {
  kAdd = 1, kSub, kMul, kDiv, kMaximum, kMinimum, kPow,
  kEq, kNe, kLt, kLe, kGt, kGe,
};
// UnaryOp: one per unary row of the op table, generated from it.
#define TENSORD_OP_ENUMS
#include "tensord/op_methods.inc"  // generated (core/base/gen_op_table.py)
#undef TENSORD_OP_ENUMS
enum class ReduceOp : int { kSum = 1, kMean, kMax, kMin, kArgmax, kNorm };

// A Python number as an operand (PyTorch's "wrapped number"): it promotes by
// category only, so `int32_tensor * 2` stays int32 and `int_tensor * 0.5`
// is float32. Integral C++ types make an integer, floating ones a float.
class Scalar {
 public:
  template <std::integral T>
  Scalar(T v) : is_integral_(true), i_(static_cast<int64_t>(v)) {}  // NOLINT
  template <std::floating_point T>
  Scalar(T v) : f_(static_cast<double>(v)) {}  // NOLINT
  bool is_integral() const { return is_integral_; }
  int64_t int_value() const { return i_; }
  double float_value() const { return f_; }

 private:
  bool is_integral_ = false;
  int64_t i_ = 0;
  double f_ = 0;
};

}  // namespace tensord::client

#endif  // TENSORD_CLIENT_TENSORD_TYPES_H_
