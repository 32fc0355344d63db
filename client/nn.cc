// torch.nn's modules on the client (tensord/nn.h): parameters are server
// tensors that require grad; forward calls the client's ops. The state_dict
// file is safetensors (https://github.com/huggingface/safetensors: an
// 8-byte little-endian header length, a JSON header naming each tensor's
// dtype, shape and byte range, then the bytes), its header parsed with
// protobuf's JSON parser into a google.protobuf.Struct.
#include "tensord/nn.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>

#include "client/grpc_ops.h"
#include "tensord/autograd.h"
#include "tensord/client.h"

namespace tensord::client::nn {
namespace {

thread_local uint64_t next_seed = 0x5eed;

uint64_t NextSeed() { return next_seed++; }

// A parameter as PyTorch initialises it: uniform in [-bound, bound).
Tensor Uniform(const Client& client, std::vector<int64_t> shape, double bound,
               const Device& device) {
  NoGradGuard no_grad;
  Tensor u = client.rand(std::move(shape), device, NextSeed());
  return u * (2 * bound) - bound;
}

std::string_view SafetensorsDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "F32";
    case DType::kFloat64:
      return "F64";
    case DType::kFloat16:
      return "F16";
    case DType::kBFloat16:
      return "BF16";
    case DType::kInt32:
      return "I32";
    case DType::kInt64:
      return "I64";
    case DType::kBool:
      return "BOOL";
  }
  return "?";
}

Error FileError(const std::filesystem::path& path, std::string_view why) {
  return Error(StatusCode::UNKNOWN,
               "state_dict " + path.string() + ": " + std::string(why));
}

}  // namespace

void manual_seed(uint64_t seed) { next_seed = seed; }

}  // namespace tensord::client::nn

namespace tensord::client {

uint64_t internal::TakeSeeds(uint64_t n) {
  const uint64_t first = nn::next_seed;
  nn::next_seed += n;
  return first;
}

}  // namespace tensord::client

namespace tensord::client::nn {



void Module::register_parameter(std::string name, Tensor* t) {
  t->requires_grad_();
  // Parameters before buffers, as PyTorch's state_dict lists them.
  auto first_buffer = std::find_if(state_.begin(), state_.end(),
                                   [](const State& s) { return !s.parameter; });
  state_.insert(first_buffer, State{std::move(name), t, true});
}

void Module::register_buffer(std::string name, Tensor* t) {
  state_.push_back(State{std::move(name), t, false});
}

void Module::CollectInto(const std::string& prefix,
                         std::vector<State>* out) const {
  for (const State& s : state_) {
    out->push_back(State{prefix + s.name, s.tensor, s.parameter});
  }
  for (const auto& [name, child] : children_) {
    child->CollectInto(prefix + name + ".", out);
  }
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<State> all;
  CollectInto("", &all);
  std::vector<std::pair<std::string, Tensor>> out;
  for (const State& s : all) {
    if (s.parameter) out.emplace_back(s.name, *s.tensor);
  }
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(std::move(t));
  return out;
}

Module& Module::to(const Device& device) {
  std::vector<State> all;
  CollectInto("", &all);
  for (const State& s : all) {
    if (s.tensor->device() == device) continue;
    // The move's result has a grad_fn (gradients flow back across moves);
    // a parameter is a leaf, as PyTorch's module.to keeps it.
    *s.tensor = s.tensor->to(device).detach();
    if (s.parameter) s.tensor->requires_grad_();
  }
  return *this;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::save(const std::filesystem::path& path) const {
  std::vector<State> all;
  CollectInto("", &all);
  std::sort(all.begin(), all.end(),
            [](const State& a, const State& b) { return a.name < b.name; });
  std::string header = "{";
  std::vector<std::string> data;
  uint64_t offset = 0;
  for (const State& s : all) {
    const std::string& name = s.name;
    const Tensor* t = s.tensor;
    data.push_back(t->fetch_bytes());
    std::string shape;
    for (int64_t d : t->shape()) {
      if (!shape.empty()) shape += ',';
      shape += std::to_string(d);
    }
    if (header.size() > 1) header += ",";
    header += "\"" + name + "\":{\"dtype\":\"" +
              std::string(SafetensorsDType(t->dtype())) + "\",\"shape\":[" +
              shape + "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + data.back().size()) + "]}";
    offset += data.back().size();
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // aligns the data
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = header.size();
  char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>(n >> (8 * i));
  out.write(length, 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const std::string& bytes : data) {
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  if (!out) throw FileError(path, "cannot write");
}

void Module::load(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError(path, "cannot open");
  const std::string file((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  if (file.size() < 8) throw FileError(path, "shorter than a header");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) {
    n |= static_cast<uint64_t>(static_cast<unsigned char>(file[i])) << (8 * i);
  }
  if (n > file.size() - 8) throw FileError(path, "header past the file's end");
  google::protobuf::Struct header;
  if (!google::protobuf::util::JsonStringToMessage(file.substr(8, n), &header)
           .ok()) {
    throw FileError(path, "the header is not JSON");
  }
  const std::string_view body(file.data() + 8 + n, file.size() - 8 - n);
  std::vector<State> all;
  CollectInto("", &all);
  for (const State& s : all) {
    const std::string& name = s.name;
    Tensor* t = s.tensor;
    auto it = header.fields().find(name);
    if (it == header.fields().end() || !it->second.has_struct_value()) {
      throw Error(
          StatusCode::INVALID_ARGUMENT,
          "state_dict " + path.string() + " has no tensor '" + name + "'");
    }
    const auto& f = it->second.struct_value().fields();
    std::vector<int64_t> shape;
    if (f.count("shape")) {
      for (const auto& d : f.at("shape").list_value().values()) {
        shape.push_back(static_cast<int64_t>(d.number_value()));
      }
    }
    const std::string dtype =
        f.count("dtype") ? f.at("dtype").string_value() : "";
    if (shape != t->shape() || dtype != SafetensorsDType(t->dtype())) {
      throw Error(StatusCode::INVALID_ARGUMENT,
                  "state_dict " + path.string() + ": '" + name + "' is " +
                      dtype + " of another shape than the parameter's " +
                      std::string(DTypeName(t->dtype())));
    }
    uint64_t begin = 0, end = 0;
    if (f.count("data_offsets") &&
        f.at("data_offsets").list_value().values_size() == 2) {
      begin = static_cast<uint64_t>(
          f.at("data_offsets").list_value().values(0).number_value());
      end = static_cast<uint64_t>(
          f.at("data_offsets").list_value().values(1).number_value());
    }
    if (end < begin || end > body.size() || end - begin != t->nbytes()) {
      throw FileError(path, "bad data_offsets for '" + name + "'");
    }
    const Tensor loaded =
        internal::FromBytesLike(*t, body.substr(begin, end - begin));
    *t = loaded;
    if (s.parameter) t->requires_grad_();
  }
}

Linear::Linear(const Client& client, int64_t in_features, int64_t out_features,
               bool with_bias, const Device& device)
    : weight(Uniform(client, {out_features, in_features},
                     1 / std::sqrt(static_cast<double>(in_features)), device)) {
  register_parameter("weight", &weight);
  if (with_bias) {
    bias = Uniform(client, {out_features},
                   1 / std::sqrt(static_cast<double>(in_features)), device);
    register_parameter("bias", &*bias);
  }
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }

namespace {
std::pair<int64_t, int64_t> Pair(const std::vector<int64_t>& v) {
  if (v.empty()) return {1, 1};
  return {v[0], v.size() > 1 ? v[1] : v[0]};
}
}  // namespace

namespace {
// nn.Conv2d's weight shape and its init bound, 1 / sqrt(fan_in).
std::vector<int64_t> ConvShape(int64_t in, int64_t out,
                               const std::vector<int64_t>& kernel,
                               int64_t groups) {
  const auto [kh, kw] = Pair(kernel);
  return {out, in / std::max<int64_t>(groups, 1), kh, kw};
}
double ConvBound(int64_t in, const std::vector<int64_t>& kernel,
                 int64_t groups) {
  const auto [kh, kw] = Pair(kernel);
  return 1 / std::sqrt(static_cast<double>(in / std::max<int64_t>(groups, 1) *
                                           kh * kw));
}
}  // namespace

Conv2d::Conv2d(const Client& client, int64_t in_channels, int64_t out_channels,
               std::vector<int64_t> kernel_size, Conv2dOptions options,
               bool with_bias, const Device& device)
    : weight(Uniform(
          client,
          ConvShape(in_channels, out_channels, kernel_size, options.groups),
          ConvBound(in_channels, kernel_size, options.groups), device)),
      options_(std::move(options)) {
  register_parameter("weight", &weight);
  if (with_bias) {
    bias =
        Uniform(client, {out_channels},
                ConvBound(in_channels, kernel_size, options_.groups), device);
    register_parameter("bias", &*bias);
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  return conv2d(x, weight, bias, options_);
}

MaxPool2d::MaxPool2d(std::vector<int64_t> kernel_size, Pool2dOptions options)
    : kernel_size_(std::move(kernel_size)), options_(std::move(options)) {}

Tensor MaxPool2d::forward(const Tensor& x) {
  return max_pool2d(x, kernel_size_, options_);
}

AvgPool2d::AvgPool2d(std::vector<int64_t> kernel_size, Pool2dOptions options)
    : kernel_size_(std::move(kernel_size)), options_(std::move(options)) {}

Tensor AvgPool2d::forward(const Tensor& x) {
  return avg_pool2d(x, kernel_size_, options_);
}

Tensor Flatten::forward(const Tensor& x) {
  if (start_dim_ == 0 || x.dim() == 0) return x.reshape({-1});
  return x.reshape({x.shape()[0], -1});
}

Tensor Dropout::forward(const Tensor& x) {
  return dropout(x, p_, is_training(), NextSeed());
}

BatchNorm2d::BatchNorm2d(const Client& client, int64_t num_features, double eps,
                         double momentum, bool affine, bool track_running_stats,
                         const Device& device)
    : eps_(eps), momentum_(momentum) {
  if (affine) {
    weight = client.ones({num_features}, DType::kFloat32, device);
    register_parameter("weight", &*weight);
    bias = client.zeros({num_features}, DType::kFloat32, device);
    register_parameter("bias", &*bias);
  }
  if (track_running_stats) {
    running_mean = client.zeros({num_features}, DType::kFloat32, device);
    register_buffer("running_mean", &*running_mean);
    running_var = client.ones({num_features}, DType::kFloat32, device);
    register_buffer("running_var", &*running_var);
    num_batches_tracked = client.zeros({}, DType::kInt64, device);
    register_buffer("num_batches_tracked", &*num_batches_tracked);
  }
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  if (x.dim() != 4) {
    throw Error(
        StatusCode::INVALID_ARGUMENT,
        "expected 4D input (got " + std::to_string(x.dim()) + "D input)",
        ErrorKind::kValueError);
  }
  if (is_training() && num_batches_tracked.has_value()) {
    num_batches_tracked->add_(1);
  }
  return batch_norm(x, running_mean, running_var, weight, bias,
                    {.training = is_training() || !running_mean.has_value(),
                     .momentum = momentum_,
                     .eps = eps_});
}

LayerNorm::LayerNorm(const Client& client,
                     std::vector<int64_t> normalized_shape, double eps,
                     bool elementwise_affine, const Device& device)
    : normalized_shape_(std::move(normalized_shape)), eps_(eps) {
  if (elementwise_affine) {
    weight = client.ones(normalized_shape_, DType::kFloat32, device);
    register_parameter("weight", &*weight);
    bias = client.zeros(normalized_shape_, DType::kFloat32, device);
    register_parameter("bias", &*bias);
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  return layer_norm(x, normalized_shape_, weight, bias, eps_);
}

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  size_t i = 0;
  for (const auto& m : modules) register_module(std::to_string(i++), m);
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& [name, m] : children()) y = m->forward(y);
  return y;
}

}  // namespace tensord::client::nn
