// tensord::Batch: a recorded list of ops run in one round trip (Execute).
// Part of the client library (tensord/client.h includes every part).
// Thread-safety: a Batch is not thread-safe.
#ifndef TENSORD_CLIENT_TENSORD_BATCH_H_
#define TENSORD_CLIENT_TENSORD_BATCH_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensord/tensor.h"
#include "tensord/types.h"

namespace tensord::client {

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

namespace optim {
class Optimizer;
}  // namespace optim
class BatchResults;
class Program;  // tensord/program.h

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
  Value unary(UnaryOp op, Input x, std::initializer_list<double> args);
  // The unary ops of the op table's rows marked `method` (as Tensor's)
  // and the functions of its rows with a `func` (the normalisations).
#define TENSORD_BATCH_METHODS
#include "tensord/op_methods.inc"  // generated (core/base/gen_op_table.py)
  Value gelu(Input x, std::string_view approximate = "none");
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
  Value reduce(ReduceOp op, Input x, std::span<const int64_t> dims,
               bool keepdim = false);
  Value sum(Input x, std::initializer_list<int64_t> dims,
            bool keepdim = false) {
    return reduce(ReduceOp::kSum, x, std::span(dims.begin(), dims.size()),
                  keepdim);
  }
  Value mean(Input x, std::initializer_list<int64_t> dims,
             bool keepdim = false) {
    return reduce(ReduceOp::kMean, x, std::span(dims.begin(), dims.size()),
                  keepdim);
  }
  // torch.where; input and other each an Input or a number.
  Value where(Input condition, Input input, Input other);
  Value where(Input condition, Input input, Scalar other);
  Value where(Input condition, Scalar input, Input other);
  Value where(Input condition, Scalar input, Scalar other);
  Value softmax(Input x, int64_t dim);
  Value log_softmax(Input x, int64_t dim);
  Value clamp(Input x, std::optional<Scalar> min,
              std::optional<Scalar> max = std::nullopt);
  Value clamp(Input x, std::optional<Input> min, std::optional<Input> max);
  Value matmul(Input a, Input b);
  Value linear(Input x, Input weight, std::optional<Input> bias = std::nullopt);
  Value conv2d(Input x, Input weight, std::optional<Input> bias = std::nullopt,
               const Conv2dOptions& options = {});
  Value max_pool2d(Input x, const std::vector<int64_t>& kernel_size,
                   const Pool2dOptions& options = {});
  Value avg_pool2d(Input x, const std::vector<int64_t>& kernel_size,
                   const Pool2dOptions& options = {});
  Value adaptive_avg_pool2d(Input x, const std::vector<int64_t>& output_size);
  // Autograd inside the list (tensord/autograd.h). requires_grad_,
  // backward and zero_grad give their (first) operand, so a kept backward
  // brings the loss back; grad gives a new handle on x's grad (the list
  // fails with FAILED_PRECONDITION while it is None).
  Value requires_grad_(Input x, bool requires_grad = true);
  Value backward(Input root, std::optional<Input> gradient = std::nullopt,
                 bool retain_graph = false);
  Value grad(Input x);
  Value detach(Input x);
  Value zero_grad(std::span<const Input> tensors);
  Value dropout(Input x, double p = 0.5, bool training = true,
                std::optional<uint64_t> seed = std::nullopt);
  Value nll_loss(Input input, Input target,
                 Reduction reduction = Reduction::kMean,
                 int64_t ignore_index = -100);
  Value cross_entropy(Input input, Input target,
                      Reduction reduction = Reduction::kMean,
                      int64_t ignore_index = -100);
  Value mse_loss(Input input, Input target,
                 Reduction reduction = Reduction::kMean);
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
  // Registers the list as a program whose inputs are `inputs` (see
  // tensord/program.h) instead of running it: nothing runs. Throws the
  // server's planning Error ("op #<i> (...)"). A batch compiles once, and
  // is not run after.
  Program compile(const std::vector<Tensor>& inputs);

 private:
  friend class Client;
  friend class optim::Optimizer;  // records its step
  explicit Batch(std::shared_ptr<const internal::Session> session);
  Value Record(void* op);  // op: a tensord.v1.Op, moved into the list
  std::shared_ptr<internal::BatchState> state_;
};

// What Batch::run() returns: the kept results as Tensors.
class BatchResults {
 public:
  // The tensor of a kept Value. INVALID_ARGUMENT if `v` was not kept.
  const Tensor& operator[](Batch::Value v) const;
  // The single element of a kept one-element result as T, as it was when
  // the batch ran: it came back in the Execute reply, so this costs no
  // round trip (the seed's `running_loss += loss.item()`). Otherwise as
  // (*this)[v].item<T>().
  template <typename T>
  T item(Batch::Value v) const {
    const Tensor& t = (*this)[v];
    auto it = values_.find(v.index());
    if (it == values_.end() || it->second.size() != sizeof(T) ||
        t.dtype() != kDTypeOf<T>) {
      return t.item<T>();
    }
    T out;
    std::memcpy(&out, it->second.data(), sizeof(T));
    return out;
  }

 private:
  friend class Batch;
  friend class Program;
  std::map<uint32_t, Tensor> tensors_;
  std::map<uint32_t, std::string> values_;  // one-element results' bytes
};

}  // namespace tensord::client

#endif  // TENSORD_CLIENT_TENSORD_BATCH_H_
