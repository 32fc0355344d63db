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
//
// The library's headers, one concept each, all included here: errors.h
// (tensord::Error), types.h (Device, DType, metadata, op selectors,
// Scalar), tensor.h (Tensor), batch.h (Batch), program.h (Program: a
// Batch planned once on the server, run many times), distributed.h
// (ProcessGroup: collectives over the server's devices), shared_memory.h
// (SharedMemoryRegion), and this one (Client, tensor files). Many servers
// as one: tensord/cluster.h (Cluster), which includes this one.
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

#include "tensord/autograd.h"
#include "tensord/batch.h"
#include "tensord/data.h"
#include "tensord/distributed.h"
#include "tensord/nn.h"
#include "tensord/optim.h"
#include "tensord/program.h"
#include "tensord/errors.h"
#include "tensord/shared_memory.h"
#include "tensord/tensor.h"
#include "tensord/types.h"

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
// Tensor files. Debian 12 packages no maintained C++ library for .npy or
// safetensors, and both formats are small and fully specified, so the
// client reads and writes them itself.


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
  // Eager ops at the speed of one round trip: creates, moves, ops, small
  // fetches and releases stream to the server without waiting for each
  // answer; results' shapes and dtypes are planned here, so PyTorch's
  // errors are thrown by the line that causes them. Errors only the server
  // can know (out of memory, a quota) are thrown at the next sync point —
  // a fetch, item(), printing, a listing, any other call — naming the op
  // that caused them. Off: every op is its own unary call, as with a
  // server that has no command stream.
  bool pipeline = true;
  // Name devices by the server's node ("tensord-0/cuda:0"), as the nodes
  // of a tensord::Cluster do: every Tensor's device() and devices() carry
  // the node; names with or without it are accepted. The server must have
  // a node name (tensord --node-name), else FAILED_PRECONDITION.
  bool qualify_devices = false;
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
  // The memory the session holds without a handle, which counts toward its
  // quotas as tensors() do: tensors autograd saved for a backward (tag
  // "saved by MulBackward0") and leaves' grads no handle names ("grad of
  // tensor 17"). handle is 0.
  std::vector<TensorInfo> held() const;

  // Waits until everything this client has sent has run on the server, as
  // torch.cuda.synchronize() (see ClientOptions::pipeline); throws the
  // first error of a streamed op not yet reported. Needed only before
  // naming this client's tensors in calls made outside it (another stub).
  void synchronize() const;

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

  // A process group over devices of this server, one rank each in the
  // order given (tensord/distributed.h). FAILED_PRECONDITION for a CUDA
  // device (NCCL is not wired yet) or a server built without Gloo.
  ProcessGroup new_group(const std::vector<Device>& devices) const;

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

  friend class Cluster;  // ties its nodes' sessions together
  std::shared_ptr<internal::Session> session_;
};

}  // namespace tensord::client

namespace tensord {
using client::adaptive_avg_pool2d;
using client::avg_pool2d;
using client::Batch;
using client::BatchResults;
using client::BinaryOp;
using client::cat;
using client::Client;
using client::ClientOptions;
using client::conv2d;
using client::Conv2dOptions;
using client::cross_entropy;
using client::Device;
using client::DeviceInfo;
using client::dropout;
using client::DType;
using client::DTypeName;
using client::Error;
using client::ErrorKind;
using client::flatten;
using client::linear;
using client::max;
using client::max_pool2d;
using client::min;
using client::mse_loss;
using client::nll_loss;
using client::Pool2dOptions;
using client::Program;
using client::ProcessGroup;
using client::DistReduceOp;
using client::ReduceOp;
using client::Reduction;
using client::Scalar;
using client::SharedMemoryRegion;
using client::StatusCode;
using client::Tensor;
using client::TensorInfo;
using client::UnaryOp;
using client::where;
#define TENSORD_USING  // the functions of the op table's `func` rows
#include "tensord/op_methods.inc"  // generated (core/base/gen_op_table.py)
}  // namespace tensord

#endif  // TENSORD_CLIENT_TENSORD_CLIENT_H_
