// Internal: dtype and op checks shared by the Runtime and the devices, so
// that a rule and its message live in one place.
// Thread-safety: stateless.
#ifndef TENSORD_CORE_BASE_OP_CHECKS_H_
#define TENSORD_CORE_BASE_OP_CHECKS_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "core/base/device.h"
#include "core/base/dtype.h"

namespace tensord::core {

// INVALID_ARGUMENT unless `dtype` is one of the DType enumerators (the value
// may come from a cast integer).
absl::Status ValidateDType(DType dtype);

// Dtype rules of the binary ops that hold on every device (PyTorch's):
// FAILED_PRECONDITION for bool subtraction and bool pow, OK otherwise.
absl::Status CheckBinaryOpDType(BinaryOp op, DType dtype);

// FAILED_PRECONDITION for neg of bool (PyTorch's message), abs/relu of
// bool, and silu/gelu of a non-floating dtype (PyTorch's activations take
// floating tensors only); OK otherwise (the other floating unary ops of
// bool/int run on float32).
absl::Status CheckUnaryOpDType(UnaryOp op, DType dtype);

// BOOL tensors hold one byte per element, 0 or 1 (tensord.proto); data
// from a client is checked, never normalised. INVALID_ARGUMENT naming the
// first other byte and its offset (`at` + its index: `bytes` lie at that
// offset of the tensor); OK otherwise.
absl::Status CheckBoolData(std::span<const uint8_t> bytes, uint64_t at);

// FAILED_PRECONDITION: "\"<op>\" not implemented for '<Long>'": torch's words
// (the dtype as its ScalarType), where `op` is the name of torch's CPU
// kernel for the op where the planner knows it ("addmm_impl_cpu_").
absl::Status NotImplementedError(std::string_view op, DType dtype);
// The same words with " on <device>" after them, for a kernel one device
// lacks (its capability table, core/base/device.h), which torch has no message
// for: "\"matmul\" not implemented for 'Bool' on cuda:1".
absl::Status NotImplementedError(std::string_view op, DType dtype,
                                 std::string_view device);

// The name NotImplementedError uses for an OpKind ("fill", "matmul", ...).
std::string_view OpKindName(OpKind op);

// OUT_OF_RANGE unless [offset, offset + bytes) lies inside `buffer`: the
// bounds check every device does before a copy.
absl::Status CheckRange(const Buffer& buffer, size_t offset, size_t bytes);

// A client's text as a message or log line may quote it: `text` itself, or
// its first `max_bytes` bytes (never splitting a UTF-8 sequence) then
// "... (N bytes)". Every client-sent string echoed back goes through this,
// so one long name cannot blow up a reply's metadata or the log.
std::string Echo(std::string_view text, size_t max_bytes = 64);

// "512.00 MiB"; "100 bytes" below 1 KiB. For messages.
std::string FormatBytes(uint64_t bytes);

}  // namespace tensord::core

#endif  // TENSORD_CORE_BASE_OP_CHECKS_H_
