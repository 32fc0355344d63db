// The CUDA device's host logic, tested without a GPU (issue 11 item 3):
// the capability table, launch geometry, kernel indices, the
// copy choices, the out-of-memory message, the cuBLAS gemm parameters and
// the cuDNN selection rule and descriptors.
// The gemm parameters are proven by running them through a CPU reference of
// cublasGemmStridedBatchedEx (column-major, honouring op, ld and stride as
// cuBLAS defines them) over every matmul layout the conformance suite uses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/device.h"
#include "core/base/dtype.h"
#include "core/base/op_checks.h"
#include "core/base/shape.h"
#include "core/cuda/copy_plan.h"
#include "core/cuda/cuda_supports.h"
#include "core/cuda/cudnn_params.h"
#include "core/cuda/gemm_params.h"
#include "core/cuda/kernel_args.h"
#include "core/cuda/launch_geometry.h"
#include "core/cuda/out_of_memory.h"

namespace tensord::core::cuda {
namespace {

using ::testing::HasSubstr;

constexpr DType kAllDTypes[] = {
    DType::kFloat32, DType::kFloat64, DType::kInt32,   DType::kInt64,
    DType::kBool,    DType::kFloat16, DType::kBFloat16};
constexpr OpKind kAllOpKinds[] = {
    OpKind::kFill,   OpKind::kRandomFill, OpKind::kCast,  OpKind::kBinary,
    OpKind::kMatMul, OpKind::kUnary,      OpKind::kReduce};

Shape S(std::vector<int64_t> dims) { return *Shape::Make(dims); }

std::string Message(const absl::Status& s) { return std::string(s.message()); }

// NotImplementedError's message (core/base/op_checks.h), spelled out.
std::string NotImplemented(std::string_view op, DType dtype,
                           std::string_view device) {
  std::string m = "\"";
  m.append(op).append("\" not implemented for '").append(ScalarTypeName(dtype));
  m.append("' on ").append(device);
  return m;
}

// --- Supports table ----------------------------------------

TEST(CudaSupportsTest, Table) {
  for (DType dtype : kAllDTypes) {
    for (OpKind op : kAllOpKinds) {
      bool want = true;
      if (op == OpKind::kRandomFill) want = IsFloating(dtype);
      if (op == OpKind::kMatMul) want = dtype != DType::kBool;
      const absl::Status st = CudaCapabilities().Check(op, dtype, "cuda:3");
      SCOPED_TRACE(std::string(OpKindName(op)) + " " +
                   std::string(DTypeName(dtype)));
      EXPECT_EQ(st.ok(), want) << st;
      if (!st.ok()) {
        EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
        EXPECT_EQ(Message(st), NotImplemented(OpKindName(op), dtype, "cuda:3"));
      }
    }
  }
}

// --- Launch geometry ---------------------------------------------------------

static_assert(GridBlocks(1) == 1);  // usable in constant expressions

TEST(LaunchGeometryTest, BlocksCoverTheElementsAndAreClamped) {
  EXPECT_EQ(GridBlocks(0), 1u);  // never an empty grid
  EXPECT_EQ(GridBlocks(-5), 1u);
  EXPECT_EQ(GridBlocks(1), 1u);
  EXPECT_EQ(GridBlocks(kBlockThreads), 1u);
  EXPECT_EQ(GridBlocks(kBlockThreads + 1), 2u);
  EXPECT_EQ(GridBlocks(int64_t{1000} * kBlockThreads - 1), 1000u);
  const int64_t full = kMaxGridBlocks * kBlockThreads;
  EXPECT_EQ(GridBlocks(full), static_cast<unsigned>(kMaxGridBlocks));
  EXPECT_EQ(GridBlocks(full - kBlockThreads),
            static_cast<unsigned>(kMaxGridBlocks - 1));
  EXPECT_EQ(GridBlocks(full + 1), static_cast<unsigned>(kMaxGridBlocks));
  // No overflow at the top of the range.
  EXPECT_EQ(GridBlocks(std::numeric_limits<int64_t>::max()),
            static_cast<unsigned>(kMaxGridBlocks));
  // Every element is covered by the grid-stride loop, for any n.
  for (int64_t n : {int64_t{1}, int64_t{255}, int64_t{257}, int64_t{1} << 40}) {
    const int64_t threads = int64_t{GridBlocks(n)} * kBlockThreads;
    EXPECT_GT(threads, 0);
    EXPECT_TRUE(threads >= n || GridBlocks(n) == kMaxGridBlocks) << n;
  }
}

// --- Kernel arguments --------------------------------------------------------

TEST(KernelArgsTest, ElemTypes) {
  EXPECT_EQ(ToElem(DType::kFloat32), ElemType::kF32);
  EXPECT_EQ(ToElem(DType::kFloat64), ElemType::kF64);
  EXPECT_EQ(ToElem(DType::kInt32), ElemType::kI32);
  EXPECT_EQ(ToElem(DType::kInt64), ElemType::kI64);
  EXPECT_EQ(ToElem(DType::kBool), ElemType::kBool);
  EXPECT_EQ(ToElem(DType::kFloat16), ElemType::kF16);
  EXPECT_EQ(ToElem(DType::kBFloat16), ElemType::kBF16);
}

// The offsets the binary and permute kernels compute for flat position i
// (binary.cu's Offsets, permute.cu's loop): innermost dim fastest.
void KernelOffsets(const BroadcastIndex& idx, int64_t i, int64_t* a,
                   int64_t* b) {
  *a = 0;
  *b = 0;
  for (int d = idx.rank - 1; d >= 0; --d) {
    const int64_t c = i % idx.dims[d];
    i /= idx.dims[d];
    *a += c * idx.a_strides[d];
    *b += c * idx.b_strides[d];
  }
}

// Row-major coordinates of flat position i of `shape`.
std::vector<int64_t> Coords(const Shape& shape, int64_t i) {
  std::vector<int64_t> c(shape.rank());
  for (int d = shape.rank() - 1; d >= 0; --d) {
    c[d] = i % shape.dim(d);
    i /= shape.dim(d);
  }
  return c;
}

// NumPy broadcasting, spelled out: the element of `in` that out's element
// at `out_coords` reads (dims right-aligned, size-1 dims repeat).
int64_t BroadcastSource(const Shape& in, const std::vector<int64_t>& out_c) {
  const int lead = static_cast<int>(out_c.size()) - in.rank();
  int64_t offset = 0;
  for (int d = 0; d < in.rank(); ++d) {
    offset = offset * in.dim(d) + (in.dim(d) == 1 ? 0 : out_c[lead + d]);
  }
  return offset;
}

TEST(KernelArgsTest, BinaryIndexReadsTheBroadcastElements) {
  struct Case {
    Shape a, b;
  };
  const std::vector<Case> cases = {
      {S({2, 3}), S({3})},
      {S({4, 1, 3}), S({2, 1})},
      {S({}), S({2, 3})},
      {S({5, 1}), S({1, 6})},
      {S({3, 0, 2}), S({2})},
      // The largest rank a Shape has: the kernel's limit.
      {S({2, 1, 2, 1, 2, 1, 2, 1}), S({1, 2, 1, 2, 1, 2, 1, 3})},
      {S({7}), S({2, 1, 1, 1, 1, 1, 1, 1})},
  };
  for (const Case& c : cases) {
    const Shape out = *BroadcastShapes(c.a, c.b);
    SCOPED_TRACE(c.a.ToString() + " (op) " + c.b.ToString());
    absl::StatusOr<BinaryIndex> index = MakeBinaryIndex(c.a, c.b, out);
    ASSERT_TRUE(index.ok()) << index.status();
    EXPECT_FALSE(index->contiguous);
    EXPECT_EQ(index->index.rank, out.rank());
    for (int64_t i = 0; i < out.NumElements(); ++i) {
      int64_t oa = 0, ob = 0;
      KernelOffsets(index->index, i, &oa, &ob);
      const std::vector<int64_t> oc = Coords(out, i);
      ASSERT_EQ(oa, BroadcastSource(c.a, oc)) << i;
      ASSERT_EQ(ob, BroadcastSource(c.b, oc)) << i;
    }
  }
}

TEST(KernelArgsTest, BinaryIndexOfSameShapesIsContiguous) {
  for (const Shape& s : {S({}), S({4}), S({2, 3, 4}), S({0, 5})}) {
    absl::StatusOr<BinaryIndex> index = MakeBinaryIndex(s, s, s);
    ASSERT_TRUE(index.ok());
    EXPECT_TRUE(index->contiguous);
    EXPECT_EQ(index->index.rank, 0);
  }
  // One operand of out's shape is not enough.
  EXPECT_FALSE(MakeBinaryIndex(S({2, 3}), S({3}), S({2, 3}))->contiguous);
  EXPECT_TRUE(MakeBinaryIndex(S({2, 1}), S({2, 1}), S({2, 1}))->contiguous);
}

// where's index, walked as where.cu walks it, reads each operand's
// broadcast source element.
TEST(KernelArgsTest, WhereIndexReadsEachOperandsBroadcastElement) {
  struct Case {
    Shape cond, x, y;
  };
  const std::vector<Case> cases = {
      {S({2, 3}), S({3}), S({})},
      {S({4, 1, 2}), S({3, 1}), S({1, 3, 2})},
      {S({}), S({}), S({})},
      {S({1}), S({5}), S({5})},
  };
  for (const Case& c : cases) {
    const Shape out = *BroadcastShapes(*BroadcastShapes(c.cond, c.x), c.y);
    SCOPED_TRACE(c.cond.ToString() + " " + c.x.ToString() + " " +
                 c.y.ToString());
    absl::StatusOr<WhereIndex> index = MakeWhereIndex(c.cond, c.x, c.y, out);
    ASSERT_TRUE(index.ok()) << index.status();
    ASSERT_EQ(index->rank, out.rank());
    const Shape* operands[] = {&c.cond, &c.x, &c.y};
    for (int64_t i = 0; i < out.NumElements(); ++i) {
      const std::vector<int64_t> oc = Coords(out, i);
      for (int k = 0; k < 3; ++k) {
        int64_t rest = i, offset = 0;
        for (int d = index->rank - 1; d >= 0; --d) {
          offset += (rest % index->dims[d]) * index->strides[k][d];
          rest /= index->dims[d];
        }
        ASSERT_EQ(offset, BroadcastSource(*operands[k], oc)) << i << " " << k;
      }
    }
  }
}

// An empty tensor may have dims whose product exceeds int64: the permute
// index saturates (the kernel never runs) rather than overflow.
TEST(KernelArgsTest, PermuteIndexOfAnEmptyTensorWithHugeDims) {
  const int64_t big = int64_t{1} << 40;
  absl::StatusOr<BroadcastIndex> index =
      MakePermuteIndex(S({0, 4, big, big}), {0, 2, 3, 1});
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->dims[3], 4);
  EXPECT_EQ(index->a_strides[0], INT64_MAX);  // saturated, never followed
  EXPECT_EQ(index->a_strides[1], big);
  EXPECT_EQ(index->a_strides[2], 1);
  EXPECT_EQ(index->a_strides[3], INT64_MAX);
}

// Naive permute: out's element at coords o is in's at c, c[perm[i]] = o[i].
int64_t PermuteSource(const Shape& in, const std::vector<int>& perm,
                      const std::vector<int64_t>& out_c) {
  std::vector<int64_t> c(in.rank());
  for (size_t i = 0; i < perm.size(); ++i) c[perm[i]] = out_c[i];
  int64_t offset = 0;
  for (int d = 0; d < in.rank(); ++d) offset = offset * in.dim(d) + c[d];
  return offset;
}

TEST(KernelArgsTest, PermuteIndexReadsThePermutedElements) {
  struct Case {
    Shape in;
    std::vector<int> perm;
  };
  std::vector<Case> cases = {
      {S({}), {}},
      {S({5}), {0}},
      {S({3, 1, 4, 2}), {3, 1, 0, 2}},
      {S({2, 0, 3}), {2, 0, 1}},
      {S({2, 3, 1, 2, 1, 2, 3, 2}), {7, 6, 5, 4, 3, 2, 1, 0}},
  };
  std::vector<int> all = {0, 1, 2};
  do {
    cases.push_back({S({2, 3, 4}), all});
  } while (std::next_permutation(all.begin(), all.end()));
  for (const Case& c : cases) {
    std::vector<int64_t> out_dims;
    for (int p : c.perm) out_dims.push_back(c.in.dim(p));
    const Shape out = S(out_dims);
    SCOPED_TRACE(c.in.ToString() + " -> " + out.ToString());
    absl::StatusOr<BroadcastIndex> index = MakePermuteIndex(c.in, c.perm);
    ASSERT_TRUE(index.ok()) << index.status();
    ASSERT_EQ(index->rank, out.rank());
    for (int d = 0; d < out.rank(); ++d) EXPECT_EQ(index->dims[d], out.dim(d));
    // The kernel walks in's element count (== out's).
    for (int64_t i = 0; i < c.in.NumElements(); ++i) {
      int64_t oa = 0, unused = 0;
      KernelOffsets(*index, i, &oa, &unused);
      ASSERT_EQ(oa, PermuteSource(c.in, c.perm, Coords(out, i))) << i;
    }
  }
}

TEST(KernelArgsTest, PermuteIndexErrors) {
  const absl::StatusOr<BroadcastIndex> short_perm =
      MakePermuteIndex(S({2, 3}), {0});
  EXPECT_EQ(short_perm.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(short_perm.status()), "permute of rank 2 with 1 dims");
  for (const std::vector<int>& bad :
       {std::vector<int>{0, 2}, {-1, 0}, {1, 1}}) {
    const absl::StatusOr<BroadcastIndex> st = MakePermuteIndex(S({2, 3}), bad);
    EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Message(st.status()),
                ::testing::StartsWith("permute of rank 2: ["));
    EXPECT_THAT(Message(st.status()), HasSubstr("is not a permutation"));
  }
}

// --- Copies ------------------------------------------------------------------

// A buffer of some size whose bytes are never touched.
class SizedBuffer final : public Buffer {
 public:
  explicit SizedBuffer(size_t size) : size_(size) {}
  void* data() override { return nullptr; }
  const void* data() const override { return nullptr; }
  size_t size() const override { return size_; }

 private:
  size_t size_;
};

TEST(CopyPlanTest, BlockCopyMethodsOfTheConformancePatterns) {
  // tests/conformance's CopyBlocksPatterns: 8 KiB both sides.
  const SizedBuffer src(8192), dst(8192);
  struct Case {
    BlockCopy copy;
    BlockCopyMethod want;
  };
  const std::vector<Case> cases = {
      {{1, 64, 0, 0, 0, 0}, BlockCopyMethod::kMemcpy},
      {{8, 16, 4, 32, 0, 16}, BlockCopyMethod::kMemcpy2D},
      {{5, 12, 8, 24, 100, 40}, BlockCopyMethod::kMemcpy2D},
      {{3, 7, 1, 9, 2, 11}, BlockCopyMethod::kMemcpy2D},
      {{1000, 4, 0, 4, 0, 8}, BlockCopyMethod::kMemcpy2D},
      // Overlapping reads: a source stride below the row is no pitch.
      {{4, 24, 0, 8, 0, 24}, BlockCopyMethod::kKernel},
      {{4, 24, 0, 24, 0, 8}, BlockCopyMethod::kKernel},
      {{0, 16, 0, 16, 0, 16}, BlockCopyMethod::kNothing},
      {{4, 0, 0, 16, 0, 16}, BlockCopyMethod::kNothing},
      {{-1, 16, 0, 16, 0, 16}, BlockCopyMethod::kNothing},
      // One row: the strides do not matter.
      {{1, 16, 0, -5, 8, 1}, BlockCopyMethod::kMemcpy},
      // Rows read backwards.
      {{3, 8, 64, -16, 0, 8}, BlockCopyMethod::kKernel},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    absl::StatusOr<BlockCopyMethod> m = PlanBlockCopy(cases[i].copy, src, dst);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(*m, cases[i].want);
  }
}

TEST(CopyPlanTest, PitchesAboveTheLimitUseTheKernel) {
  const SizedBuffer big(size_t{1} << 34);
  const int64_t at_limit = kMaxMemcpy2DPitch;
  EXPECT_EQ(*PlanBlockCopy({2, 16, 0, at_limit, 0, 16}, big, big),
            BlockCopyMethod::kMemcpy2D);
  EXPECT_EQ(*PlanBlockCopy({2, 16, 0, at_limit + 1, 0, 16}, big, big),
            BlockCopyMethod::kKernel);
  EXPECT_EQ(*PlanBlockCopy({2, 16, 0, 16, 0, at_limit + 1}, big, big),
            BlockCopyMethod::kKernel);
}

TEST(CopyPlanTest, BlockCopyRangeErrors) {
  const SizedBuffer src(8192), dst(8192);
  auto code = [&](const BlockCopy& c) {
    return PlanBlockCopy(c, src, dst).status().code();
  };
  auto message = [&](const BlockCopy& c) {
    return Message(PlanBlockCopy(c, src, dst).status());
  };
  // The conformance suite's: the last row starts past the source.
  EXPECT_EQ(code({2, 16, 0, 8192, 0, 0}), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(message({2, 16, 0, 8192, 0, 0}),
            "copy of 16 bytes at offset 8192 is outside a buffer of 8192 "
            "bytes");
  // The last row ends one byte past the destination; exactly at its end is
  // fine.
  EXPECT_EQ(code({2, 16, 0, 16, 0, 8192 - 15}), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(PlanBlockCopy({2, 16, 0, 16, 0, 8192 - 16}, src, dst).ok());
  // Negative offsets: the first row, or the last through a negative stride.
  EXPECT_EQ(message({1, 8, -1, 0, 0, 0}), "block copy with a negative offset");
  EXPECT_EQ(message({1, 8, 0, 0, -8, 0}), "block copy with a negative offset");
  EXPECT_EQ(message({3, 8, 8, -8, 0, 8}), "block copy with a negative offset");
  EXPECT_EQ(code({3, 8, 0, 8, 16, -16}), absl::StatusCode::kOutOfRange);
  // A negative stride: the first row is the last in memory, and must fit.
  EXPECT_EQ(code({2, 16, 8190, -8000, 0, 16}), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(PlanBlockCopy({2, 16, 8176, -8000, 0, 16}, src, dst).ok());
  // Offsets that overflow int64 are out of range, not wrapped.
  const int64_t huge = std::numeric_limits<int64_t>::max() / 2;
  EXPECT_EQ(message({4, 8, 0, huge, 0, 8}), "block copy offsets overflow");
  EXPECT_EQ(message({2, 8, huge + 2, huge, 0, 8}),
            "block copy offsets overflow");
}

TEST(CopyPlanTest, DeviceCopyRoutes) {
  EXPECT_EQ(ChooseDeviceCopyRoute(DeviceKind::kCpu, false, false),
            DeviceCopyRoute::kFromHost);
  // Whatever else is said of a host source.
  EXPECT_EQ(ChooseDeviceCopyRoute(DeviceKind::kCpu, true, true),
            DeviceCopyRoute::kFromHost);
  EXPECT_EQ(ChooseDeviceCopyRoute(DeviceKind::kCuda, true, false),
            DeviceCopyRoute::kSameDevice);
  EXPECT_EQ(ChooseDeviceCopyRoute(DeviceKind::kCuda, true, true),
            DeviceCopyRoute::kSameDevice);
  EXPECT_EQ(ChooseDeviceCopyRoute(DeviceKind::kCuda, false, true),
            DeviceCopyRoute::kPeer);
  EXPECT_EQ(ChooseDeviceCopyRoute(DeviceKind::kCuda, false, false),
            DeviceCopyRoute::kStaged);
}

// --- Out of memory -----------------------------------------------------------

TEST(OutOfMemoryTest, MessageNamesAskedHeldAndLeft) {
  CudaMemoryFigures m;
  m.used = 1024;
  m.reserved = 2048;
  m.free = uint64_t{512} << 20;
  m.total = uint64_t{80} << 30;
  EXPECT_EQ(OutOfMemoryMessage("cuda:1", size_t{2} << 30, m),
            "cuda:1: CUDA out of memory. Tried to allocate 2.00 GiB "
            "(2147483648 bytes); in use by tensord 1.00 KiB (reserved 2.00 "
            "KiB); free 512.00 MiB of 80.00 GiB total GPU memory");
  // Figures the driver did not give go out as zeros.
  EXPECT_EQ(OutOfMemoryMessage("cuda:0", 100, CudaMemoryFigures{}),
            "cuda:0: CUDA out of memory. Tried to allocate 100 bytes (100 "
            "bytes); in use by tensord 0 bytes (reserved 0 bytes); free 0 "
            "bytes of 0 bytes total GPU memory");
}

// --- Gemm --------------------------------------------------------------------

// cublasGemmStridedBatchedEx on the CPU, as cuBLAS defines it: column-major;
// for p < batch_count, C_p = alpha * op(A_p) op(B_p) + beta * C_p with
// X_p = X + p * stride_x; op(A) is m x k: A(i, l) = A[i + l * lda] untouched,
// A[l + i * lda] transposed (B likewise, k x n); C(i, j) = C[i + j * ldc].
// C is not read when beta == 0. False for arguments cuBLAS rejects with
// CUBLAS_STATUS_INVALID_VALUE (negative sizes, ld < max(1, rows)), and for
// any access outside the three buffers (which cuBLAS would make).
bool ReferenceGemm(const GemmParams& p, const std::vector<double>& a,
                   const std::vector<double>& b, std::vector<double>& c) {
  const bool ta = p.trans_a == GemmOp::kTranspose;
  const bool tb = p.trans_b == GemmOp::kTranspose;
  if (p.m < 0 || p.n < 0 || p.k < 0 || p.batch_count < 0) return false;
  if (p.lda < std::max(1, ta ? p.k : p.m)) return false;
  if (p.ldb < std::max(1, tb ? p.n : p.k)) return false;
  if (p.ldc < std::max(1, p.m)) return false;
  auto inside = [](const std::vector<double>& v, int64_t at) {
    return at >= 0 && at < static_cast<int64_t>(v.size());
  };
  for (int64_t batch = 0; batch < p.batch_count; ++batch) {
    for (int64_t j = 0; j < p.n; ++j) {
      for (int64_t i = 0; i < p.m; ++i) {
        double sum = 0;
        for (int64_t l = 0; l < p.k; ++l) {
          const int64_t ai =
              batch * p.stride_a + (ta ? l + i * p.lda : i + l * p.lda);
          const int64_t bi =
              batch * p.stride_b + (tb ? j + l * p.ldb : l + j * p.ldb);
          if (!inside(a, ai) || !inside(b, bi)) return false;
          sum += a[ai] * b[bi];
        }
        const int64_t ci = batch * p.stride_c + i + j * p.ldc;
        if (!inside(c, ci)) return false;
        c[ci] = p.alpha * sum + (p.beta == 0 ? 0 : p.beta * c[ci]);
      }
    }
  }
  return true;
}

TEST(GemmParamsTest, ReferenceGemmHonoursTransposesAndLeadingDimensions) {
  // A column-major 2 x 3 with ld 3 (a padding row of 99s), and B likewise.
  const std::vector<double> a = {1, 2, 99, 3, 4, 99, 5, 6, 99};
  GemmParams p;
  p.batch_count = 1;
  // C (2 x 2) = A (2 x 3) * A^T (3 x 2): [[35, 44], [44, 56]].
  p.trans_a = GemmOp::kNoTranspose;
  p.trans_b = GemmOp::kTranspose;
  p.m = 2;
  p.n = 2;
  p.k = 3;
  p.lda = 3;
  p.ldb = 3;
  p.ldc = 2;
  std::vector<double> c(4, -1);
  ASSERT_TRUE(ReferenceGemm(p, a, a, c));
  EXPECT_EQ(c, (std::vector<double>{35, 44, 44, 56}));
  // C (3 x 3) = A^T * A with ldc 4: the padding row stays.
  p.trans_a = GemmOp::kTranspose;
  p.trans_b = GemmOp::kNoTranspose;
  p.m = 3;
  p.n = 3;
  p.k = 2;
  p.ldc = 4;
  c.assign(12, -1);
  ASSERT_TRUE(ReferenceGemm(p, a, a, c));
  EXPECT_EQ(
      c, (std::vector<double>{5, 11, 17, -1, 11, 25, 39, -1, 17, 39, 61, -1}));
  // What cuBLAS rejects.
  p.ldc = 2;
  EXPECT_FALSE(ReferenceGemm(p, a, a, c));
  p.ldc = 3;
  p.lda = 1;
  EXPECT_FALSE(ReferenceGemm(p, a, a, c));
  p.lda = 3;
  p.ldc = 5;  // valid, but C's last column ends past the buffer
  EXPECT_FALSE(ReferenceGemm(p, a, a, c));
}

struct Layout {
  int64_t batch, m, n, k;
  bool a_broadcast, b_broadcast;
  int64_t a_pad = 0, b_pad = 0, out_pad = 0;  // elements between matrices
};

std::string LayoutName(const Layout& l) {
  return "batch " + std::to_string(l.batch) + ", " + std::to_string(l.m) + "x" +
         std::to_string(l.k) + " * " + std::to_string(l.k) + "x" +
         std::to_string(l.n) + (l.a_broadcast ? ", a broadcast" : "") +
         (l.b_broadcast ? ", b broadcast" : "");
}

MatMulDims DimsOf(const Layout& l) {
  MatMulDims d;
  d.batch = l.batch;
  d.m = l.m;
  d.n = l.n;
  d.k = l.k;
  d.a_batch_stride = l.a_broadcast ? 0 : l.m * l.k + l.a_pad;
  d.b_batch_stride = l.b_broadcast ? 0 : l.k * l.n + l.b_pad;
  d.out_batch_stride = l.m * l.n + l.out_pad;
  return d;
}

// Elements a buffer holding `batch` matrices of `size` at `stride` needs.
int64_t Extent(int64_t batch, int64_t size, int64_t stride) {
  return batch == 0 ? 0 : (batch - 1) * stride + size;
}

// The layouts of the conformance suite's MatMulEveryDTypeAndBatchLayout,
// then the other shapes the executor plans: vectors (1-D operands become
// m = 1 or n = 1), dot and outer products, both operands broadcast, and
// batch strides with gaps.
std::vector<Layout> Layouts() {
  return {
      // tests/conformance/device_conformance_test.cc
      {1, 1, 1, 1, false, false},
      {1, 3, 5, 4, false, false},
      {1, 64, 48, 96, false, false},
      {4, 7, 9, 5, false, false},
      {3, 16, 8, 32, true, false},
      {3, 8, 16, 32, false, true},
      {2, 5, 3, 0, false, false},
      {1, 1, 130, 257, false, false},
      {2, 0, 4, 3, false, false},
      // vector @ matrix, matrix @ vector, dot, outer, batched vectors
      {1, 1, 6, 4, false, false},
      {1, 6, 1, 4, false, false},
      {1, 1, 1, 9, false, false},
      {1, 5, 7, 1, false, false},
      {5, 1, 1, 7, false, false},
      {4, 3, 1, 2, true, false},
      {4, 1, 3, 2, false, true},
      // one matrix broadcast over both operands; square; empty batch
      {3, 4, 5, 6, true, true},
      {2, 8, 8, 8, false, false},
      {0, 3, 4, 5, false, false},
      {2, 3, 0, 4, false, false},
      {3, 2, 3, 0, true, true},
      // gaps between the matrices of a batch
      {3, 4, 5, 6, false, false, 7, 3, 5},
      {2, 1, 4, 3, false, true, 2, 0, 1},
  };
}

// Naive row-major batched matmul, straight from MatMulDims' contract.
void NaiveMatMul(const MatMulDims& d, const double* a, const double* b,
                 double* out) {
  for (int64_t p = 0; p < d.batch; ++p) {
    for (int64_t i = 0; i < d.m; ++i) {
      for (int64_t j = 0; j < d.n; ++j) {
        double sum = 0;
        for (int64_t l = 0; l < d.k; ++l) {
          sum += a[p * d.a_batch_stride + i * d.k + l] *
                 b[p * d.b_batch_stride + l * d.n + j];
        }
        out[p * d.out_batch_stride + i * d.n + j] = sum;
      }
    }
  }
}

// Runs `p` through the reference gemm with a, b and out as the device would
// pass them; false when cuBLAS would reject the parameters or access
// memory outside the operands.
bool RunGemm(const GemmParams& p, const std::vector<double>& a,
             const std::vector<double>& b, std::vector<double>& out) {
  auto operand = [&](GemmOperand which) -> const std::vector<double>& {
    return which == GemmOperand::kA ? a : b;
  };
  return ReferenceGemm(p, operand(p.a_is), operand(p.b_is), out);
}

TEST(GemmParamsTest, ReferenceGemmOfThePlanEqualsRowMajorMatMul) {
  for (const Layout& l : Layouts()) {
    SCOPED_TRACE(LayoutName(l));
    const MatMulDims d = DimsOf(l);
    // Small distinct integers: every sum is exact, any misread shows.
    std::vector<double> a(Extent(l.batch, l.m * l.k, d.a_batch_stride));
    std::vector<double> b(Extent(l.batch, l.k * l.n, d.b_batch_stride));
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<double>(i % 13);
    for (size_t i = 0; i < b.size(); ++i) b[i] = 7.0 - (i % 11);
    const size_t out_size = Extent(l.batch, l.m * l.n, d.out_batch_stride);
    // Sentinels: a gemm that ignores beta = 0 or writes a gap shows.
    std::vector<double> want(out_size, -1e9), got(out_size, -1e9);
    NaiveMatMul(d, a.data(), b.data(), want.data());
    for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kFloat16,
                        DType::kBFloat16}) {
      for (bool tf32 : {false, true}) {
        absl::StatusOr<GemmParams> p = PlanGemm(d, dtype, tf32, "cuda:0");
        ASSERT_TRUE(p.ok()) << p.status();
        std::fill(got.begin(), got.end(), -1e9);
        ASSERT_TRUE(RunGemm(*p, a, b, got)) << "cuBLAS would reject it";
        ASSERT_EQ(got, want) << DTypeName(dtype) << " tf32 " << tf32;
      }
    }
  }
}

TEST(GemmParamsTest, RowMajorAsColumnMajorArguments) {
  MatMulDims d;
  d.batch = 3;
  d.m = 4;
  d.n = 5;
  d.k = 6;
  d.a_batch_stride = 24;
  d.b_batch_stride = 0;
  d.out_batch_stride = 20;
  absl::StatusOr<GemmParams> p = PlanGemm(d, DType::kFloat32, false, "cuda:0");
  ASSERT_TRUE(p.ok());
  // C^T = B^T A^T: swapped sizes and operands, no transposes.
  EXPECT_EQ(p->trans_a, GemmOp::kNoTranspose);
  EXPECT_EQ(p->trans_b, GemmOp::kNoTranspose);
  EXPECT_EQ(p->m, 5);
  EXPECT_EQ(p->n, 4);
  EXPECT_EQ(p->k, 6);
  EXPECT_EQ(p->a_is, GemmOperand::kB);
  EXPECT_EQ(p->lda, 5);
  EXPECT_EQ(p->stride_a, 0);
  EXPECT_EQ(p->b_is, GemmOperand::kA);
  EXPECT_EQ(p->ldb, 6);
  EXPECT_EQ(p->stride_b, 24);
  EXPECT_EQ(p->ldc, 5);
  EXPECT_EQ(p->stride_c, 20);
  EXPECT_EQ(p->batch_count, 3);
  EXPECT_EQ(p->alpha, 1);
  EXPECT_EQ(p->beta, 0);
  // k = 0 still gets leading dimensions cuBLAS accepts.
  d.k = 0;
  EXPECT_EQ(PlanGemm(d, DType::kFloat32, false, "cuda:0")->ldb, 1);
}

TEST(GemmParamsTest, TheReferenceCatchesAWrongPlan) {
  // The proof above has teeth: operands not swapped, or transposes that
  // cuBLAS accepts, give a different product (or read outside the operands)
  // on a non-square layout.
  const Layout l{2, 3, 5, 4, false, false};
  const MatMulDims d = DimsOf(l);
  std::vector<double> a(Extent(l.batch, l.m * l.k, d.a_batch_stride));
  std::vector<double> b(Extent(l.batch, l.k * l.n, d.b_batch_stride));
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<double>(i % 13);
  for (size_t i = 0; i < b.size(); ++i) b[i] = 7.0 - (i % 11);
  std::vector<double> want(Extent(l.batch, l.m * l.n, d.out_batch_stride));
  NaiveMatMul(d, a.data(), b.data(), want.data());
  const GemmParams good = *PlanGemm(d, DType::kFloat64, false, "cuda:0");
  std::vector<double> got(want.size());
  ASSERT_TRUE(RunGemm(good, a, b, got));
  EXPECT_EQ(got, want);

  GemmParams unswapped = good;  // A first, as a column-major library wants
  std::swap(unswapped.a_is, unswapped.b_is);
  std::swap(unswapped.stride_a, unswapped.stride_b);
  std::swap(unswapped.m, unswapped.n);
  unswapped.lda = static_cast<int>(l.k);
  unswapped.ldb = static_cast<int>(l.n);
  unswapped.ldc = static_cast<int>(l.m);
  EXPECT_FALSE(RunGemm(unswapped, a, b, got) && got == want);

  GemmParams transposed = good;
  transposed.trans_a = GemmOp::kTranspose;
  transposed.trans_b = GemmOp::kTranspose;
  transposed.lda = static_cast<int>(l.k);
  transposed.ldb = static_cast<int>(l.m);
  ASSERT_TRUE(RunGemm(transposed, a, b, got));
  EXPECT_NE(got, want);
}

TEST(GemmParamsTest, TypesAndComputeTypePerDType) {
  const MatMulDims d{.batch = 1, .m = 2, .n = 2, .k = 2};
  struct Case {
    DType dtype;
    bool tf32;
    GemmDataType type;
    GemmComputeType compute;
    GemmScalarType scalar;
  };
  const std::vector<Case> cases = {
      {DType::kFloat32, false, GemmDataType::kF32, GemmComputeType::k32F,
       GemmScalarType::kFloat},
      {DType::kFloat32, true, GemmDataType::kF32, GemmComputeType::k32FFastTF32,
       GemmScalarType::kFloat},
      {DType::kFloat64, false, GemmDataType::kF64, GemmComputeType::k64F,
       GemmScalarType::kDouble},
      {DType::kFloat64, true, GemmDataType::kF64, GemmComputeType::k64F,
       GemmScalarType::kDouble},
      {DType::kFloat16, false, GemmDataType::kF16, GemmComputeType::k32F,
       GemmScalarType::kFloat},
      {DType::kFloat16, true, GemmDataType::kF16, GemmComputeType::k32F,
       GemmScalarType::kFloat},
      {DType::kBFloat16, false, GemmDataType::kBF16, GemmComputeType::k32F,
       GemmScalarType::kFloat},
      {DType::kBFloat16, true, GemmDataType::kBF16, GemmComputeType::k32F,
       GemmScalarType::kFloat},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(DTypeName(c.dtype)) + (c.tf32 ? " tf32" : ""));
    absl::StatusOr<GemmParams> p = PlanGemm(d, c.dtype, c.tf32, "cuda:0");
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->data_type, c.type);
    EXPECT_EQ(p->compute_type, c.compute);
    EXPECT_EQ(p->scalar_type, c.scalar);
  }
  EXPECT_EQ(MathModeFor(false), BlasMathMode::kDefault);
  EXPECT_EQ(MathModeFor(true), BlasMathMode::kTf32TensorOp);
}

TEST(GemmParamsTest, Errors) {
  const MatMulDims d{.batch = 1, .m = 2, .n = 2, .k = 2};
  for (DType dtype : {DType::kInt32, DType::kInt64, DType::kBool}) {
    const absl::Status st = PlanGemm(d, dtype, false, "cuda:5").status();
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(Message(st), NotImplemented("matmul", dtype, "cuda:5"));
  }
  const int64_t big = int64_t{INT_MAX} + 1;
  MatMulDims wide = d;
  wide.n = big;
  const absl::Status st = PlanGemm(wide, DType::kFloat32, false, "x").status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(st),
            "matmul dimensions (2x2 and 2x2147483648, batch 1) exceed the "
            "cuBLAS index range");
  for (int64_t MatMulDims::*field :
       {&MatMulDims::batch, &MatMulDims::m, &MatMulDims::k}) {
    MatMulDims over = d;
    over.*field = big;
    EXPECT_EQ(PlanGemm(over, DType::kFloat64, false, "x").status().code(),
              absl::StatusCode::kInvalidArgument);
    over.*field = INT_MAX;  // the largest that fits
    EXPECT_TRUE(PlanGemm(over, DType::kFloat64, false, "x").ok());
  }
}

TEST(GemmParamsTest, MatMulPaths) {
  auto path = [](int64_t batch, int64_t m, int64_t n, int64_t k, DType t) {
    return ChooseMatMulPath({.batch = batch, .m = m, .n = n, .k = k}, t);
  };
  EXPECT_EQ(path(1, 2, 3, 4, DType::kFloat32), MatMulPath::kGemm);
  EXPECT_EQ(path(1, 2, 3, 4, DType::kBFloat16), MatMulPath::kGemm);
  EXPECT_EQ(path(1, 2, 3, 4, DType::kInt32), MatMulPath::kIntegerKernel);
  EXPECT_EQ(path(3, 1, 1, 1, DType::kInt64), MatMulPath::kIntegerKernel);
  // Empty sums: zeros, whatever the dtype.
  EXPECT_EQ(path(2, 5, 3, 0, DType::kFloat64), MatMulPath::kZeroFill);
  EXPECT_EQ(path(2, 5, 3, 0, DType::kInt32), MatMulPath::kZeroFill);
  // An empty output: nothing, even with k = 0.
  EXPECT_EQ(path(2, 0, 4, 3, DType::kFloat32), MatMulPath::kNothing);
  EXPECT_EQ(path(2, 4, 0, 0, DType::kFloat32), MatMulPath::kNothing);
  EXPECT_EQ(path(0, 4, 4, 4, DType::kInt32), MatMulPath::kNothing);
}

// --- cuDNN ------------------------------------------------------------------

// A window as the planner fills it: the output sizes PyTorch's floor count
// gives (a ceil-mode caller adds one where it differs).
WindowDims CudnnWindow(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k,
                       int64_t s, int64_t p, int64_t d) {
  WindowDims win;
  win.n = n;
  win.c = c;
  win.h = h;
  win.w = w;
  win.kh = win.kw = k;
  win.sh = win.sw = s;
  win.ph = win.pw = p;
  win.dh = win.dw = d;
  win.oh = (h + 2 * p - d * (k - 1) - 1) / s + 1;
  win.ow = (w + 2 * p - d * (k - 1) - 1) / s + 1;
  return win;
}

// The kernel-selection rule: what cuDNN computes as PyTorch does, per
// dtype, compute capability and window class.
TEST(CudnnParamsTest, TheSelectionRule) {
  const WindowDims seed = CudnnWindow(64, 1, 28, 28, 5, 1, 2, 1);
  const Conv2dArgs conv{seed, 1, 6, ConvPass::kForward};
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kFloat16}) {
    EXPECT_TRUE(CudnnComputes(conv, dtype, 7)) << DTypeName(dtype);
  }
  EXPECT_FALSE(CudnnComputes(conv, DType::kBFloat16, 7));  // before Ampere
  EXPECT_TRUE(CudnnComputes(conv, DType::kBFloat16, 8));
  for (DType dtype : {DType::kInt32, DType::kInt64, DType::kBool}) {
    EXPECT_FALSE(CudnnComputes(conv, dtype, 9)) << DTypeName(dtype);
  }
  // Strides, padding, dilation and groups (depthwise) are all cuDNN's.
  EXPECT_TRUE(CudnnComputes(Conv2dArgs{CudnnWindow(2, 8, 17, 13, 3, 2, 2, 3), 4,
                                       12, ConvPass::kBackwardWeights},
                            DType::kFloat32, 8));
  EXPECT_TRUE(CudnnComputes(Conv2dArgs{CudnnWindow(1, 6, 7, 7, 3, 1, 1, 1), 6,
                                       6, ConvPass::kBackwardData},
                            DType::kFloat32, 8));
  // Empty tensors and cuDNN's int sizes: composed.
  EXPECT_FALSE(CudnnComputes(Conv2dArgs{CudnnWindow(0, 1, 28, 28, 5, 1, 2, 1),
                                        1, 6, ConvPass::kForward},
                             DType::kFloat32, 8));
  EXPECT_FALSE(
      CudnnComputes(Conv2dArgs{CudnnWindow(1 << 16, 64, 32, 32, 3, 1, 1, 1), 1,
                               64, ConvPass::kForward},
                    DType::kFloat32, 8));  // 2^32 elements
  // Groups that do not divide the channels never reach a library.
  EXPECT_FALSE(CudnnComputes(Conv2dArgs{seed, 4, 6, ConvPass::kForward},
                             DType::kFloat32, 8));
  // An output size other than the convolution's own: not cuDNN's to size.
  WindowDims odd = seed;
  ++odd.oh;
  EXPECT_FALSE(CudnnComputes(Conv2dArgs{odd, 1, 6, ConvPass::kForward},
                             DType::kFloat32, 8));

  const WindowDims pool = CudnnWindow(64, 6, 24, 24, 2, 2, 0, 1);
  for (PoolAlgorithm a : {PoolAlgorithm::kMax, PoolAlgorithm::kAvgIncludePad,
                          PoolAlgorithm::kAvgExcludePad}) {
    for (PoolPass pass : {PoolPass::kForward, PoolPass::kBackward}) {
      // Max pooling's backward: composed (NaN windows, tied maxima).
      const bool want = a != PoolAlgorithm::kMax || pass == PoolPass::kForward;
      for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kFloat64}) {
        EXPECT_EQ(CudnnComputes(Pool2dArgs{pool, a, pass}, dtype, 8), want)
            << DTypeName(dtype) << " algorithm " << static_cast<int>(a)
            << " pass " << static_cast<int>(pass);
      }
      EXPECT_FALSE(
          CudnnComputes(Pool2dArgs{pool, a, pass}, DType::kBFloat16, 9));
    }
  }
  // Padding inside the window; dilation (cuDNN's pooling has none) and a
  // ceil-mode window past the floor count (cuDNN sizes its output itself)
  // stay composed.
  EXPECT_TRUE(CudnnComputes(Pool2dArgs{CudnnWindow(1, 4, 9, 9, 3, 2, 1, 1),
                                       PoolAlgorithm::kMax, PoolPass::kForward},
                            DType::kFloat32, 8));
  EXPECT_FALSE(
      CudnnComputes(Pool2dArgs{CudnnWindow(1, 1, 9, 9, 2, 1, 0, 2),
                               PoolAlgorithm::kMax, PoolPass::kForward},
                    DType::kFloat32, 8));
  WindowDims ceil = CudnnWindow(1, 2, 7, 7, 2, 2, 0, 1);
  ceil.oh = ceil.ow = 4;
  EXPECT_FALSE(
      CudnnComputes(Pool2dArgs{ceil, PoolAlgorithm::kMax, PoolPass::kForward},
                    DType::kFloat32, 8));
  // Kernels that are not a library's: never.
  EXPECT_FALSE(CudnnComputes(BinaryArgs{BinaryOp::kAdd}, DType::kFloat32, 9));
}

TEST(CudnnParamsTest, ConvolutionDescriptors) {
  const WindowDims win = CudnnWindow(2, 8, 17, 13, 3, 2, 1, 2);
  const Conv2dArgs args{win, 4, 12, ConvPass::kBackwardData};
  absl::StatusOr<CudnnConvParams> p =
      PlanCudnnConv(args, DType::kFloat32, /*allow_tf32=*/false);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->pass, ConvPass::kBackwardData);
  EXPECT_EQ(std::vector<int>({p->x.n, p->x.c, p->x.h, p->x.w}),
            std::vector<int>({2, 8, 17, 13}));
  EXPECT_EQ(std::vector<int>({p->y.n, p->y.c, p->y.h, p->y.w}),
            std::vector<int>(
                {2, 12, static_cast<int>(win.oh), static_cast<int>(win.ow)}));
  // The filter as PyTorch's weight: [out, in / groups, kh, kw].
  EXPECT_EQ(std::vector<int>({p->w.n, p->w.c, p->w.h, p->w.w}),
            std::vector<int>({12, 2, 3, 3}));
  EXPECT_EQ(std::vector<int>({p->pad_h, p->pad_w, p->stride_h, p->stride_w,
                              p->dilation_h, p->dilation_w, p->groups}),
            std::vector<int>({1, 1, 2, 2, 2, 2, 4}));
  // float32: exact (FMA) unless TF32 is allowed, as PyTorch's
  // cudnn.allow_tf32; float32 compute.
  EXPECT_EQ(p->data, CudnnDataType::kFloat);
  EXPECT_EQ(p->compute, CudnnDataType::kFloat);
  EXPECT_EQ(p->math, CudnnMath::kFma);
  EXPECT_FALSE(p->double_scalars);
  EXPECT_EQ(PlanCudnnConv(args, DType::kFloat32, true)->math,
            CudnnMath::kDefault);
  // Depthwise stays exact (PyTorch's own float32 kernel), TF32 or not.
  const Conv2dArgs depthwise{CudnnWindow(1, 6, 7, 7, 3, 1, 1, 1), 6, 12,
                             ConvPass::kForward};
  EXPECT_EQ(PlanCudnnConv(depthwise, DType::kFloat32, true)->math,
            CudnnMath::kFma);
  // The half types: float32 accumulation on tensor cores.
  for (DType half : {DType::kFloat16, DType::kBFloat16}) {
    absl::StatusOr<CudnnConvParams> h = PlanCudnnConv(args, half, false);
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(h->data, half == DType::kFloat16 ? CudnnDataType::kHalf
                                               : CudnnDataType::kBFloat16);
    EXPECT_EQ(h->compute, CudnnDataType::kFloat);
    EXPECT_EQ(h->math, CudnnMath::kTensorOp);
  }
  // float64: double compute and double scalars.
  absl::StatusOr<CudnnConvParams> d =
      PlanCudnnConv(args, DType::kFloat64, true);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->compute, CudnnDataType::kDouble);
  EXPECT_TRUE(d->double_scalars);
  // The bias: added by the forward only (cudnnAddTensor after it).
  EXPECT_FALSE(p->bias);
  Conv2dArgs biased = args;
  biased.bias = true;
  EXPECT_FALSE(PlanCudnnConv(biased, DType::kFloat32, false)->bias);
  biased.pass = ConvPass::kForward;
  EXPECT_TRUE(PlanCudnnConv(biased, DType::kFloat32, false)->bias);
  // What cuDNN cannot take, named.
  absl::StatusOr<CudnnConvParams> bad =
      PlanCudnnConv(args, DType::kInt64, false);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("conv2d of int64 input [2, 8, 17, 13]"));
}

TEST(CudnnParamsTest, PoolingDescriptorsAndWorkspace) {
  const WindowDims win = CudnnWindow(3, 5, 9, 8, 3, 2, 1, 1);
  absl::StatusOr<CudnnPoolParams> fwd = PlanCudnnPool(
      Pool2dArgs{win, PoolAlgorithm::kAvgExcludePad, PoolPass::kForward},
      DType::kFloat16);
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  EXPECT_EQ(fwd->mode, CudnnPoolMode::kAverageExcludePadding);
  EXPECT_EQ(fwd->data, CudnnDataType::kHalf);
  EXPECT_EQ(std::vector<int>({fwd->window_h, fwd->window_w, fwd->pad_h,
                              fwd->pad_w, fwd->stride_h, fwd->stride_w}),
            std::vector<int>({3, 3, 1, 1, 2, 2}));
  EXPECT_EQ(std::vector<int>({fwd->y.n, fwd->y.c, fwd->y.h, fwd->y.w}),
            std::vector<int>({3, 5, 5, 4}));
  EXPECT_EQ(fwd->workspace_bytes, 0u);  // the forward needs none
  // Max pooling's backward is not cuDNN's (CudnnComputes); average
  // pooling's needs x's stand-in: x's bytes.
  absl::StatusOr<CudnnPoolParams> max_back =
      PlanCudnnPool(Pool2dArgs{win, PoolAlgorithm::kMax, PoolPass::kBackward},
                    DType::kFloat64);
  EXPECT_EQ(max_back.status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<CudnnPoolParams> max_fwd =
      PlanCudnnPool(Pool2dArgs{win, PoolAlgorithm::kMax, PoolPass::kForward},
                    DType::kFloat64);
  ASSERT_TRUE(max_fwd.ok()) << max_fwd.status();
  EXPECT_EQ(max_fwd->mode, CudnnPoolMode::kMax);
  EXPECT_TRUE(max_fwd->double_scalars);
  absl::StatusOr<CudnnPoolParams> avg_back = PlanCudnnPool(
      Pool2dArgs{win, PoolAlgorithm::kAvgIncludePad, PoolPass::kBackward},
      DType::kFloat32);
  ASSERT_TRUE(avg_back.ok()) << avg_back.status();
  EXPECT_EQ(avg_back->mode, CudnnPoolMode::kAverageIncludePadding);
  EXPECT_EQ(avg_back->workspace_bytes, 4u * 3 * 5 * 9 * 8);
  WindowDims dilated = win;
  dilated.dh = 2;
  absl::StatusOr<CudnnPoolParams> bad = PlanCudnnPool(
      Pool2dArgs{dilated, PoolAlgorithm::kMax, PoolPass::kForward},
      DType::kFloat32);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("dilation 2x1"));
}

}  // namespace
}  // namespace tensord::core::cuda
