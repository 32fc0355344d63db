// PyTorch's tensor repr, checked against what torch prints, without a server.
#include "client/tensor_repr.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace tensord::client::internal {
namespace {

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

std::string Bools(const std::vector<int>& values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}

template <typename T>
std::string Repr(const std::vector<T>& values, std::vector<int64_t> shape,
                 std::string_view device = "cpu") {
  return FormatTensor(shape, kDTypeOf<T>, Bytes(values), device);
}

template <typename T>
std::string Repr1D(const std::vector<T>& values,
                   std::string_view device = "cpu") {
  return Repr(values, {static_cast<int64_t>(values.size())}, device);
}

std::vector<int64_t> Arange(int64_t n) {
  std::vector<int64_t> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = i;
  return out;
}

TEST(TensorReprTest, IntegersRightAlignedToCommonWidth) {
  EXPECT_EQ(Repr1D<int64_t>({5, 16, 3}), "tensor([ 5, 16,  3])");
  EXPECT_EQ(Repr1D<int64_t>({1, 2, 3}), "tensor([1, 2, 3])");
  EXPECT_EQ(Repr1D<int64_t>({-1, 10}), "tensor([-1, 10])");
}

TEST(TensorReprTest, DeviceSuffixUnlessDefaultCpu) {
  EXPECT_EQ(Repr1D<int64_t>({5, 16, 3}, "cuda:0"),
            "tensor([ 5, 16,  3], device='cuda:0')");
  EXPECT_EQ(Repr1D<int64_t>({1, 2, 3}, "cpu:0"), "tensor([1, 2, 3])");
  EXPECT_EQ(Repr1D<int64_t>({1, 2, 3}, ""), "tensor([1, 2, 3])");
  EXPECT_EQ(Repr1D<int64_t>({1, 2, 3}, "cpu:1"),
            "tensor([1, 2, 3], device='cpu:1')");
}

TEST(TensorReprTest, FloatMatrixRowsAlignUnderFirstBracket) {
  EXPECT_EQ(Repr<float>({1, 1, 1, 1, 1, 1}, {2, 3}, "cuda:0"),
            "tensor([[1., 1., 1.],\n"
            "        [1., 1., 1.]], device='cuda:0')");
  EXPECT_EQ(Repr<float>({0, 0}, {2}), "tensor([0., 0.])");
}

TEST(TensorReprTest, ThreeDimsSeparateBlocksWithBlankLine) {
  EXPECT_EQ(Repr<int64_t>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2}),
            "tensor([[[1, 2],\n"
            "         [3, 4]],\n"
            "\n"
            "        [[5, 6],\n"
            "         [7, 8]]])");
}

TEST(TensorReprTest, FixedPointWithFourDecimals) {
  EXPECT_EQ(Repr1D<float>({0.1f, 0.25f}), "tensor([0.1000, 0.2500])");
  EXPECT_EQ(Repr1D<float>({1.5f, -2.0f}), "tensor([ 1.5000, -2.0000])");
  EXPECT_EQ(Repr1D<float>({123456.7f}), "tensor([123456.7031])");
}

TEST(TensorReprTest, ScientificNotationRules) {
  // Integral values: ratio > 1000 or max > 1e8.
  EXPECT_EQ(Repr1D<float>({1e10f, 1.0f}), "tensor([1.0000e+10, 1.0000e+00])");
  EXPECT_EQ(Repr1D<float>({1e9f}), "tensor([1.0000e+09])");
  EXPECT_EQ(Repr1D<float>({1.0f, 1000.0f}), "tensor([   1., 1000.])");
  // Non-integral values: also when the smallest nonzero is below 1e-4.
  EXPECT_EQ(Repr1D<float>({1e-5f, 1.0f}), "tensor([1.0000e-05, 1.0000e+00])");
  EXPECT_EQ(Repr1D<float>({0.5f, 1234.5f}), "tensor([5.0000e-01, 1.2345e+03])");
  EXPECT_EQ(Repr1D<double>({-1e-5, 0.0}),
            "tensor([-1.0000e-05,  0.0000e+00], dtype=torch.float64)");
}

TEST(TensorReprTest, NonFiniteValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(Repr1D<float>({1.0f, inf, nan}), "tensor([1., inf, nan])");
  EXPECT_EQ(Repr1D<float>({1.5f, nan}), "tensor([1.5000,    nan])");
  EXPECT_EQ(Repr1D<float>({-inf, -nan}), "tensor([-inf, nan])");
}

TEST(TensorReprTest, Bools) {
  EXPECT_EQ(FormatTensor({2}, DType::kBool, Bools({1, 0}), "cpu"),
            "tensor([ True, False])");
  EXPECT_EQ(FormatTensor({}, DType::kBool, Bools({1}), "cpu"), "tensor(True)");
}

TEST(TensorReprTest, ZeroDimensional) {
  EXPECT_EQ(Repr<int64_t>({5}, {}), "tensor(5)");
  EXPECT_EQ(Repr<float>({3.5f}, {}), "tensor(3.5000)");
  EXPECT_EQ(Repr<float>({2.0f}, {}, "cuda:0"), "tensor(2., device='cuda:0')");
}

TEST(TensorReprTest, DTypeSuffixForNonDefaultDTypesAfterDevice) {
  EXPECT_EQ(Repr1D<int32_t>({1, 2}), "tensor([1, 2], dtype=torch.int32)");
  EXPECT_EQ(Repr1D<double>({1, 2}), "tensor([1., 2.], dtype=torch.float64)");
  EXPECT_EQ(Repr1D<int32_t>({1, 2}, "cuda:0"),
            "tensor([1, 2], device='cuda:0', dtype=torch.int32)");
  // float16 1.0 = 0x3c00, -2.5 = 0xc100; bfloat16 1.0 = 0x3f80.
  EXPECT_EQ(FormatTensor({2}, DType::kFloat16,
                         Bytes<uint16_t>({0x3c00, 0xc100}), "cpu"),
            "tensor([ 1.0000, -2.5000], dtype=torch.float16)");
  EXPECT_EQ(
      FormatTensor({1}, DType::kBFloat16, Bytes<uint16_t>({0x3f80}), "cpu"),
      "tensor([1.], dtype=torch.bfloat16)");
}

TEST(TensorReprTest, EmptyTensors) {
  EXPECT_EQ(Repr<float>({}, {0}), "tensor([])");
  EXPECT_EQ(Repr<float>({}, {0, 3}), "tensor([], size=(0, 3))");
  EXPECT_EQ(Repr<int64_t>({}, {0}), "tensor([], dtype=torch.int64)");
  EXPECT_EQ(Repr<int64_t>({}, {2, 0}, "cuda:0"),
            "tensor([], device='cuda:0', size=(2, 0), dtype=torch.int64)");
}

TEST(TensorReprTest, LongRowsWrapAtLineWidth) {
  EXPECT_EQ(Repr1D<int64_t>(Arange(30)),
            "tensor([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, "
            "14, 15, 16, 17,\n"
            "        18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29])");
}

TEST(TensorReprTest, SuffixMovesToNewLineWhenItDoesNotFit) {
  // 18 two-digit elements fill one line of 77 characters; the device suffix
  // does not fit after it.
  std::vector<int64_t> v = Arange(18);
  for (auto& x : v) x += 10;
  EXPECT_EQ(Repr1D<int64_t>(v, "cuda:0"),
            "tensor([10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, "
            "24, 25, 26, 27],\n"
            "       device='cuda:0')");
}

TEST(TensorReprTest, SummarizesAboveThousandElements) {
  EXPECT_EQ(Repr1D<int64_t>(Arange(2000)),
            "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])");
  std::vector<float> zeros(1000 * 1000, 0.0f);
  EXPECT_EQ(Repr<float>(zeros, {1000, 1000}),
            "tensor([[0., 0., 0.,  ..., 0., 0., 0.],\n"
            "        [0., 0., 0.,  ..., 0., 0., 0.],\n"
            "        [0., 0., 0.,  ..., 0., 0., 0.],\n"
            "        ...,\n"
            "        [0., 0., 0.,  ..., 0., 0., 0.],\n"
            "        [0., 0., 0.,  ..., 0., 0., 0.],\n"
            "        [0., 0., 0.,  ..., 0., 0., 0.]])");
  // The width comes from the shown elements only: the hidden 1e6 does not
  // switch the tensor to scientific notation.
  std::vector<float> mostly_small(1001, 1.0f);
  mostly_small[500] = 1e6f;
  EXPECT_EQ(Repr1D<float>(mostly_small),
            "tensor([1., 1., 1.,  ..., 1., 1., 1.])");
}

TEST(TensorReprTest, ThousandElementsAreNotSummarized) {
  const std::string s = Repr1D<int64_t>(Arange(1000));
  EXPECT_EQ(s.find("..."), std::string::npos);
  EXPECT_NE(s.find("999])"), std::string::npos);
}

TEST(TensorReprTest, RejectsBytesThatDoNotMatchTheShape) {
  EXPECT_THROW(FormatTensor({3}, DType::kInt64, std::string(16, '\0'), "cpu"),
               Error);
}

}  // namespace
}  // namespace tensord::client::internal
