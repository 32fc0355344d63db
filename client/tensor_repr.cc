#include "client/tensor_repr.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

namespace tensord::client::internal {
namespace {

// PyTorch's default print options.
constexpr int kPrecision = 4;
constexpr int64_t kThreshold = 1000;
constexpr int64_t kEdgeItems = 3;
constexpr int kLineWidth = 80;

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {  // inf / nan
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {  // normal
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {  // zero
    bits = sign;
  } else {  // subnormal: renormalize
    int e = -1;
    do {
      ++e;
      mantissa <<= 1;
    } while ((mantissa & 0x400u) == 0);
    bits = sign | (static_cast<uint32_t>(112 - e) << 23) |
           ((mantissa & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

float BFloat16ToFloat(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// Reads element i of the tensor's bytes.
class Elements {
 public:
  Elements(DType dtype, std::string_view bytes)
      : dtype_(dtype), bytes_(bytes) {}

  bool is_bool() const { return dtype_ == DType::kBool; }

  bool floating() const {
    return dtype_ == DType::kFloat32 || dtype_ == DType::kFloat64 ||
           dtype_ == DType::kFloat16 || dtype_ == DType::kBFloat16;
  }

  double Float(int64_t i) const {
    switch (dtype_) {
      case DType::kFloat32:
        return Load<float>(i);
      case DType::kFloat64:
        return Load<double>(i);
      case DType::kFloat16:
        return HalfToFloat(Load<uint16_t>(i));
      case DType::kBFloat16:
        return BFloat16ToFloat(Load<uint16_t>(i));
      default:
        return static_cast<double>(Int(i));
    }
  }

  int64_t Int(int64_t i) const {
    switch (dtype_) {
      case DType::kInt32:
        return Load<int32_t>(i);
      case DType::kInt64:
        return Load<int64_t>(i);
      case DType::kBool:
        return Load<uint8_t>(i) != 0;
      default:
        return static_cast<int64_t>(Float(i));
    }
  }

 private:
  template <typename T>
  T Load(int64_t i) const {
    T value;
    std::memcpy(&value, bytes_.data() + i * sizeof(T), sizeof(T));
    return value;
  }

  DType dtype_;
  std::string_view bytes_;
};

// Python's "{:.<precision>f}" / "{:.<precision>e}" of a double: like printf
// for finite values, "inf"/"-inf"/"nan" otherwise (printf could say "-nan").
std::string PyFormat(double value, char conversion, int precision) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  char format[8];
  std::snprintf(format, sizeof(format), "%%.%d%c", precision, conversion);
  char buffer[512];
  std::snprintf(buffer, sizeof(buffer), format, value);
  return buffer;
}

std::string PadLeft(std::string s, size_t width) {
  if (s.size() < width) s.insert(0, width - s.size(), ' ');
  return s;
}

// torch._tensor_str._Formatter: one element width and notation for the
// whole tensor, chosen from the elements that will be shown.
class Formatter {
 public:
  Formatter(const Elements& elements, const std::vector<int64_t>& shown)
      : elements_(elements), floating_(elements.floating()) {
    if (!floating_) {
      for (int64_t i : shown) {
        max_width_ = std::max(max_width_, NonFloating(i).size());
      }
      return;
    }
    std::vector<double> nonzero_finite;
    for (int64_t i : shown) {
      const double v = elements.Float(i);
      if (std::isfinite(v) && v != 0) nonzero_finite.push_back(v);
    }
    if (nonzero_finite.empty()) return;
    double min_abs = std::abs(nonzero_finite[0]);
    double max_abs = min_abs;
    for (double v : nonzero_finite) {
      min_abs = std::min(min_abs, std::abs(v));
      max_abs = std::max(max_abs, std::abs(v));
      if (v != std::ceil(v)) int_mode_ = false;
    }
    sci_mode_ = max_abs / min_abs > 1000.0 || max_abs > 1.0e8 ||
                (!int_mode_ && min_abs < 1.0e-4);
    for (double v : nonzero_finite) {
      size_t width;
      if (sci_mode_) {
        width = PyFormat(v, 'e', kPrecision).size();
      } else if (int_mode_) {
        width = PyFormat(v, 'f', 0).size() + 1;  // + the trailing '.'
      } else {
        width = PyFormat(v, 'f', kPrecision).size();
      }
      max_width_ = std::max(max_width_, width);
    }
  }

  size_t width() const { return max_width_; }

  // Element `i`, right-aligned to width().
  std::string Format(int64_t i) const {
    if (!floating_) return PadLeft(NonFloating(i), max_width_);
    const double v = elements_.Float(i);
    std::string s;
    if (sci_mode_) {
      s = PyFormat(v, 'e', kPrecision);
    } else if (int_mode_) {
      s = PyFormat(v, 'f', 0);
      if (std::isfinite(v)) s += '.';
    } else {
      s = PyFormat(v, 'f', kPrecision);
    }
    return PadLeft(std::move(s), max_width_);
  }

 private:
  std::string NonFloating(int64_t i) const {
    const int64_t v = elements_.Int(i);
    if (elements_.is_bool()) return v ? "True" : "False";
    return std::to_string(v);
  }

  const Elements& elements_;
  bool floating_;
  bool int_mode_ = true;
  bool sci_mode_ = false;
  size_t max_width_ = 1;
};

// Walks the tensor the way _tensor_str_with_formatter does.
class Printer {
 public:
  Printer(const std::vector<int64_t>& shape, bool summarize)
      : shape_(shape), summarize_(summarize) {
    strides_.assign(shape.size(), 1);
    for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) {
      strides_[d] = strides_[d + 1] * shape[d + 1];
    }
  }

  // Flat indices of the elements that will be shown (get_summarized_data).
  std::vector<int64_t> Shown() const {
    std::vector<int64_t> out;
    CollectShown(0, 0, out);
    return out;
  }

  // The nested-list body, its first line starting at column `indent`.
  std::string Print(const Formatter& formatter, int64_t indent) const {
    if (shape_.empty()) return formatter.Format(0);
    return Dim(formatter, 0, 0, indent);
  }

 private:
  // Indices along dimension d that are printed; -1 marks the "..." gap.
  std::vector<int64_t> Indices(size_t d) const {
    std::vector<int64_t> out;
    const int64_t n = shape_[d];
    if (summarize_ && n > 2 * kEdgeItems) {
      for (int64_t i = 0; i < kEdgeItems; ++i) out.push_back(i);
      out.push_back(-1);
      for (int64_t i = n - kEdgeItems; i < n; ++i) out.push_back(i);
    } else {
      for (int64_t i = 0; i < n; ++i) out.push_back(i);
    }
    return out;
  }

  void CollectShown(size_t d, int64_t base, std::vector<int64_t>& out) const {
    if (d == shape_.size()) {
      out.push_back(base);
      return;
    }
    for (int64_t i : Indices(d)) {
      if (i >= 0) CollectShown(d + 1, base + i * strides_[d], out);
    }
  }

  std::string Dim(const Formatter& formatter, size_t d, int64_t base,
                  int64_t indent) const {
    std::vector<std::string> parts;
    if (d + 1 == shape_.size()) {  // _vector_str
      for (int64_t i : Indices(d)) {
        parts.push_back(i < 0 ? " ..." : formatter.Format(base + i));
      }
      const int64_t element_length =
          static_cast<int64_t>(formatter.width()) + 2;
      const int64_t per_line =
          std::max<int64_t>(1, (kLineWidth - indent) / element_length);
      std::string out = "[";
      for (size_t k = 0; k < parts.size(); ++k) {
        if (k > 0) {
          out += k % per_line == 0
                     ? ",\n" + std::string(static_cast<size_t>(indent) + 1, ' ')
                     : ", ";
        }
        out += parts[k];
      }
      return out + "]";
    }
    for (int64_t i : Indices(d)) {
      parts.push_back(
          i < 0 ? "..."
                : Dim(formatter, d + 1, base + i * strides_[d], indent + 1));
    }
    const std::string separator =
        "," + std::string(shape_.size() - d - 1, '\n') +
        std::string(static_cast<size_t>(indent) + 1, ' ');
    std::string out = "[";
    for (size_t k = 0; k < parts.size(); ++k) {
      if (k > 0) out += separator;
      out += parts[k];
    }
    return out + "]";
  }

  const std::vector<int64_t>& shape_;
  bool summarize_;
  std::vector<int64_t> strides_;
};

// _add_suffixes: ", suffix" on the last line while it fits in the line
// width, else on a new line indented under the opening parenthesis.
std::string AddSuffixes(std::string s, const std::vector<std::string>& suffixes,
                        size_t indent) {
  const size_t newline = s.rfind('\n');
  // Python: len(s) - s.rfind("\n") + 1, where rfind gives -1 for none.
  size_t last_line_len =
      newline == std::string::npos ? s.size() + 2 : s.size() - newline + 1;
  for (const std::string& suffix : suffixes) {
    if (last_line_len + suffix.size() + 2 > static_cast<size_t>(kLineWidth)) {
      s += ",\n" + std::string(indent, ' ') + suffix;
      last_line_len = indent + suffix.size();
    } else {
      s += ", " + suffix;
      last_line_len += suffix.size() + 2;
    }
  }
  return s + ")";
}

// Python's str(tuple): "(0, 3)", "(0,)", "()".
std::string PyTuple(const std::vector<int64_t>& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  if (shape.size() == 1) out += ",";
  return out + ")";
}

}  // namespace

std::string FormatTensor(const std::vector<int64_t>& shape, DType dtype,
                         std::string_view bytes, std::string_view device,
                         std::string_view autograd) {
  int64_t numel = 1;
  for (int64_t n : shape) {
    if (n < 0) {
      throw Error(StatusCode::INVALID_ARGUMENT,
                  "FormatTensor: negative dimension in shape");
    }
    numel *= n;
  }
  if (static_cast<uint64_t>(numel) * DTypeSize(dtype) != bytes.size()) {
    throw Error(StatusCode::INVALID_ARGUMENT,
                "FormatTensor: " + std::to_string(bytes.size()) +
                    " bytes do not hold " + std::to_string(numel) + " " +
                    std::string(DTypeName(dtype)) + " elements");
  }

  const std::string prefix = "tensor(";
  const std::string dtype_suffix =
      "dtype=torch." + std::string(DTypeName(dtype));
  std::vector<std::string> suffixes;
  if (!device.empty() && device != "cpu" && device != "cpu:0") {
    suffixes.push_back("device='" + std::string(device) + "'");
  }

  std::string body;
  if (numel == 0) {
    // Empty tensors show their shape unless it is (0,), and any dtype but
    // the default float32, since no element hints at it.
    if (shape.size() != 1) suffixes.push_back("size=" + PyTuple(shape));
    if (dtype != DType::kFloat32) suffixes.push_back(dtype_suffix);
    body = "[]";
  } else {
    if (dtype != DType::kFloat32 && dtype != DType::kInt64 &&
        dtype != DType::kBool) {
      suffixes.push_back(dtype_suffix);
    }
    const Elements elements(dtype, bytes);
    const bool summarize = numel > kThreshold;
    const Printer printer(shape, summarize);
    const Formatter formatter(elements, printer.Shown());
    body = printer.Print(formatter, static_cast<int64_t>(prefix.size()));
  }
  if (!autograd.empty()) suffixes.emplace_back(autograd);
  return AddSuffixes(prefix + body, suffixes, prefix.size());
}

}  // namespace tensord::client::internal
