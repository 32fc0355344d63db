// The tensord C++ client: PyTorch's device model, served remotely.
//
//   tensord::Client client("127.0.0.1:50051");           // or TENSORD_ADDRESS
//   auto dev = client.try_gpu(0);                         // cuda:0 or cpu
//   auto x = client.tensor<int64_t>({1, 2, 3});           // on cpu
//   auto y = client.tensor<int64_t>({5, 8, 1}, dev);      // made on `dev`
//   auto z = x.to(dev) * y;                               // runs remotely
//   std::cout << z << "\n";                               // tensor([ 5, 16,
//   3]...) std::vector<int64_t> host = z.fetch<int64_t>();       // the one
//   host copy
//
// A Client opens a session on the server; every Tensor it makes is an RAII
// handle to a tensor living in that session on some device. The last copy of
// a Tensor releases the remote tensor; the session is closed when the Client
// and all of its Tensors are gone. Data crosses the wire only when a tensor
// is made from host data and when it is fetched (fetch(), item(), printing).
//
// Errors: every failure (from the server or detected by the client) is
// thrown as tensord::Error carrying a gRPC status code and a message; the
// server's codes and messages are passed through unchanged.
//
// Thread-safety: a Client and its Tensors may be used from several threads
// at once. Copying a Client or a Tensor shares the underlying session or
// remote tensor, like copying a std::shared_ptr.
//
// This header names no generated protobuf type; the library depends only on
// the wire contract (proto/tensord/v1/tensord.proto) and gRPC.
#ifndef TENSORD_CLIENT_TENSORD_CLIENT_H_
#define TENSORD_CLIENT_TENSORD_CLIENT_H_

#include <grpcpp/channel.h>
#include <grpcpp/support/status_code_enum.h>

#include <bit>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <filesystem>
#include <map>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace tensord::client {

static_assert(std::endian::native == std::endian::little,
              "the wire format is little-endian; big-endian hosts would need "
              "byte swapping in the client");

// The client library's version ("0.1.0").
std::string_view Version();

// The address a Client dials when given "": $TENSORD_ADDRESS if set and not
// empty, else "127.0.0.1:50051".
std::string ResolveAddress(std::string_view address = "");

// ---------------------------------------------------------------------------
// Errors

using StatusCode = grpc::StatusCode;

// "INVALID_ARGUMENT", "NOT_FOUND", ...; "UNKNOWN_CODE(<n>)" for codes gRPC
// does not define.
std::string_view StatusCodeName(StatusCode code);

// A failed call. what() is "<CODE_NAME>: <message>", e.g.
// "FAILED_PRECONDITION: Expected all tensors to be on the same device, ...".
class Error : public std::runtime_error {
 public:
  Error(StatusCode code, std::string message);

  StatusCode code() const { return code_; }
  // The server's (or the client's) message without the code prefix.
  const std::string& message() const { return message_; }

 private:
  StatusCode code_;
  std::string message_;
};

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

// ---------------------------------------------------------------------------
// Tensors

class Client;
struct ClientOptions;
class Batch;
class SharedMemoryRegion;
namespace internal {
class Session;
struct TensorState;
struct BatchState;
struct TensorAccess;
// Maps and zeroes the whole pages of [p, p + n) in one system call
// (MADV_POPULATE_WRITE, Linux 5.14+) instead of one fault per 4 KiB page
// on first touch, when n is at least 2 MiB; a no-op for smaller n and where
// the kernel lacks it. Only for memory nothing has touched yet: on
// resident pages it costs about as much as the copy it would speed up.
void PrefaultForWrite(void* p, size_t n);
}  // namespace internal

// Op selectors; values match the wire enums (tensord.v1.BinaryOp, ...).
enum class BinaryOp : int {
  kAdd = 1, kSub, kMul, kDiv, kMaximum, kMinimum, kPow,
  kEq, kNe, kLt, kLe, kGt, kGe,
};
enum class UnaryOp : int {
  kNeg = 1, kAbs, kExp, kLog, kSqrt, kRelu, kSigmoid, kTanh,
};
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

// An RAII handle to a tensor living on a device of the server. Copies share
// the remote tensor; the last copy to go releases it (a failure to release
// is ignored: the session's close frees it anyway). Metadata accessors are
// local; fetch(), item(), str() and operator<< transfer the data.
class Tensor {
 public:
  Tensor(const Tensor&) = default;
  Tensor& operator=(const Tensor&) = default;
  Tensor(Tensor&&) = default;
  Tensor& operator=(Tensor&&) = default;
  ~Tensor();

  uint64_t handle() const;
  const Device& device() const;
  DType dtype() const;
  const std::vector<int64_t>& shape() const;
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t numel() const;
  uint64_t nbytes() const;

  // PyTorch's `a is b`: both name the same remote tensor.
  bool is(const Tensor& other) const;

  // The tensor on `device`. If it already lives there this returns the same
  // tensor (is() holds) unless `copy` forces a new one. Moves happen inside
  // the server; nothing reaches the client.
  Tensor to(const Device& device, bool copy = false) const;
  Tensor cpu() const { return to("cpu"); }
  Tensor cuda(int index = 0) const {
    return to("cuda:" + std::to_string(index));
  }

  // Elementwise with broadcasting and PyTorch type promotion; both operands
  // must live on one device (FAILED_PRECONDITION otherwise). `/` is true
  // division (integers give float32).
  friend Tensor operator+(const Tensor& a, const Tensor& b);
  friend Tensor operator-(const Tensor& a, const Tensor& b);
  friend Tensor operator*(const Tensor& a, const Tensor& b);
  friend Tensor operator/(const Tensor& a, const Tensor& b);
  friend Tensor operator+(const Tensor& a, Scalar b);
  friend Tensor operator-(const Tensor& a, Scalar b);
  friend Tensor operator*(const Tensor& a, Scalar b);
  friend Tensor operator/(const Tensor& a, Scalar b);
  friend Tensor operator+(Scalar a, const Tensor& b);
  friend Tensor operator-(Scalar a, const Tensor& b);
  friend Tensor operator*(Scalar a, const Tensor& b);
  friend Tensor operator/(Scalar a, const Tensor& b);
  Tensor operator-() const { return neg(); }
  // Any binary op, tensor (op) tensor or tensor (op) number. Comparisons
  // (kEq .. kGe) give bool.
  Tensor binary(BinaryOp op, const Tensor& other) const;
  Tensor binary(BinaryOp op, Scalar other) const;
  Tensor maximum(const Tensor& o) const { return binary(BinaryOp::kMaximum, o); }
  Tensor minimum(const Tensor& o) const { return binary(BinaryOp::kMinimum, o); }
  Tensor pow(const Tensor& o) const { return binary(BinaryOp::kPow, o); }
  Tensor pow(Scalar o) const { return binary(BinaryOp::kPow, o); }
  Tensor eq(const Tensor& o) const { return binary(BinaryOp::kEq, o); }
  Tensor ne(const Tensor& o) const { return binary(BinaryOp::kNe, o); }
  Tensor lt(const Tensor& o) const { return binary(BinaryOp::kLt, o); }
  Tensor le(const Tensor& o) const { return binary(BinaryOp::kLe, o); }
  Tensor gt(const Tensor& o) const { return binary(BinaryOp::kGt, o); }
  Tensor ge(const Tensor& o) const { return binary(BinaryOp::kGe, o); }
  Tensor eq(Scalar o) const { return binary(BinaryOp::kEq, o); }
  Tensor lt(Scalar o) const { return binary(BinaryOp::kLt, o); }
  Tensor gt(Scalar o) const { return binary(BinaryOp::kGt, o); }

  // Elementwise unary ops; exp/log/sqrt/sigmoid/tanh of integers give
  // float32.
  Tensor unary(UnaryOp op) const;
  Tensor neg() const { return unary(UnaryOp::kNeg); }
  Tensor abs() const { return unary(UnaryOp::kAbs); }
  Tensor exp() const { return unary(UnaryOp::kExp); }
  Tensor log() const { return unary(UnaryOp::kLog); }
  Tensor sqrt() const { return unary(UnaryOp::kSqrt); }
  Tensor relu() const { return unary(UnaryOp::kRelu); }
  Tensor sigmoid() const { return unary(UnaryOp::kSigmoid); }
  Tensor tanh() const { return unary(UnaryOp::kTanh); }

  // Reductions over all elements (no dim) or one dim (negative counts from
  // the end). sum of integers is int64; mean/norm need a floating dtype;
  // argmax gives int64 indices; norm is the L2/Frobenius norm.
  Tensor reduce(ReduceOp op, std::optional<int64_t> dim = std::nullopt,
                bool keepdim = false) const;
  Tensor sum(std::optional<int64_t> dim = std::nullopt,
             bool keepdim = false) const {
    return reduce(ReduceOp::kSum, dim, keepdim);
  }
  Tensor mean(std::optional<int64_t> dim = std::nullopt,
              bool keepdim = false) const {
    return reduce(ReduceOp::kMean, dim, keepdim);
  }
  Tensor max(std::optional<int64_t> dim = std::nullopt,
             bool keepdim = false) const {
    return reduce(ReduceOp::kMax, dim, keepdim);
  }
  Tensor min(std::optional<int64_t> dim = std::nullopt,
             bool keepdim = false) const {
    return reduce(ReduceOp::kMin, dim, keepdim);
  }
  Tensor argmax(std::optional<int64_t> dim = std::nullopt,
                bool keepdim = false) const {
    return reduce(ReduceOp::kArgmax, dim, keepdim);
  }
  Tensor norm() const { return reduce(ReduceOp::kNorm); }

  // torch.matmul shape rules; both operands of one dtype.
  Tensor matmul(const Tensor& other) const;
  // Shape ops; each makes a new tensor (no views).
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const { return transpose(0, -1); }
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor reshape(const std::vector<int64_t>& shape) const;  // one -1 allowed
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  // A copy converted to `dtype`.
  Tensor to(DType dtype) const;

  // In-place updates (PyTorch's trailing underscore): the tensor's own
  // memory is written, nothing is allocated for the result. The result
  // dtype must be castable to this tensor's dtype (INVALID_ARGUMENT
  // otherwise, e.g. int64_tensor.mul_(0.5)).
  Tensor& add_(const Tensor& other);
  Tensor& sub_(const Tensor& other);
  Tensor& mul_(const Tensor& other);
  Tensor& div_(const Tensor& other);
  Tensor& add_(Scalar other);
  Tensor& sub_(Scalar other);
  Tensor& mul_(Scalar other);
  Tensor& div_(Scalar other);
  // this += alpha * x (BLAS axpy).
  Tensor& axpy_(Scalar alpha, const Tensor& x);

  // Writes the tensor as a NumPy .npy file (format 1.0, little-endian,
  // C order). float16 is '<f2'; bfloat16 has no NumPy dtype
  // (INVALID_ARGUMENT). Throws Error(UNKNOWN) on I/O failure.
  void save_npy(const std::filesystem::path& path) const;

  // The tensor's bytes (row-major, little-endian), streamed in chunks whose
  // offset and CRC-32 are checked: DATA_LOSS on a mismatch. With the
  // client's shared memory enabled (Client::enable_shared_memory), tensors
  // over 1 MiB that fit its region come through the region instead.
  std::string fetch_bytes() const;
  // The bytes into `dst`, which must be exactly nbytes() long
  // (INVALID_ARGUMENT otherwise). Into a buffer the caller reuses this
  // skips what a fresh std::string costs: the kernel zeroing and mapping
  // every page of it on first touch (~2 GB/s), which for large tensors is
  // slower than the shared-memory transfer itself.
  void fetch_into(std::span<std::byte> dst) const;
  // Zero-copy fetch: the server writes the bytes straight into `region`'s
  // data area at `offset` (OUT_OF_RANGE when they do not fit). `region`
  // must belong to this tensor's session (INVALID_ARGUMENT otherwise).
  void fetch_shared(const SharedMemoryRegion& region, uint64_t offset = 0) const;

  // The elements as T. INVALID_ARGUMENT when T is not the tensor's dtype.
  template <typename T>
  std::vector<T> fetch() const {
    CheckElementType(kDTypeOf<T>, "fetch");
    if constexpr (std::is_same_v<T, bool>) {  // vector<bool> is packed
      std::string bytes = fetch_bytes();
      std::vector<T> out(bytes.size());
      for (size_t i = 0; i < out.size(); ++i) out[i] = bytes[i] != 0;
      return out;
    } else {
      // Straight into the result: one fresh buffer, its pages mapped in
      // one go before the zeroing resize, no intermediate string.
      const auto n = static_cast<size_t>(numel());
      std::vector<T> out;
      out.reserve(n);
      internal::PrefaultForWrite(out.data(), n * sizeof(T));
      out.resize(n);
      fetch_into(std::as_writable_bytes(std::span<T>(out)));
      return out;
    }
  }

  // The single element of a 0-d or one-element tensor as T.
  // INVALID_ARGUMENT for other sizes or when T is not the dtype.
  template <typename T>
  T item() const {
    CheckElementType(kDTypeOf<T>, "item");
    CheckSingleElement();
    return fetch<T>()[0];
  }

  // PyTorch's repr, e.g. "tensor([ 5, 16,  3], device='cuda:0')". Fetches
  // the data.
  std::string str() const;
  friend std::ostream& operator<<(std::ostream& os, const Tensor& t);

 private:
  friend class Client;
  friend class Batch;
  friend struct internal::TensorAccess;
  explicit Tensor(std::shared_ptr<const internal::TensorState> state);
  Tensor Binary(int op, const Tensor& rhs) const;
  Tensor& InPlace(int op, const Tensor* other, const Scalar* scalar);
  void CheckElementType(DType requested, std::string_view what) const;
  void CheckSingleElement() const;

  std::shared_ptr<const internal::TensorState> state_;
};

// nn.functional.linear: x [..., in] . weight[out, in]^T (+ bias [out]).
Tensor linear(const Tensor& x, const Tensor& weight,
              const std::optional<Tensor>& bias = std::nullopt);
// torch.cat along `dim`; all tensors on one device.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);

// ---------------------------------------------------------------------------
// Batches: a recorded list of ops run in one round trip (the Execute RPC).
//
//   auto b = client.batch();
//   auto y = b.matmul(x, w);          // a placeholder; nothing runs yet
//   auto n = b.norm(y);
//   b.keep(n);
//   auto results = b.run();           // one RPC
//   float v = results[n].item<float>();
//
// Results not kept are freed on the server when the list ends. If an op
// fails, run() throws the Error of that op, whose message starts
// "op #<i> (<name>; operands: ...)"; nothing of the batch is kept. Tensors
// given as inputs are held by the batch until run() returns. A Batch is not
// thread-safe; run() may be called once.

class BatchResults;

class Batch {
 public:
  // The future result of a recorded op (its index in the list).
  class Value {
   public:
    uint32_t index() const { return index_; }

   private:
    friend class Batch;
    friend class BatchResults;
    Value(const internal::BatchState* owner, uint32_t index)
        : owner_(owner), index_(index) {}
    const internal::BatchState* owner_;
    uint32_t index_;
  };
  // An op's input: a Tensor or a Value of this batch.
  class Input {
   public:
    Input(const Tensor& t) : tensor_(t) {}  // NOLINT: implicit
    Input(Value v) : value_(v) {}           // NOLINT: implicit

   private:
    friend class Batch;
    std::optional<Tensor> tensor_;
    std::optional<Value> value_;
  };

  Value binary(BinaryOp op, Input a, Input b);
  Value binary(BinaryOp op, Input a, Scalar b);
  Value add(Input a, Input b) { return binary(BinaryOp::kAdd, a, b); }
  Value sub(Input a, Input b) { return binary(BinaryOp::kSub, a, b); }
  Value mul(Input a, Input b) { return binary(BinaryOp::kMul, a, b); }
  Value div(Input a, Input b) { return binary(BinaryOp::kDiv, a, b); }
  Value add(Input a, Scalar b) { return binary(BinaryOp::kAdd, a, b); }
  Value sub(Input a, Scalar b) { return binary(BinaryOp::kSub, a, b); }
  Value mul(Input a, Scalar b) { return binary(BinaryOp::kMul, a, b); }
  Value div(Input a, Scalar b) { return binary(BinaryOp::kDiv, a, b); }
  Value unary(UnaryOp op, Input x);
  Value relu(Input x) { return unary(UnaryOp::kRelu, x); }
  Value sigmoid(Input x) { return unary(UnaryOp::kSigmoid, x); }
  Value reduce(ReduceOp op, Input x, std::optional<int64_t> dim = std::nullopt,
               bool keepdim = false);
  Value sum(Input x, std::optional<int64_t> dim = std::nullopt,
            bool keepdim = false) {
    return reduce(ReduceOp::kSum, x, dim, keepdim);
  }
  Value mean(Input x, std::optional<int64_t> dim = std::nullopt,
             bool keepdim = false) {
    return reduce(ReduceOp::kMean, x, dim, keepdim);
  }
  Value norm(Input x) { return reduce(ReduceOp::kNorm, x); }
  Value matmul(Input a, Input b);
  Value linear(Input x, Input weight, std::optional<Input> bias = std::nullopt);
  Value transpose(Input x, int64_t dim0, int64_t dim1);
  Value t(Input x) { return transpose(x, 0, -1); }
  Value reshape(Input x, const std::vector<int64_t>& shape);
  Value narrow(Input x, int64_t dim, int64_t start, int64_t length);
  Value cat(const std::vector<Input>& xs, int64_t dim = 0);
  Value to(Input x, DType dtype);
  // In place on `target`; the Value is the updated target.
  Value sub_(Input target, Input other);
  Value add_(Input target, Input other);
  Value mul_(Input target, Scalar other);
  Value axpy_(Input target, Scalar alpha, Input x);

  // Asks for `v` to get a handle when the batch runs.
  void keep(Value v);
  // Number of recorded ops.
  size_t size() const;
  // Runs the list in one Execute RPC. Throws Error.
  BatchResults run();

 private:
  friend class Client;
  explicit Batch(std::shared_ptr<const internal::Session> session);
  Value Record(const void* op);  // op: a tensord.v1.Op
  std::shared_ptr<internal::BatchState> state_;
};

// What Batch::run() returns: the kept results as Tensors.
class BatchResults {
 public:
  // The tensor of a kept Value. INVALID_ARGUMENT if `v` was not kept.
  const Tensor& operator[](Batch::Value v) const;

 private:
  friend class Batch;
  std::map<uint32_t, Tensor> tensors_;
};

// ---------------------------------------------------------------------------
// Tensor files. Debian 12 packages no maintained C++ library for .npy or
// safetensors, and both formats are small and fully specified, so the
// client reads and writes them itself.

// ---------------------------------------------------------------------------
// Shared memory: the same-host fast path
//
// A POSIX shared-memory region (/dev/shm/tensord-<random hex>) created by
// this client, registered in its session on the server, through which
// tensor bytes move without the socket. Works only when client and server
// share a host (and, since the object is mode 0600, run as one user).
//
//   auto region = client.create_shared_memory(256 << 20);
//   std::memcpy(region->data(), weights, n);          // or write in place
//   auto w = client.upload_shared(*region, 0, DType::kFloat32, {rows, cols});
//   w.fetch_shared(*region, 0);                        // bytes in region->data()
//
// The region goes (unregistered, unmapped, unlinked) with its last
// shared_ptr; the server unmaps it when the session ends anyway. A region
// does not keep its session open. Thread-safety: the object is safe to
// share, but the bytes are not synchronized: calls using overlapping
// ranges of one region from several threads at once need the caller's own
// locking (or disjoint offsets per thread).
class SharedMemoryRegion {
 public:
  ~SharedMemoryRegion();
  SharedMemoryRegion(const SharedMemoryRegion&) = delete;
  SharedMemoryRegion& operator=(const SharedMemoryRegion&) = delete;

  // The data area (page-aligned) and its size in bytes.
  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  // The server's region id (in this session) and the object's name.
  uint64_t id() const { return id_; }
  const std::string& name() const { return name_; }

 private:
  friend class internal::Session;
  SharedMemoryRegion() = default;

  std::weak_ptr<const internal::Session> session_;
  std::string session_id_;
  std::string name_;
  void* base_ = nullptr;  // the whole mapping (header included)
  size_t mapped_ = 0;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  uint64_t id_ = 0;
};

// ---------------------------------------------------------------------------
// Client

// How a Client gets its session.
struct ClientOptions {
  // An existing session to re-attach to (e.g. after the connection dropped,
  // or from another process): the session id is its credential. "" opens a
  // new session.
  std::string session;
  // The lease to ask for when opening (0 = the server's default); the
  // server clamps it to its bounds.
  std::chrono::milliseconds ttl{0};
  // Keep the session alive in the background (a KeepAlive every third of
  // the lease) while the Client or any of its Tensors lives.
  bool keepalive = true;
};

// A session on a tensord server. Constructing one opens the session (throws
// Error, e.g. UNAVAILABLE when the server cannot be reached).
//
// Sessions are leased: the Client keeps its session alive in the background
// while it or any of its Tensors lives, and closes it when the last goes. A
// client whose connection dropped re-attaches with Client::Attach(channel,
// id) within the lease and finds its tensors. Every reply names the server
// instance; if it changes (the server restarted and the session's tensors
// are gone) calls throw FAILED_PRECONDITION "server restarted (instance X →
// Y): this session's tensors are gone". Mutating calls carry a request id
// and are retried on UNAVAILABLE (a dropped connection) without being done
// twice.
class Client {
 public:
  // Dials `address` ("host:port"; "" = ResolveAddress()) without TLS.
  explicit Client(std::string address = "");
  // Uses `channel` (e.g. a server's in-process channel, or one with TLS).
  explicit Client(std::shared_ptr<grpc::Channel> channel,
                  const ClientOptions& options = {});
  // Re-attaches to the existing session `session_id` (NOT_FOUND when it is
  // unknown, closed or its lease ran out). The returned Client owns the
  // session as if it had opened it.
  static Client Attach(std::shared_ptr<grpc::Channel> channel,
                       std::string session_id);

  // The session id the server issued (the token for re-attaching).
  const std::string& session() const;
  // The session's lease as the server granted it (0 = never expires).
  std::chrono::milliseconds session_ttl() const;
  // The server instance id the session belongs to (16 hex digits).
  const std::string& server_instance() const;
  // A Tensor for a live tensor of this session named by its handle (e.g.
  // one made before re-attaching; see tensors()). NOT_FOUND if there is
  // none. Its last copy releases it, as for any Tensor.
  Tensor attach_tensor(uint64_t handle) const;

  // ---- Devices
  std::vector<DeviceInfo> devices() const;
  std::string server_version() const;
  // torch.cuda.device_count(): the number of cuda devices.
  int device_count() const;
  bool cuda_available() const { return device_count() > 0; }
  // d2l's try_gpu: "cuda:<i>" if the server has it, else "cpu".
  Device try_gpu(int i = 0) const;
  // d2l's try_all_gpus: every cuda device, or {"cpu"} when there is none.
  std::vector<Device> try_all_gpus() const;

  // ---- Tensors from host data (copied; > 1 MiB is streamed in chunks).
  // A 1-D tensor, like torch.tensor([...], device=...).
  template <typename T>
  Tensor tensor(std::initializer_list<T> values, Device device = "cpu") const {
    return FromBytes(kDTypeOf<T>, {static_cast<int64_t>(values.size())},
                     ToBytes(values.begin(), values.end()), device);
  }
  template <typename T>
  Tensor tensor(const std::vector<T>& values, Device device = "cpu") const {
    return FromBytes(kDTypeOf<T>, {static_cast<int64_t>(values.size())},
                     ToBytes(values.begin(), values.end()), device);
  }
  // `values` in row-major order for `shape`; a size mismatch is
  // INVALID_ARGUMENT (from the server).
  template <typename T>
  Tensor tensor(const std::vector<T>& values, std::vector<int64_t> shape,
                Device device = "cpu") const {
    return FromBytes(kDTypeOf<T>, std::move(shape),
                     ToBytes(values.begin(), values.end()), device);
  }
  // A 2-D tensor from rows: tensor<float>({{1, 2}, {3, 4}}). Ragged rows are
  // INVALID_ARGUMENT.
  template <typename T>
  Tensor tensor(std::initializer_list<std::initializer_list<T>> rows,
                Device device = "cpu") const {
    std::vector<T> flat;
    const size_t cols = rows.size() == 0 ? 0 : rows.begin()->size();
    for (const auto& row : rows) {
      if (row.size() != cols) ThrowRaggedRows();
      flat.insert(flat.end(), row.begin(), row.end());
    }
    return tensor(
        flat, {static_cast<int64_t>(rows.size()), static_cast<int64_t>(cols)},
        std::move(device));
  }

  // ---- Fills (made on the server; no data crosses the wire).
  Tensor zeros(std::vector<int64_t> shape, DType dtype = DType::kFloat32,
               Device device = "cpu") const;
  Tensor ones(std::vector<int64_t> shape, DType dtype = DType::kFloat32,
              Device device = "cpu") const;
  Tensor full(std::vector<int64_t> shape, double value,
              DType dtype = DType::kFloat32, Device device = "cpu") const;
  // start, start+step, ... below end (1-D).
  Tensor arange(double start, double end, double step = 1,
                DType dtype = DType::kInt64, Device device = "cpu") const;
  // Uniform in [0, 1) / standard normal, float32; with a seed the values are
  // reproducible on that device.
  Tensor rand(std::vector<int64_t> shape, Device device = "cpu",
              std::optional<uint64_t> seed = std::nullopt) const;
  Tensor randn(std::vector<int64_t> shape, Device device = "cpu",
               std::optional<uint64_t> seed = std::nullopt) const;

  // Any tensor from raw little-endian row-major bytes.
  Tensor FromBytes(DType dtype, std::vector<int64_t> shape,
                   std::string_view bytes, const Device& device = "cpu") const;

  // The session's live tensors (what is held, and where).
  std::vector<TensorInfo> tensors() const;

  // ---- Shared memory (same host only; see SharedMemoryRegion).
  // A new region with `bytes` of data area, registered in the session.
  // Throws Error: NOT_FOUND when the server is on another host,
  // PERMISSION_DENIED when it runs as another user, RESOURCE_EXHAUSTED
  // when /dev/shm has no room.
  std::shared_ptr<SharedMemoryRegion> create_shared_memory(size_t bytes) const;
  // Opt-in automatic fast path: creates one region of `bytes` for this
  // session, after which FromBytes()/tensor() uploads and fetch()/
  // fetch_bytes()/fetch_into() of tensors over 1 MiB that fit it go through
  // it (others use the socket). Returns false, with the reason in `*reason`
  // when given, if the server cannot use it (remote, another user); the
  // socket path stays. Uses of the region are serialized by a mutex, so
  // concurrent large transfers of one Client take turns. Calling it again
  // replaces the region.
  bool enable_shared_memory(size_t bytes, std::string* reason = nullptr) const;
  void disable_shared_memory() const;
  bool shared_memory_enabled() const;
  // Zero-copy upload: a tensor from numel x dtype size bytes at `offset` of
  // `region`'s data area (written there by the caller). OUT_OF_RANGE when
  // they run past the region; INVALID_ARGUMENT for a region of another
  // session.
  Tensor upload_shared(const SharedMemoryRegion& region, uint64_t offset,
                       DType dtype, std::vector<int64_t> shape,
                       const Device& device = "cpu") const;

  // A new, empty recorded op list (see Batch).
  Batch batch() const;

  // Reads a NumPy .npy file (format 1.x/2.x; '<f4', '<f8', '<f2', '<i4',
  // '<i8', '|b1'/'|u1'-as-bool; C order) onto `device`. INVALID_ARGUMENT
  // for another dtype, Fortran order or a malformed file; NOT_FOUND when
  // the file cannot be opened.
  Tensor load_npy(const std::filesystem::path& path,
                  const Device& device = "cpu") const;
  // safetensors: 8-byte little-endian header length, a JSON header
  // {name: {"dtype", "shape", "data_offsets"}} and the data. Supported
  // dtypes F32, F64, F16, BF16, I32, I64, BOOL.
  std::map<std::string, Tensor> load_safetensors(
      const std::filesystem::path& path, const Device& device = "cpu") const;
  static void save_safetensors(const std::filesystem::path& path,
                               const std::map<std::string, Tensor>& tensors);

 private:
  template <typename It>
  static std::string ToBytes(It begin, It end) {
    using T = typename std::iterator_traits<It>::value_type;
    std::string bytes;
    bytes.reserve(static_cast<size_t>(end - begin) * sizeof(T));
    for (It it = begin; it != end; ++it) {
      const T value = *it;
      bytes.append(reinterpret_cast<const char*>(&value), sizeof(T));
    }
    return bytes;
  }
  [[noreturn]] static void ThrowRaggedRows();

  std::shared_ptr<internal::Session> session_;
};

}  // namespace tensord::client

namespace tensord {
using client::Batch;
using client::BatchResults;
using client::BinaryOp;
using client::cat;
using client::Client;
using client::ClientOptions;
using client::linear;
using client::ReduceOp;
using client::Scalar;
using client::SharedMemoryRegion;
using client::UnaryOp;
using client::Device;
using client::DeviceInfo;
using client::DType;
using client::DTypeName;
using client::Error;
using client::StatusCode;
using client::Tensor;
using client::TensorInfo;
}  // namespace tensord

#endif  // TENSORD_CLIENT_TENSORD_CLIENT_H_
