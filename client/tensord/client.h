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
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <optional>
#include <ostream>
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
namespace internal {
class Session;
struct TensorState;
}  // namespace internal

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
  // torch.matmul shape rules; both operands of one dtype.
  Tensor matmul(const Tensor& other) const;

  // The tensor's bytes (row-major, little-endian), streamed in chunks whose
  // offset and CRC-32 are checked: DATA_LOSS on a mismatch.
  std::string fetch_bytes() const;

  // The elements as T. INVALID_ARGUMENT when T is not the tensor's dtype.
  template <typename T>
  std::vector<T> fetch() const {
    CheckElementType(kDTypeOf<T>, "fetch");
    std::string bytes = fetch_bytes();
    std::vector<T> out(bytes.size() / sizeof(T));
    if constexpr (std::is_same_v<T, bool>) {
      for (size_t i = 0; i < out.size(); ++i) out[i] = bytes[i] != 0;
    } else {
      std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
    }
    return out;
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
  explicit Tensor(std::shared_ptr<const internal::TensorState> state);
  Tensor Binary(int op, const Tensor& rhs) const;
  void CheckElementType(DType requested, std::string_view what) const;
  void CheckSingleElement() const;

  std::shared_ptr<const internal::TensorState> state_;
};

// ---------------------------------------------------------------------------
// Client

// A session on a tensord server. Constructing one opens the session (throws
// Error, e.g. UNAVAILABLE when the server cannot be reached).
class Client {
 public:
  // Dials `address` ("host:port"; "" = ResolveAddress()) without TLS.
  explicit Client(std::string address = "");
  // Uses `channel` (e.g. a server's in-process channel, or one with TLS).
  explicit Client(std::shared_ptr<grpc::Channel> channel);

  // The session id the server issued.
  const std::string& session() const;

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
using client::Client;
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
