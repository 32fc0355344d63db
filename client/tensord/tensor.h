// tensord::Tensor: an RAII handle to a tensor living on a device of the
// server, with PyTorch's operators, moves, fetches and printing.
// Part of the client library (tensord/client.h includes every part).
// Thread-safety: as tensord/client.h says.
#ifndef TENSORD_CLIENT_TENSORD_TENSOR_H_
#define TENSORD_CLIENT_TENSORD_TENSOR_H_

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

#include "tensord/errors.h"
#include "tensord/types.h"

namespace tensord::client {

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
  // the server; nothing reaches the client. For a tensor of a
  // tensord::Cluster, `device` may name another node ("tensord-1/cuda:0"):
  // that node pulls the tensor from this one itself (tensord/cluster.h).
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
  // With the op's numeric arguments in its op table row's order.
  Tensor unary(UnaryOp op, std::initializer_list<double> args) const;
  // The unary ops: one method per op table row marked `method` (every
  // unary row but gelu's), its `params` the arguments (with their
  // defaults).
#define TENSORD_TENSOR_METHODS
#include "tensord/op_methods.inc"  // generated (core/base/gen_op_table.py)
  // F.gelu(x, approximate): "none" (exact, erf) or "tanh".
  Tensor gelu(std::string_view approximate = "none") const;

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
  // Over several dims at once: x.sum({0, 2}) (sum, mean and norm).
  Tensor reduce(ReduceOp op, std::span<const int64_t> dims,
                bool keepdim = false) const;
  Tensor sum(std::initializer_list<int64_t> dims, bool keepdim = false) const {
    return reduce(ReduceOp::kSum, std::span(dims.begin(), dims.size()),
                  keepdim);
  }
  Tensor mean(std::initializer_list<int64_t> dims, bool keepdim = false) const {
    return reduce(ReduceOp::kMean, std::span(dims.begin(), dims.size()),
                  keepdim);
  }

  // torch.softmax / torch.log_softmax over `dim` (numerically stable);
  // floating tensors only.
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  // torch.clamp: bounds both numbers or both tensors (broadcast), either
  // one std::nullopt (not both): x.clamp(0, 1), x.clamp(std::nullopt, hi).
  Tensor clamp(std::optional<Scalar> min,
               std::optional<Scalar> max = std::nullopt) const;
  Tensor clamp(const std::optional<Tensor>& min,
               const std::optional<Tensor>& max) const;

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

  // --- Autograd (it lives in the server: tensord/autograd.h) ---
  // Marks this leaf as requiring grad (or not). INVALID_ARGUMENT for a
  // non-floating dtype; FAILED_PRECONDITION for clearing it on an op's
  // result.
  Tensor& requires_grad_(bool requires_grad = true);
  // Whether autograd tracks this tensor (a leaf that requires grad or an
  // op's result recorded from one), and the name of that op's backward as
  // PyTorch prints it ("MulBackward0"; "" for a leaf). Each asks the server.
  bool requires_grad() const;
  std::string grad_fn() const;
  // PyTorch's backward: accumulates d(this)/d(leaf), times `gradient`
  // (ones when absent, for a one-element tensor), into every leaf that
  // requires grad, then frees the graph's saved tensors unless
  // `retain_graph`. INVALID_ARGUMENT "grad can be implicitly created only
  // for scalar outputs" at this call; FAILED_PRECONDITION for a tensor
  // without grad_fn, a freed graph, or an in-place change to a saved
  // tensor: at this call, or when the session pipelines (it goes on the
  // command stream without waiting) at the next sync point (item(), a
  // fetch), naming the op.
  void backward(const std::optional<Tensor>& gradient = std::nullopt,
                bool retain_graph = false) const;
  // The accumulated gradient (PyTorch's x.grad), nullopt while it is None.
  // A new handle each call: take it after backward.
  std::optional<Tensor> grad() const;
  // The same memory with no autograd history.
  Tensor detach() const;

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
  // T is one of DTypeOf's types (float, double, int32_t, int64_t, bool);
  // the library defines fetch for each (another T does not compile).
  template <typename T>
  requires requires { DTypeOf<T>::value; }
  std::vector<T> fetch() const;

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
  Tensor ToNode(const std::string& node, const Device& device) const;
  friend class Client;
  friend class Batch;
  friend struct internal::TensorAccess;
  explicit Tensor(std::shared_ptr<const internal::TensorState> state);
  void CheckElementType(DType requested, std::string_view what) const;
  void CheckSingleElement() const;

  std::shared_ptr<const internal::TensorState> state_;
};

extern template std::vector<float> Tensor::fetch<float>() const;
extern template std::vector<double> Tensor::fetch<double>() const;
extern template std::vector<int32_t> Tensor::fetch<int32_t>() const;
extern template std::vector<int64_t> Tensor::fetch<int64_t>() const;
extern template std::vector<bool> Tensor::fetch<bool>() const;

// nn.functional.linear: x [..., in] . weight[out, in]^T (+ bias [out]).
Tensor linear(const Tensor& x, const Tensor& weight,
              const std::optional<Tensor>& bias = std::nullopt);
// Options of conv2d and the pooling ops, as torch.nn.functional's: each
// list empty for the default, one value for both dims, or two (height,
// width).
struct Conv2dOptions {
  std::vector<int64_t> stride;    // default 1
  std::vector<int64_t> padding;   // default 0
  std::vector<int64_t> dilation;  // default 1
  int64_t groups = 1;
};
struct Pool2dOptions {
  std::vector<int64_t> stride;    // default: the kernel size
  std::vector<int64_t> padding;   // default 0, at most half the kernel
  std::vector<int64_t> dilation;  // default 1; max_pool2d only
  bool count_include_pad = true;  // avg_pool2d
};
// nn.functional.conv2d: x [n, c, h, w] (or [c, h, w]), weight [oc,
// c / groups, kh, kw], bias [oc]; one floating dtype.
Tensor conv2d(const Tensor& x, const Tensor& weight,
              const std::optional<Tensor>& bias = std::nullopt,
              const Conv2dOptions& options = {});
// nn.functional.max_pool2d / avg_pool2d over windows of `kernel_size`.
Tensor max_pool2d(const Tensor& x, const std::vector<int64_t>& kernel_size,
                  const Pool2dOptions& options = {});
Tensor avg_pool2d(const Tensor& x, const std::vector<int64_t>& kernel_size,
                  const Pool2dOptions& options = {});
// nn.functional.adaptive_avg_pool2d to `output_size` (one value or two).
Tensor adaptive_avg_pool2d(const Tensor& x,
                           const std::vector<int64_t>& output_size);
// nn.functional.dropout: in training, each element zeroed with
// probability p and the rest scaled by 1 / (1 - p) (masks drawn from
// `seed`, or nondeterministic); a copy otherwise.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true,
               std::optional<uint64_t> seed = std::nullopt);
// The functions of the op table's rows with a `func` (nn.functional's
// normalisations): each row's signature, in native_functions.yaml's form,
// becomes one function here (trailing scalar arguments, when two or more,
// in a `<Name>Options` struct), documented by the row's `doc`.
#define TENSORD_FUNCTIONS
#include "tensord/op_methods.inc"  // generated (core/base/gen_op_table.py)

// How a loss reduces (torch.nn.functional's `reduction`).
enum class Reduction { kMean, kSum, kNone };
// nn.functional.nll_loss(log-probabilities [N, C] or [C], int64 class
// indices [N] or []) and cross_entropy (the same of logits);
// `ignore_index` targets are not counted.
Tensor nll_loss(const Tensor& input, const Tensor& target,
                Reduction reduction = Reduction::kMean,
                int64_t ignore_index = -100);
Tensor cross_entropy(const Tensor& input, const Tensor& target,
                     Reduction reduction = Reduction::kMean,
                     int64_t ignore_index = -100);
// nn.functional.mse_loss: (input - target)^2, broadcast, reduced.
Tensor mse_loss(const Tensor& input, const Tensor& target,
                Reduction reduction = Reduction::kMean);
// torch.cat along `dim`; all tensors on one device.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
// torch.max(x, dim) / torch.min(x, dim): the values and their int64
// indices (the first of equal values), as the seed evaluates with
// `_, predicted = torch.max(outputs.data, 1)`. Two ops (max and argmax;
// min's index is the argmax of -x).
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim,
                              bool keepdim = false);
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim,
                              bool keepdim = false);
// torch.flatten(x, start_dim, end_dim): those dims (negative from the end)
// merged into one; a 0-d tensor becomes [1].
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
// torch.where(condition, input, other): input where the bool condition
// holds, other elsewhere, all broadcast; input and other each a tensor or a
// number, their dtypes promoted.
Tensor where(const Tensor& condition, const Tensor& input, const Tensor& other);
Tensor where(const Tensor& condition, const Tensor& input, Scalar other);
Tensor where(const Tensor& condition, Scalar input, const Tensor& other);
Tensor where(const Tensor& condition, Scalar input, Scalar other);

}  // namespace tensord::client

#endif  // TENSORD_CLIENT_TENSORD_TENSOR_H_
