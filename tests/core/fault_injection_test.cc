// Fault injection (issue 11, item 6): a FaultyDevice hosted next to the CPU
// as "cuda:7" fails allocations, copies and kernels on the n-th call. Every
// op family (through Run and in the middle of an Execute list) and every
// transfer path (CreateFromData, streamed uploads, To in both directions,
// readers, shared memory) must then fail with the device's code and a
// message naming the injected cause, leave every device's held bytes and
// live tensors, the session's tensors and the device's own live buffers as
// they were, and work again on the next call.
//
// Most tests sweep: they fail the 1st, 2nd, ... call of a site that the call
// under test makes, one run each, until a run makes fewer calls than that
// and succeeds, so every step of every path fails once.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/absl_compat.h"
#include "core/cpu/cpu_device.h"
#include "core/base/half.h"
#include "core/runtime/runtime.h"
#include "core/runtime/shared_memory.h"
#include "core/base/status.h"
#include "tests/core/device_test_access.h"
#include "tests/core/faulty_device.h"

namespace tensord::core {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr std::string_view kFaulty = "cuda:7";
// More calls of one site than any call under test makes.
constexpr uint64_t kMaxSweep = 64;

std::string Str(absl::string_view s) { return std::string(s); }
const std::string kMarker(kInjectedMarker);

// --- Inputs --------------------------------------------------------------

struct Input {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;
};

int64_t NumElements(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

template <typename T>
Input Sequence(DType dtype, std::vector<int64_t> dims, double start,
               double step) {
  std::vector<T> values(NumElements(dims));
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = static_cast<T>(start + step * static_cast<double>(i));
  }
  Input in{dtype, std::move(dims), {}};
  in.bytes.resize(values.size() * sizeof(T));
  // memcpy of an empty range may get null pointers (UBSan).
  if (!values.empty()) {
    std::memcpy(in.bytes.data(), values.data(), in.bytes.size());
  }
  return in;
}

Input F32(std::vector<int64_t> dims, double start = -2.5, double step = 0.75) {
  return Sequence<float>(DType::kFloat32, std::move(dims), start, step);
}
Input F64(std::vector<int64_t> dims, double start = 0.25, double step = 1.5) {
  return Sequence<double>(DType::kFloat64, std::move(dims), start, step);
}
Input I32(std::vector<int64_t> dims, double start = -3, double step = 1) {
  return Sequence<int32_t>(DType::kInt32, std::move(dims), start, step);
}
// F32's values rounded to bfloat16.
Input BF16(std::vector<int64_t> dims, double start = -2.5, double step = 0.75) {
  const Input f = F32(std::move(dims), start, step);
  Input h{DType::kBFloat16, f.dims, {}};
  for (size_t i = 0; i < f.bytes.size(); i += 4) {
    float v;
    std::memcpy(&v, &f.bytes[i], 4);
    const uint16_t bits = FloatToBFloat16Bits(v);
    h.bytes.push_back(static_cast<uint8_t>(bits & 0xff));
    h.bytes.push_back(static_cast<uint8_t>(bits >> 8));
  }
  return h;
}

// A float32 tensor of `bytes` bytes whose bytes all differ from their
// neighbours', for the multi-piece (bounce buffer) paths.
Input Large(uint64_t bytes) {
  Input in{DType::kFloat32, {static_cast<int64_t>(bytes / 4)}, {}};
  in.bytes.resize(bytes);
  for (uint64_t i = 0; i < bytes; ++i) {
    in.bytes[i] = static_cast<uint8_t>(i * 131 + i / 4093);
  }
  return in;
}

// --- Fixture -------------------------------------------------------------

// A Runtime with its CPU device and a FaultyDevice over a CPU as "cuda:7",
// and one session.
class FaultInjectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto device = FaultyDevice::OverCpu();
    faulty_ = device.get();
    RuntimeOptions options;
    options.host_memory_budget = 256 * kMiB;
    options.accelerator_memory_budget = 256 * kMiB;
    // The faulty device composes every op from tensord's kernels (it keeps
    // Device::Select's default), and "cpu", the reference its results are
    // compared with bit for bit, must compute the same way.
    options.kernel_libraries = false;
    options.extra_devices.push_back(std::move(device));
    auto rt = Runtime::Create(std::move(options));
    ASSERT_TRUE(rt.ok()) << rt.status();
    rt_ = std::move(*rt);
    auto session = rt_->OpenSession("faults");
    ASSERT_TRUE(session.ok()) << session.status();
    session_ = *session;
  }

  // Whatever failed, closing the session gives every byte back.
  void TearDown() override {
    if (rt_ == nullptr) return;
    faulty_->DisarmAll();
    RecordProperty("injected_faults",
                   static_cast<int>(faulty_->injected_total()));
    ASSERT_TRUE(rt_->CloseSession(session_).ok());
    for (const DeviceStatus& d : rt_->ListDevices()) {
      EXPECT_EQ(d.held_bytes, 0u) << d.name;
      EXPECT_EQ(d.live_tensors, 0u) << d.name;
    }
    EXPECT_EQ(faulty_->live_buffers(), 0u);
  }

  uint64_t Create(const Input& in, std::string_view device = kFaulty) {
    auto meta = rt_->CreateFromData(session_, device, in.dtype, in.dims,
                                    in.bytes, "input");
    EXPECT_TRUE(meta.ok()) << meta.status();
    return meta.ok() ? meta->handle : 0;
  }

  // All bytes of a tensor (call with no fault armed on CopyToHost).
  std::vector<uint8_t> ReadAll(uint64_t handle) {
    auto reader = rt_->OpenReader(session_, handle);
    EXPECT_TRUE(reader.ok()) << reader.status();
    if (!reader.ok()) return {};
    std::vector<uint8_t> out((*reader)->meta().nbytes);
    const absl::Status read = (*reader)->Read(0, out);
    EXPECT_TRUE(read.ok()) << read;
    return out;
  }

  std::vector<uint64_t> Handles() const {
    std::vector<uint64_t> out;
    auto tensors = rt_->ListTensors(session_);
    EXPECT_TRUE(tensors.ok()) << tensors.status();
    if (!tensors.ok()) return out;
    for (const TensorMeta& t : *tensors) out.push_back(t.handle);
    std::sort(out.begin(), out.end());
    return out;
  }

  // Releases the session's tensors that are not in `kept`.
  void ReleaseAllBut(const std::vector<uint64_t>& kept) {
    for (uint64_t h : Handles()) {
      if (std::find(kept.begin(), kept.end(), h) == kept.end()) {
        EXPECT_TRUE(rt_->Release(session_, h).ok());
      }
    }
  }

  // Everything a failed call must leave as it was, in one string (so that a
  // difference shows as a readable diff).
  std::string Accounting() const {
    std::string out;
    for (const DeviceStatus& d : rt_->ListDevices()) {
      absl::StrAppend(&out, d.name, " holds ", d.held_bytes, " B in ",
                      d.live_tensors, " tensors; ");
    }
    absl::StrAppend(&out, "session handles [", absl::StrJoin(Handles(), ","),
                    "]");
    for (const SessionInfo& s : rt_->ListSessions()) {
      absl::StrAppend(&out, " (", s.tensors, " tensors, ", s.bytes, " B)");
    }
    absl::StrAppend(&out, "; ", faulty_->name(), " itself holds ",
                    faulty_->live_buffers(), " buffers of ",
                    faulty_->live_bytes(), " B");
    return out;
  }

  uint64_t AllocationFailures() const {
    for (const DeviceStatus& d : rt_->ListDevices()) {
      if (d.name == kFaulty) return d.allocation_failures;
    }
    ADD_FAILURE() << "no device " << kFaulty;
    return 0;
  }

  // Runs `call` with its 1st, 2nd, ... call of `site` failing, one run each,
  // until a run makes fewer calls of the site and succeeds. Each failing run
  // must return the device's status (RESOURCE_EXHAUSTED for an allocation,
  // INTERNAL otherwise) naming the injected fault and the call, and leave
  // Accounting() as it was; an allocation failure counts in the device's
  // allocation_failures. `after_failure`, if given, checks more after each
  // failing run. With `late`, each failing call does its work before it
  // reports the failure (Fault::after_forwarding). Tensors the successful
  // run made are released. Returns the failing runs' statuses, in order.
  std::vector<absl::Status> Sweep(
      FaultSite site, const std::function<absl::Status()>& call,
      const std::function<void(const absl::Status&)>& after_failure = nullptr,
      bool late = false, uint64_t max_calls = kMaxSweep) {
    const absl::StatusCode code = site == FaultSite::kAllocate
                                      ? absl::StatusCode::kResourceExhausted
                                      : absl::StatusCode::kInternal;
    std::vector<absl::Status> failures;
    for (uint64_t n = 1; n <= max_calls; ++n) {
      SCOPED_TRACE(absl::StrCat("fault in ", ToAbsl(FaultSiteName(site)),
                                " call ", n, " of the call under test"));
      const std::vector<uint64_t> handles = Handles();
      const std::string before = Accounting();
      const uint64_t allocation_failures = AllocationFailures();
      const uint64_t injected = faulty_->injected(site);
      const uint64_t failing_call = faulty_->calls(site) + n;
      Fault fault;
      fault.nth = n;
      fault.after_forwarding = late;
      faulty_->Arm(site, fault);
      const absl::Status status = call();
      faulty_->Disarm(site);
      if (faulty_->injected(site) == injected) {
        // Fewer than n calls: the run had no fault.
        EXPECT_TRUE(status.ok()) << status;
        ReleaseAllBut(handles);
        return failures;
      }
      if (status.ok()) {
        ADD_FAILURE() << "the injected fault was swallowed: the call succeeded";
        ReleaseAllBut(handles);
        return failures;
      }
      EXPECT_EQ(status.code(), code) << status;
      EXPECT_THAT(Str(status.message()), HasSubstr(kMarker));
      EXPECT_THAT(Str(status.message()),
                  HasSubstr(FaultCallLabel(site, failing_call)));
      EXPECT_EQ(Accounting(), before);
      EXPECT_EQ(AllocationFailures(),
                allocation_failures + (site == FaultSite::kAllocate ? 1 : 0));
      if (after_failure) after_failure(status);
      failures.push_back(status);
    }
    ADD_FAILURE() << "the call made more than " << max_calls << " calls of "
                  << FaultSiteName(site);
    return failures;
  }

  std::unique_ptr<Runtime> rt_;
  FaultyDevice* faulty_ = nullptr;  // borrowed: rt_ owns it
  std::string session_;
};

// --- The FaultyDevice itself ---------------------------------------------

TEST(FaultyDeviceTest, ForwardsEveryCallAndCountsIt) {
  auto device = FaultyDevice::OverCpu();
  EXPECT_EQ(device->name(), "cuda:7");
  EXPECT_EQ(device->kind(), DeviceKind::kCuda);
  EXPECT_EQ(device->index(), 7);
  const DeviceProperties p = device->Properties();
  EXPECT_THAT(p.model, StartsWith("FaultyDevice over "));
  EXPECT_EQ(p.total_memory, uint64_t{1} << 30);
  EXPECT_EQ(p.free_memory, p.total_memory);
  {
    auto a = DeviceTestAccess::Allocate(*device, 16);
    auto b = DeviceTestAccess::Allocate(*device, 16);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(device->live_buffers(), 2u);
    EXPECT_EQ(device->live_bytes(), 32u);
    EXPECT_EQ(device->Properties().free_memory, p.total_memory - 32);
    const float in[4] = {1, 2, 3, 4};
    ASSERT_TRUE(device->CopyFromHost(in, **a, 0, sizeof(in)).ok());
    ASSERT_TRUE(device->CopyFromDevice(*device, **a, **b, sizeof(in)).ok());
    const int64_t dims[] = {4};
    const TensorRef ref{b->get(), DType::kFloat32, *Shape::Make(dims)};
    ASSERT_TRUE(device->Launch({UnaryArgs{UnaryOp::kNeg}, {ref}, ref}).ok());
    float out[4] = {};
    ASSERT_TRUE(device->CopyToHost(**b, 0, out, sizeof(out)).ok());
    EXPECT_EQ(out[3], -4.0f);
    EXPECT_TRUE(device->Synchronize().ok());
  }
  EXPECT_EQ(device->live_buffers(), 0u);
  EXPECT_EQ(device->live_bytes(), 0u);
  EXPECT_EQ(device->calls(FaultSite::kAllocate), 2u);
  EXPECT_EQ(device->calls(FaultSite::kCopyFromHost), 1u);
  // A copy within the device is one CopyFromDevice, no CopyToHost.
  EXPECT_EQ(device->calls(FaultSite::kCopyFromDevice), 1u);
  EXPECT_EQ(device->calls(FaultSite::kCopyToHost), 1u);
  EXPECT_EQ(device->calls(FaultSite::kUnary), 1u);
  EXPECT_EQ(device->calls(FaultSite::kAnyKernel), 1u);
  EXPECT_EQ(device->calls(FaultSite::kSynchronize), 1u);
  EXPECT_EQ(device->injected_total(), 0u);
}

TEST(FaultyDeviceTest, FailsTheNthCallOnce) {
  auto device = FaultyDevice::OverCpu();
  auto buffer = DeviceTestAccess::Allocate(*device, 4);
  ASSERT_TRUE(buffer.ok());
  float x = 0;
  ASSERT_TRUE(device->CopyToHost(**buffer, 0, &x, 4).ok());  // call #1
  device->FailNth(FaultSite::kCopyToHost, 2);
  EXPECT_TRUE(device->CopyToHost(**buffer, 0, &x, 4).ok());  // #2
  const absl::Status failed = device->CopyToHost(**buffer, 0, &x, 4);
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(Str(failed.message()),
            "cuda:7: FaultyDevice: injected failure of CopyToHost call #3 "
            "(4 bytes at offset 0)");
  EXPECT_TRUE(device->CopyToHost(**buffer, 0, &x, 4).ok());  // spent
  EXPECT_EQ(device->injected(FaultSite::kCopyToHost), 1u);
  EXPECT_EQ(device->injected_total(), 1u);
  EXPECT_EQ(device->calls(FaultSite::kCopyToHost), 4u);
}

TEST(FaultyDeviceTest, StickyFaultFailsEveryCallUntilDisarmed) {
  auto device = FaultyDevice::OverCpu();
  Fault fault;
  fault.nth = 2;
  fault.sticky = true;
  device->Arm(FaultSite::kAllocate, fault);
  auto first = DeviceTestAccess::Allocate(*device, 8);
  EXPECT_TRUE(first.ok());
  for (int i = 2; i <= 4; ++i) {
    auto failed = DeviceTestAccess::Allocate(*device, 8);
    ASSERT_FALSE(failed.ok());
    EXPECT_EQ(failed.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(Str(failed.status().message()),
              absl::StrCat("cuda:7: FaultyDevice: injected out of memory on "
                           "allocation #",
                           i, " (8 bytes)"));
  }
  EXPECT_EQ(device->live_buffers(), 1u);
  device->Disarm(FaultSite::kAllocate);
  EXPECT_TRUE(DeviceTestAccess::Allocate(*device, 8).ok());
  EXPECT_EQ(device->injected(FaultSite::kAllocate), 3u);
}

TEST(FaultyDeviceTest, KernelsCountUnderTheirOwnSiteAndAnyKernel) {
  auto device = FaultyDevice::OverCpu();
  auto a = DeviceTestAccess::Allocate(*device, 16);
  auto b = DeviceTestAccess::Allocate(*device, 16);
  ASSERT_TRUE(a.ok() && b.ok());
  const int64_t dims[] = {4};
  const Shape shape = *Shape::Make(dims);
  const TensorRef f32{a->get(), DType::kFloat32, shape};
  const TensorRef i32{b->get(), DType::kInt32, shape};
  device->FailNth(FaultSite::kAnyKernel, 2);
  ASSERT_TRUE(device->Launch({FillSpec{}, {}, f32}).ok());
  const absl::Status failed = device->Launch({CastArgs{}, {f32}, i32});
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(Str(failed.message()),
            "cuda:7: FaultyDevice: injected failure of kernel Cast (Cast "
            "call #1, kernel call #2)");
  EXPECT_EQ(device->injected(FaultSite::kCast), 1u);
  EXPECT_EQ(device->injected(FaultSite::kAnyKernel), 1u);
  EXPECT_EQ(device->injected(FaultSite::kFill), 0u);

  // A kernel's message names its operation.
  device->FailNth(FaultSite::kBinary, 1);
  const absl::Status binary =
      device->Launch({BinaryArgs{BinaryOp::kMul}, {f32, f32}, f32});
  EXPECT_THAT(Str(binary.message()),
              HasSubstr("kernel Binary (mul; Binary call #1, kernel call #3)"));
}

TEST(FaultyDeviceTest, AfterForwardingDoesTheWorkThenFails) {
  auto device = FaultyDevice::OverCpu();
  auto buffer = DeviceTestAccess::Allocate(*device, 4);
  ASSERT_TRUE(buffer.ok());
  Fault late;
  late.after_forwarding = true;
  late.code = absl::StatusCode::kUnavailable;
  device->Arm(FaultSite::kCopyFromHost, late);
  const float in = 42;
  const absl::Status failed = device->CopyFromHost(&in, **buffer, 0, 4);
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable);
  float out = 0;
  ASSERT_TRUE(device->CopyToHost(**buffer, 0, &out, 4).ok());
  EXPECT_EQ(out, 42.0f);  // the copy happened

  // A late allocation failure frees what it allocated.
  late.code = absl::StatusCode::kOk;  // the site's default
  device->Arm(FaultSite::kAllocate, late);
  auto failed_allocation = DeviceTestAccess::Allocate(*device, 1024);
  EXPECT_EQ(failed_allocation.status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(device->live_buffers(), 1u);
  EXPECT_EQ(device->live_bytes(), 4u);
}

TEST(FaultyDeviceTest, SynchronizeFailsOnDemandWithTheCodeAsked) {
  auto device = FaultyDevice::OverCpu();
  device->FailNth(FaultSite::kSynchronize, 1);
  absl::Status failed = device->Synchronize();
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(Str(failed.message()),
            "cuda:7: FaultyDevice: injected failure of Synchronize call #1");
  EXPECT_TRUE(device->Synchronize().ok());
  Fault unavailable;
  unavailable.code = absl::StatusCode::kUnavailable;
  device->Arm(FaultSite::kSynchronize, unavailable);
  EXPECT_EQ(device->Synchronize().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(device->injected(FaultSite::kSynchronize), 2u);
}

TEST(FaultyDeviceTest, ConcurrentCallsFailExactlyOnce) {
  auto device = FaultyDevice::OverCpu();
  constexpr int kThreads = 4, kCalls = 500;
  device->FailNth(FaultSite::kAllocate, 777);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kCalls; ++i) {
        if (!DeviceTestAccess::Allocate(*device, 64).ok())
          failures.fetch_add(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 1);
  EXPECT_EQ(device->calls(FaultSite::kAllocate), uint64_t{kThreads * kCalls});
  EXPECT_EQ(device->injected(FaultSite::kAllocate), 1u);
  EXPECT_EQ(device->live_buffers(), 0u);
}

TEST(FaultyDeviceTest, RuntimeHostsItNextToTheCpuOnce) {
  RuntimeOptions options;
  options.host_memory_budget = 64 * kMiB;
  options.extra_devices.push_back(FaultyDevice::OverCpu());
  auto rt = Runtime::Create(std::move(options));
  ASSERT_TRUE(rt.ok()) << rt.status();
  const std::vector<DeviceStatus> devices = (*rt)->ListDevices();
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[1].name, "cuda:7");
  EXPECT_EQ(devices[1].kind, DeviceKind::kCuda);
  EXPECT_THAT(devices[1].properties.model, StartsWith("FaultyDevice over "));
  // 1 GiB less the 256 MiB reserve.
  EXPECT_EQ(devices[1].budget_bytes, 768 * kMiB);
  auto found = (*rt)->FindDevice("cuda:7");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ((*found)->name(), "cuda:7");

  RuntimeOptions twice;
  twice.extra_devices.push_back(FaultyDevice::OverCpu());
  twice.extra_devices.push_back(FaultyDevice::OverCpu());
  auto rejected = Runtime::Create(std::move(twice));
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Str(rejected.status().message()),
              HasSubstr("device cuda:7 is configured twice"));
}

// --- Op families -----------------------------------------------------------

struct OpCase {
  std::string name;
  std::vector<Input> inputs;
  OpSpec op;  // operand i is Operand::Handle(i): the i-th input
  // Sites the op reaches besides Allocate and the kernels as a whole; each
  // must fail at least once.
  std::vector<FaultSite> sites;
};

void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

OpSpec WithHandles(OpSpec op, const std::vector<uint64_t>& handles) {
  for (Operand& operand : op.inputs) {
    if (!operand.is_result) operand.handle = handles[operand.handle];
  }
  return op;
}

std::vector<OpCase> OpCases() {
  using K = OpSpec::Kind;
  using S = FaultSite;
  const Operand x = Operand::Handle(0), y = Operand::Handle(1),
                z = Operand::Handle(2);
  auto op = [](K kind, std::vector<Operand> inputs) {
    OpSpec spec;
    spec.kind = kind;
    spec.inputs.assign(inputs.begin(), inputs.end());
    return spec;
  };
  std::vector<OpCase> cases;
  {
    OpCase c{"cast", {F32({2, 3})}, op(K::kCast, {x}), {S::kCast}};
    c.op.dtype = DType::kInt32;
    cases.push_back(c);
  }
  {
    // To its own dtype: a copy (CopyBlocks).
    OpCase c{
        "cast_same_dtype", {F32({2, 3})}, op(K::kCast, {x}), {S::kCopyBlocks}};
    c.op.dtype = DType::kFloat32;
    cases.push_back(c);
  }
  {
    // int32 promoted to float32 first (Cast), then Binary.
    OpCase c{"binary_promoting",
             {F32({2, 3}), I32({3})},
             op(K::kBinary, {x, y}),
             {S::kCast, S::kBinary}};
    c.op.binary = BinaryOp::kAdd;
    cases.push_back(c);
  }
  {
    // 0.5 - x for int32 x: the scalar goes to the device (CopyFromHost) as
    // float64 and is cast to float32; x is cast too.
    OpCase c{"binary_scalar",
             {I32({2, 3})},
             op(K::kBinary, {x}),
             {S::kCopyFromHost, S::kCast, S::kBinary}};
    c.op.binary = BinaryOp::kSub;
    c.op.scalar = Scalar::Float(0.5);
    c.op.scalar_first = true;
    cases.push_back(c);
  }
  {
    OpCase c{"comparison",
             {F32({2, 3}), F32({2, 3}, 1.0, -0.5)},
             op(K::kBinary, {x, y}),
             {S::kBinary}};
    c.op.binary = BinaryOp::kLt;
    cases.push_back(c);
  }
  {
    // Batch dims [2, 1] and [3] broadcast to [2, 3]: both operands are
    // expanded (ones by Fill, then Binary) before the MatMul.
    cases.push_back(OpCase{"matmul_broadcast",
                           {F32({2, 1, 2, 3}), F32({3, 3, 2}, 1.0, -0.25)},
                           op(K::kMatMul, {x, y}),
                           {S::kFill, S::kBinary, S::kMatMul}});
  }
  {
    // k == 0: the empty sums are zeros (Fill), no MatMul.
    cases.push_back(OpCase{"matmul_empty_k",
                           {F32({2, 0}), F32({0, 3})},
                           op(K::kMatMul, {x, y}),
                           {S::kFill}});
  }
  {
    // x @ w^T + b: Permute, MatMul, Binary.
    cases.push_back(OpCase{"linear",
                           {F32({2, 3}), F32({4, 3}, 0.5, 0.25), F32({4})},
                           op(K::kLinear, {x, y, z}),
                           {S::kPermute, S::kMatMul, S::kBinary}});
  }
  {
    // exp of int32: cast to float32 first.
    OpCase c{"unary", {I32({2, 3})}, op(K::kUnary, {x}), {S::kCast, S::kUnary}};
    c.op.unary = UnaryOp::kExp;
    cases.push_back(c);
  }
  {
    // An integer sum is int64: cast first.
    OpCase c{"reduce_sum",
             {I32({2, 3})},
             op(K::kReduce, {x}),
             {S::kCast, S::kReduce}};
    c.op.reduce = ReduceOp::kSum;
    c.op.dim = 1;
    cases.push_back(c);
  }
  {
    OpCase c{
        "reduce_norm_all", {F32({2, 3})}, op(K::kReduce, {x}), {S::kReduce}};
    c.op.reduce = ReduceOp::kNorm;
    cases.push_back(c);
  }
  {
    OpCase c{
        "argmax", {F32({3, 4}, 1.0, -0.3)}, op(K::kReduce, {x}), {S::kReduce}};
    c.op.reduce = ReduceOp::kArgmax;
    c.op.dim = 0;
    c.op.keepdim = true;
    cases.push_back(c);
  }
  {
    OpCase c{"permute", {F32({2, 3, 4})}, op(K::kPermute, {x}), {S::kPermute}};
    c.op.dims = {2, 0, 1};
    cases.push_back(c);
  }
  {
    OpCase c{"transpose", {F32({2, 3})}, op(K::kTranspose, {x}), {S::kPermute}};
    c.op.dim = 0;
    c.op.dim1 = -1;
    cases.push_back(c);
  }
  {
    OpCase c{"reshape", {F32({2, 3})}, op(K::kReshape, {x}), {S::kCopyBlocks}};
    c.op.dims = {3, -1};
    cases.push_back(c);
  }
  {
    OpCase c{"narrow", {F32({4, 3})}, op(K::kNarrow, {x}), {S::kCopyBlocks}};
    c.op.dim = 0;
    c.op.start = 1;
    c.op.length = 2;
    cases.push_back(c);
  }
  {
    OpCase c{"select", {F32({4, 3})}, op(K::kSelect, {x}), {S::kCopyBlocks}};
    c.op.dim = 1;
    c.op.start = -1;
    cases.push_back(c);
  }
  {
    // float32 and int32: the int32 part is cast, then each part copied.
    OpCase c{"cat_promoting",
             {F32({2, 3}), I32({1, 3})},
             op(K::kCat, {x, y}),
             {S::kCast, S::kCopyBlocks}};
    c.op.dim = 0;
    cases.push_back(c);
  }
  {
    OpCase c{"silu", {F32({2, 3})}, op(K::kUnary, {x}), {S::kUnary}};
    c.op.unary = UnaryOp::kSilu;
    cases.push_back(c);
  }
  {
    // Dims 0 and 2 are apart: a sum reduces one run, then the other, the
    // first result freed.
    OpCase c{
        "sum_two_dims", {F32({2, 3, 4})}, op(K::kReduce, {x}), {S::kReduce}};
    c.op.reduce = ReduceOp::kSum;
    c.op.reduce_dims = {0, 2};
    cases.push_back(c);
  }
  {
    // A norm of dims apart: a permute, then one reduce.
    OpCase c{"norm_two_dims",
             {F32({2, 3, 4})},
             op(K::kReduce, {x}),
             {S::kPermute, S::kReduce}};
    c.op.reduce = ReduceOp::kNorm;
    c.op.reduce_dims = {0, 2};
    cases.push_back(c);
  }
  {
    // A composite: max, sub, exp, sum, log, sub, each a kernel that may
    // fail, each temporary freed.
    OpCase c{"log_softmax",
             {F32({3, 4}, 1.0, -0.3)},
             op(K::kSoftmax, {x}),
             {S::kReduce, S::kBinary, S::kUnary}};
    c.op.dim = 1;
    c.op.log = true;
    cases.push_back(c);
  }
  {
    // bfloat16: cast to float32 and back around the composite.
    OpCase c{"softmax_half",
             {BF16({2, 3}, 1.0, 0.5)},
             op(K::kSoftmax, {x}),
             {S::kCast, S::kReduce, S::kBinary, S::kUnary}};
    c.op.dim = 0;
    cases.push_back(c);
  }
  {
    // A tensor min (broadcast) and a number max: two binary kernels.
    OpCase c{"clamp",
             {F32({2, 3}, 1.0, -0.4), F32({3})},
             op(K::kClamp, {x, y}),
             {S::kBinary}};
    c.op.clamp_min.kind = OpSpec::Bound::Kind::kTensor;
    c.op.clamp_max = {OpSpec::Bound::Kind::kScalar, Scalar::Float(0.5)};
    cases.push_back(c);
  }
  {
    // A bool condition, a float32 input and an int32 other (cast first):
    // one kernel through Device::Launch.
    Input cond = I32({2, 3}, 0, 1);
    cond.dtype = DType::kBool;
    cond.bytes.clear();
    for (int k = 0; k < 6; ++k) cond.bytes.push_back(k % 2);
    OpCase c{"where",
             {cond, F32({2, 3}), I32({3})},
             op(K::kWhere, {x, y, z}),
             {S::kCast, S::kWhere}};
    c.op.where_input.kind = OpSpec::Bound::Kind::kTensor;
    c.op.where_other.kind = OpSpec::Bound::Kind::kTensor;
    cases.push_back(c);
  }
  {
    // Two images with a bias: im2col, the product, the permute to
    // [n, oc, oh, ow], the bias added.
    OpCase c{"conv2d",
             {F32({2, 3, 4, 4}), F32({2, 3, 3, 3}, 0.5, -0.1), F32({2})},
             op(K::kConv2d, {x, y, z}),
             {S::kIm2Col, S::kMatMul, S::kPermute, S::kBinary}};
    c.op.window.padding = {1};
    cases.push_back(c);
  }
  {
    OpCase c{"max_pool2d",
             {F32({2, 3, 4, 4})},
             op(K::kMaxPool2d, {x}),
             {S::kIm2Col, S::kReduce, S::kPermute}};
    c.op.window.kernel_size = {3};
    c.op.window.stride = {2};
    c.op.window.padding = {1};
    cases.push_back(c);
  }
  {
    // count_include_pad=False: the in-input counts from a plane of ones.
    OpCase c{"avg_pool2d",
             {F32({2, 3, 4, 4})},
             op(K::kAvgPool2d, {x}),
             {S::kIm2Col, S::kReduce, S::kFill, S::kBinary, S::kPermute}};
    c.op.window.kernel_size = {3};
    c.op.window.stride = {2};
    c.op.window.padding = {1};
    c.op.window.count_include_pad = false;
    cases.push_back(c);
  }
  {
    // log_softmax, the targets' range read back, the one-hot pick, the
    // mean over the counted rows.
    Input target = I32({3}, 0, 1);
    target.dtype = DType::kInt64;
    target.bytes.clear();
    for (int64_t k : {0, 2, 1}) {
      const auto* p = reinterpret_cast<const uint8_t*>(&k);
      target.bytes.insert(target.bytes.end(), p, p + 8);
    }
    OpCase c{"cross_entropy",
             {F32({3, 4}), target},
             op(K::kLoss, {x, y}),
             {S::kReduce, S::kBinary, S::kUnary, S::kWhere, S::kFill,
              S::kCast, S::kCopyToHost}};
    c.op.loss = LossKind::kCrossEntropy;
    cases.push_back(c);
  }
  return cases;
}

class OpFaultTest : public FaultInjectionTest,
                    public ::testing::WithParamInterface<OpCase> {
 protected:
  // The inputs of the case on `device`.
  std::vector<uint64_t> Inputs(std::string_view device) {
    std::vector<uint64_t> handles;
    for (const Input& in : GetParam().inputs) {
      handles.push_back(Create(in, device));
    }
    return handles;
  }

  // The op on the CPU device: what the device must compute.
  std::vector<uint8_t> Expected(TensorMeta* meta) {
    auto want = rt_->Run(session_, WithHandles(GetParam().op, Inputs("cpu")));
    EXPECT_TRUE(want.ok()) << want.status();
    if (!want.ok()) return {};
    *meta = *want;
    return ReadAll(want->handle);
  }

  std::vector<FaultSite> Sites() const {
    std::vector<FaultSite> sites = {FaultSite::kAllocate,
                                    FaultSite::kAnyKernel};
    for (FaultSite s : GetParam().sites) sites.push_back(s);
    return sites;
  }
};

TEST_P(OpFaultTest, RunFailsCleanlyAtEveryStepThenWorks) {
  const OpSpec op = WithHandles(GetParam().op, Inputs(kFaulty));
  auto run = [&] { return rt_->Run(session_, op).status(); };
  for (FaultSite site : Sites()) {
    EXPECT_FALSE(Sweep(site, run).empty())
        << "the op made no " << FaultSiteName(site) << " call to fail";
  }
  // Failures reported after the work was done (an asynchronous error that
  // surfaces late) keep nothing either.
  for (FaultSite site : {FaultSite::kAllocate, FaultSite::kAnyKernel}) {
    EXPECT_FALSE(Sweep(site, run, nullptr, /*late=*/true).empty())
        << FaultSiteName(site);
  }
  auto got = rt_->Run(session_, op);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->device, kFaulty);
  TensorMeta want;
  const std::vector<uint8_t> expected = Expected(&want);
  EXPECT_EQ(got->dtype, want.dtype);
  EXPECT_EQ(got->shape, want.shape);
  EXPECT_EQ(ReadAll(got->handle), expected);
}

// The op under test in the middle of a list: op #0 copies its first input
// (a same-dtype cast), op #1 is the op reading that copy, op #2 flattens its
// result; all three are kept. A fault in op #i fails the list with
// "op #i (<name>; operands: ...): <the device's message>" and keeps nothing.
TEST_P(OpFaultTest, ExecuteNamesTheFailingOpAndKeepsNothing) {
  const std::vector<uint64_t> inputs = Inputs(kFaulty);
  std::vector<OpSpec> ops(3);
  ops[0].kind = OpSpec::Kind::kCast;
  ops[0].dtype = GetParam().inputs[0].dtype;
  ops[0].inputs = {Operand::Handle(inputs[0])};
  ops[1] = WithHandles(GetParam().op, inputs);
  ops[1].inputs[0] = Operand::Result(0);
  ops[2].kind = OpSpec::Kind::kReshape;
  ops[2].dims = {-1};
  ops[2].inputs = {Operand::Result(1)};
  const uint32_t keep[] = {0, 1, 2};
  auto execute = [&] { return rt_->Execute(session_, ops, keep).status(); };

  for (FaultSite site : Sites()) {
    SCOPED_TRACE(FaultSiteName(site));
    // Calls of the site made by ops #0..#i, from the list's prefixes.
    std::vector<uint64_t> through;
    for (size_t i = 0; i < ops.size(); ++i) {
      const uint64_t before = faulty_->calls(site);
      auto prefix = rt_->Execute(session_, std::span(ops).first(i + 1), {});
      ASSERT_TRUE(prefix.ok()) << prefix.status();
      through.push_back(faulty_->calls(site) - before);
    }
    EXPECT_GT(through[1], through[0]) << "op #1 made no call to fail";
    const std::vector<absl::Status> failures = Sweep(site, execute);
    ASSERT_EQ(failures.size(), through.back());
    for (size_t n = 1; n <= failures.size(); ++n) {
      size_t i = 0;
      while (through[i] < n) ++i;
      std::string prefix =
          absl::StrCat("op #", i, " (", OpName(ops[i]), "; operands: ");
      if (i > 0) absl::StrAppend(&prefix, "result of op #", i - 1, " ");
      EXPECT_THAT(Str(failures[n - 1].message()), StartsWith(prefix))
          << "fault " << n;
    }
  }
  auto got = rt_->Execute(session_, ops, keep);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 3u);
  TensorMeta want;
  EXPECT_EQ(ReadAll((*got)[1].handle), Expected(&want));
  EXPECT_EQ((*got)[1].shape, want.shape);
}

INSTANTIATE_TEST_SUITE_P(Families, OpFaultTest, ::testing::ValuesIn(OpCases()),
                         [](const ::testing::TestParamInfo<OpCase>& info) {
                           return info.param.name;
                         });

// A training step's backward (conv2d, relu, max_pool2d, linear,
// cross_entropy; col2im, transposed products, the one-hot picks) fails
// cleanly at every allocation and kernel: nothing is kept and the leaves'
// grads stay as they were (None), since no grad is written until every one
// is computed. Then it gives the CPU device's grads.
TEST_F(FaultInjectionTest, BackwardFailsCleanlyAtEveryStepThenWorks) {
  using K = OpSpec::Kind;
  auto handles_on = [&](std::string_view device) {
    Input target = I32({2}, 0, 1);
    target.dtype = DType::kInt64;
    target.bytes.clear();
    for (int64_t k : {2, 0}) {
      const auto* p = reinterpret_cast<const uint8_t*>(&k);
      target.bytes.insert(target.bytes.end(), p, p + 8);
    }
    std::vector<uint64_t> h = {Create(F32({2, 1, 5, 5}), device),
                               Create(F32({2, 1, 3, 3}, 0.5, -0.1), device),
                               Create(F32({3, 8}, -0.4, 0.05), device),
                               Create(target, device)};
    for (uint64_t p : {h[1], h[2]}) {
      OpSpec on;
      on.kind = K::kRequiresGrad;
      on.inputs = {Operand::Handle(p)};
      EXPECT_TRUE(rt_->Run(session_, on).ok());
    }
    return h;
  };
  auto step = [](const std::vector<uint64_t>& h) {
    auto op = [](K kind, std::vector<Operand> in) {
      OpSpec s;
      s.kind = kind;
      s.inputs.assign(in.begin(), in.end());
      return s;
    };
    using O = Operand;
    std::vector<OpSpec> ops;
    ops.push_back(op(K::kZeroGrad, {O::Handle(h[1]), O::Handle(h[2])}));
    ops.push_back(op(K::kConv2d, {O::Handle(h[0]), O::Handle(h[1])}));
    ops.push_back(op(K::kUnary, {O::Result(1)}));
    ops.back().unary = UnaryOp::kRelu;
    ops.push_back(op(K::kMaxPool2d, {O::Result(2)}));
    ops.back().window.kernel_size = {2};
    ops.back().window.stride = {1};
    ops.push_back(op(K::kReshape, {O::Result(3)}));
    ops.back().dims = {2, 8};
    ops.push_back(op(K::kLinear, {O::Result(4), O::Handle(h[2])}));
    ops.push_back(op(K::kLoss, {O::Result(5), O::Handle(h[3])}));
    ops.back().loss = LossKind::kCrossEntropy;
    ops.push_back(op(K::kBackward, {O::Result(6)}));
    ops.push_back(op(K::kGrad, {O::Handle(h[1])}));  // #8
    ops.push_back(op(K::kGrad, {O::Handle(h[2])}));  // #9
    ops.push_back(op(K::kZeroGrad, {O::Handle(h[1]), O::Handle(h[2])}));
    return ops;
  };
  const std::vector<uint64_t> h = handles_on(kFaulty);
  const std::vector<OpSpec> ops = step(h);
  auto execute = [&] { return rt_->Execute(session_, ops, {}).status(); };
  for (FaultSite site : {FaultSite::kAllocate, FaultSite::kAnyKernel,
                         FaultSite::kCol2Im, FaultSite::kMatMul}) {
    SCOPED_TRACE(FaultSiteName(site));
    EXPECT_FALSE(Sweep(site, execute, nullptr, false, 1024).empty());
    // Every failure left the grads None.
    for (uint64_t p : {h[1], h[2]}) {
      OpSpec grad;
      grad.kind = K::kGrad;
      grad.inputs = {Operand::Handle(p)};
      EXPECT_EQ(rt_->Run(session_, grad).status().code(),
                absl::StatusCode::kFailedPrecondition);
    }
  }
  const uint32_t keep[] = {8, 9};
  auto got = rt_->Execute(session_, ops, keep);
  ASSERT_TRUE(got.ok()) << got.status();
  auto want = rt_->Execute(session_, step(handles_on("cpu")), keep);
  ASSERT_TRUE(want.ok()) << want.status();
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(ReadAll((*got)[i].handle), ReadAll((*want)[i].handle));
  }
}

TEST_F(FaultInjectionTest, CreateFilledFailsCleanlyThenWorks) {
  struct Case {
    std::string name;
    DType dtype;
    std::vector<int64_t> dims;
    FillSpec fill;
    double arange_end = 0;
  };
  FillSpec zeros, full, arange, randn;
  full.kind = FillSpec::Kind::kFull;
  full.value = 7;
  arange.kind = FillSpec::Kind::kArange;
  arange.start = 0;
  arange.step = 0.5;
  randn.kind = FillSpec::Kind::kRandn;
  randn.seed = 1234;
  const Case cases[] = {
      {"zeros", DType::kFloat32, {3, 4}, zeros},
      {"full", DType::kInt32, {5}, full},
      {"arange", DType::kFloat64, {}, arange, 5.0},
      {"randn", DType::kFloat32, {4, 4}, randn},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto fill = [&](std::string_view device) {
      return rt_->CreateFilled(session_, device, c.dtype, c.dims, c.fill,
                               c.arange_end, "filled");
    };
    auto on_faulty = [&] { return fill(kFaulty).status(); };
    EXPECT_EQ(Sweep(FaultSite::kAllocate, on_faulty).size(), 1u);
    EXPECT_EQ(Sweep(FaultSite::kFill, on_faulty).size(), 1u);
    auto got = fill(kFaulty);
    auto want = fill("cpu");
    ASSERT_TRUE(got.ok() && want.ok());
    EXPECT_EQ(got->shape, want->shape);
    EXPECT_EQ(ReadAll(got->handle), ReadAll(want->handle));
  }
}

// In-place ops write only with their last kernel, so a fault at any step
// leaves self as it was; the retry updates it once.
TEST_F(FaultInjectionTest, InPlaceFailureLeavesSelfAsItWas) {
  struct Case {
    std::string name;
    Input other;
    OpSpec op;
    std::vector<FaultSite> sites;
  };
  std::vector<Case> cases;
  {
    // float32 += float64: computed in float64 into a temporary, then cast
    // into self.
    Case c{"add_promoting",
           F64({2, 3}),
           {},
           {FaultSite::kBinary, FaultSite::kCast}};
    c.op.in_place = InPlaceOp::kAdd;
    cases.push_back(c);
  }
  {
    // self += 2.5 * other: the scalar is copied to the device and cast,
    // multiplied, then added into self.
    Case c{"axpy",
           F32({2, 3}, 3.0, -1.0),
           {},
           {FaultSite::kCopyFromHost, FaultSite::kCast, FaultSite::kBinary}};
    c.op.in_place = InPlaceOp::kAxpy;
    c.op.alpha = Scalar::Float(2.5);
    cases.push_back(c);
  }
  {
    // self /= 4 (a scalar operand).
    Case c{"div_scalar",
           Input{},
           {},
           {FaultSite::kCopyFromHost, FaultSite::kCast, FaultSite::kBinary}};
    c.op.in_place = InPlaceOp::kDiv;
    c.op.scalar = Scalar::Int(4);
    cases.push_back(c);
  }
  for (Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Input self_in = F32({2, 3});
    c.op.kind = OpSpec::Kind::kInPlace;
    const uint64_t self = Create(self_in);
    c.op.inputs = {Operand::Handle(self)};
    if (!c.other.bytes.empty()) {
      c.op.inputs.push_back(Operand::Handle(Create(c.other)));
    }
    auto run = [&] { return rt_->Run(session_, c.op).status(); };
    std::vector<FaultSite> sites = {FaultSite::kAllocate,
                                    FaultSite::kAnyKernel};
    sites.insert(sites.end(), c.sites.begin(), c.sites.end());
    for (FaultSite site : sites) {
      const std::vector<uint8_t> current = ReadAll(self);
      EXPECT_FALSE(Sweep(site, run,
                         [&](const absl::Status&) {
                           EXPECT_EQ(ReadAll(self), current)
                               << "self was changed";
                         })
                       .empty())
          << FaultSiteName(site);
    }
    // The retry, against the same op on a CPU copy.
    Input now = self_in;
    now.bytes = ReadAll(self);
    OpSpec on_cpu = c.op;
    on_cpu.inputs[0] = Operand::Handle(Create(now, "cpu"));
    if (!c.other.bytes.empty()) {
      on_cpu.inputs[1] = Operand::Handle(Create(c.other, "cpu"));
    }
    auto got = rt_->Run(session_, c.op);
    auto want = rt_->Run(session_, on_cpu);
    ASSERT_TRUE(got.ok() && want.ok());
    EXPECT_EQ(got->handle, self);
    EXPECT_EQ(ReadAll(self), ReadAll(want->handle));
  }
}

// Execute's contract: in-place updates by ops before the failing one stay
// applied; nothing the list made is kept.
TEST_F(FaultInjectionTest, ExecuteKeepsEarlierInPlaceUpdatesOnly) {
  const Input self_in = F32({2, 3});
  const uint64_t self = Create(self_in);
  const uint64_t other = Create(F32({2, 3}, 1.0, 1.0));
  std::vector<OpSpec> ops(2);
  ops[0].kind = OpSpec::Kind::kInPlace;
  ops[0].in_place = InPlaceOp::kAdd;
  ops[0].inputs = {Operand::Handle(self), Operand::Handle(other)};
  ops[1].kind = OpSpec::Kind::kUnary;
  ops[1].unary = UnaryOp::kNeg;
  ops[1].inputs = {Operand::Result(0)};
  const uint32_t keep[] = {0, 1};
  const std::string before = Accounting();
  faulty_->FailNth(FaultSite::kUnary, 1);
  auto failed = rt_->Execute(session_, ops, keep);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(Str(failed.status().message()),
              StartsWith("op #1 (neg; operands: result of op #0 [2, 3] "
                         "float32): cuda:7: FaultyDevice: injected failure "
                         "of kernel Unary (neg; Unary call #1"));
  EXPECT_EQ(Accounting(), before);
  // self = self + other was applied.
  OpSpec add = ops[0];
  add.inputs = {Operand::Handle(Create(self_in, "cpu")),
                Operand::Handle(Create(F32({2, 3}, 1.0, 1.0), "cpu"))};
  auto want = rt_->Run(session_, add);
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(ReadAll(self), ReadAll(want->handle));
  // And the list runs.
  auto got = rt_->Execute(session_, ops, keep);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[0].handle, self);
}

// Faults under concurrent ops: exactly one call fails, and the memory of
// the failed one comes back while the others run.
TEST_F(FaultInjectionTest, ConcurrentOpsOneFaultOneFailure) {
  const uint64_t a = Create(F32({16, 16}));
  const uint64_t b = Create(F32({16, 16}, 1.0, 0.5));
  const std::vector<uint64_t> handles = Handles();
  const std::string before = Accounting();
  constexpr int kThreads = 4, kCalls = 25;
  faulty_->FailNth(FaultSite::kBinary, 40);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kCalls; ++i) {
        auto sum = rt_->Binary(session_, BinaryOp::kAdd, a, b);
        if (!sum.ok()) {
          failures.fetch_add(1);
          EXPECT_EQ(sum.status().code(), absl::StatusCode::kInternal);
          EXPECT_THAT(Str(sum.status().message()), HasSubstr(kMarker));
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 1);
  EXPECT_EQ(Handles().size(), handles.size() + kThreads * kCalls - 1);
  ReleaseAllBut(handles);
  EXPECT_EQ(Accounting(), before);
}

// A device stuck failing every call (a CUDA sticky error) wedges nothing:
// each call fails with the device's status, the CPU keeps working, and the
// device's tensors can still be released and the session closed.
TEST_F(FaultInjectionTest, DeviceFailingEverythingWedgesNothing) {
  const Input in = F32({4, 4});
  const uint64_t on_faulty = Create(in);
  const uint64_t on_cpu = Create(in, "cpu");
  auto other = rt_->OpenSession("other");
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(
      rt_->CreateFromData(*other, kFaulty, in.dtype, in.dims, in.bytes, "")
          .ok());
  const std::string before = Accounting();
  Fault always;
  always.sticky = true;
  for (FaultSite site :
       {FaultSite::kAllocate, FaultSite::kCopyFromHost, FaultSite::kCopyToHost,
        FaultSite::kCopyFromDevice, FaultSite::kAnyKernel}) {
    faulty_->Arm(site, always);
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(
        rt_->CreateFromData(session_, kFaulty, in.dtype, in.dims, in.bytes, "")
            .status()
            .code(),
        absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(rt_->Binary(session_, BinaryOp::kAdd, on_faulty, on_faulty)
                  .status()
                  .code(),
              absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(rt_->To(session_, on_cpu, kFaulty, false).status().code(),
              absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(rt_->To(session_, on_faulty, "cpu", false).status().code(),
              absl::StatusCode::kInternal);
    auto reader = rt_->OpenReader(session_, on_faulty);
    ASSERT_TRUE(reader.ok());
    std::vector<uint8_t> out(in.bytes.size());
    EXPECT_EQ((*reader)->Read(0, out).code(), absl::StatusCode::kInternal);
  }
  EXPECT_EQ(Accounting(), before);
  auto sum = rt_->Binary(session_, BinaryOp::kAdd, on_cpu, on_cpu);
  EXPECT_TRUE(sum.ok()) << sum.status();
  // Freeing needs no device call: the faults stay armed.
  EXPECT_TRUE(rt_->Release(session_, on_faulty).ok());
  auto closed = rt_->CloseSession(*other);
  ASSERT_TRUE(closed.ok()) << closed.status();
  EXPECT_EQ(closed->released_tensors, 1u);
  EXPECT_EQ(faulty_->live_buffers(), 0u);
}

// --- Transfer paths --------------------------------------------------------

TEST_F(FaultInjectionTest, CreateFromDataFailsCleanlyThenWorks) {
  const Input in = F32({64, 64});
  auto create = [&] {
    return rt_
        ->CreateFromData(session_, kFaulty, in.dtype, in.dims, in.bytes, "d")
        .status();
  };
  EXPECT_EQ(Sweep(FaultSite::kAllocate, create).size(), 1u);
  EXPECT_EQ(Sweep(FaultSite::kCopyFromHost, create).size(), 1u);
  // The device's code passes through as it is.
  const std::string before = Accounting();
  Fault unavailable;
  unavailable.code = absl::StatusCode::kUnavailable;
  faulty_->Arm(FaultSite::kCopyFromHost, unavailable);
  EXPECT_EQ(create().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Accounting(), before);
  auto made =
      rt_->CreateFromData(session_, kFaulty, in.dtype, in.dims, in.bytes, "d");
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ(ReadAll(made->handle), in.bytes);
}

TEST_F(FaultInjectionTest, StreamedUploadAppendFailsAndIsRetried) {
  const Input in = F32({1024});
  const std::span<const uint8_t> bytes(in.bytes);
  auto begin = [&] {
    return rt_->BeginUpload(session_, kFaulty, in.dtype, in.dims, "up")
        .status();
  };
  EXPECT_EQ(Sweep(FaultSite::kAllocate, begin).size(), 1u);

  const std::string idle = Accounting();
  auto upload = rt_->BeginUpload(session_, kFaulty, in.dtype, in.dims, "up");
  ASSERT_TRUE(upload.ok()) << upload.status();
  Runtime::Upload& up = **upload;
  const std::string open = Accounting();  // the upload holds its buffer
  ASSERT_TRUE(up.Append(bytes.subspan(0, 1024)).ok());
  faulty_->FailNth(FaultSite::kCopyFromHost, 1);
  const absl::Status failed = up.Append(bytes.subspan(1024, 1024));
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(Str(failed.message()), HasSubstr(kMarker));
  EXPECT_THAT(Str(failed.message()),
              HasSubstr("CopyFromHost call #2 (1024 bytes at offset 1024)"));
  EXPECT_EQ(up.received_bytes(), 1024u);  // the failed piece does not count
  EXPECT_EQ(Accounting(), open);
  // The same piece again, and the rest.
  ASSERT_TRUE(up.Append(bytes.subspan(1024, 1024)).ok());
  ASSERT_TRUE(up.Append(bytes.subspan(2048)).ok());
  auto made = up.Finish();
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ(ReadAll(made->handle), in.bytes);
  upload->reset();

  // An upload abandoned after a failure gives its memory back.
  const std::string done = Accounting();
  EXPECT_NE(done, idle);
  auto abandoned =
      rt_->BeginUpload(session_, kFaulty, in.dtype, in.dims, "abandoned");
  ASSERT_TRUE(abandoned.ok());
  faulty_->FailNth(FaultSite::kCopyFromHost, 1);
  EXPECT_EQ((*abandoned)->Append(bytes.subspan(0, 512)).code(),
            absl::StatusCode::kInternal);
  auto incomplete = (*abandoned)->Finish();
  EXPECT_EQ(incomplete.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Str(incomplete.status().message()),
              HasSubstr("received 0 of 4096 bytes"));
  abandoned->reset();
  EXPECT_EQ(Accounting(), done);
}

// AppendFrom on a device whose memory is not host memory goes through a
// 1 MiB bounce buffer: a fault in any piece fails the upload.
TEST_F(FaultInjectionTest, StreamedUploadAppendFromFailsInEveryPiece) {
  const Input in = Large(3 * kMiB + 400);  // four pieces
  const uint64_t n = in.bytes.size();
  int pieces = 0;
  auto upload = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(
        std::unique_ptr<Runtime::Upload> up,
        rt_->BeginUpload(session_, kFaulty, in.dtype, in.dims, "from"));
    pieces = 0;
    RETURN_IF_ERROR(up->AppendFrom(n, [&](std::span<uint8_t> dst, uint64_t at) {
      std::memcpy(dst.data(), in.bytes.data() + at, dst.size());
      ++pieces;
      return absl::OkStatus();
    }));
    return up->Finish().status();
  };
  EXPECT_EQ(Sweep(FaultSite::kAllocate, upload).size(), 1u);
  int failing_piece = 0;
  const std::vector<absl::Status> failures =
      Sweep(FaultSite::kCopyFromHost, upload, [&](const absl::Status&) {
        // Filled up to the failing piece, and no further.
        EXPECT_EQ(pieces, ++failing_piece);
      });
  EXPECT_EQ(failures.size(), 4u);
  EXPECT_EQ(pieces, 4);  // the run without a fault
  // A code other than the default passes through.
  const std::string before = Accounting();
  Fault unavailable;
  unavailable.nth = 3;
  unavailable.code = absl::StatusCode::kUnavailable;
  faulty_->Arm(FaultSite::kCopyFromHost, unavailable);
  EXPECT_EQ(upload().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Accounting(), before);

  auto up = rt_->BeginUpload(session_, kFaulty, in.dtype, in.dims, "from");
  ASSERT_TRUE(up.ok());
  const Runtime::Upload::Filler copy_in = [&](std::span<uint8_t> dst,
                                              uint64_t at) {
    std::memcpy(dst.data(), in.bytes.data() + at, dst.size());
    return absl::OkStatus();
  };
  // A call that fails in its third piece appends nothing: the same upload
  // takes the whole call again.
  faulty_->FailNth(FaultSite::kCopyFromHost, 3);
  EXPECT_FALSE((*up)->AppendFrom(n, copy_in).ok());
  EXPECT_EQ((*up)->received_bytes(), 0u);
  ASSERT_TRUE((*up)->AppendFrom(n, copy_in).ok());
  auto made = (*up)->Finish();
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ(ReadAll(made->handle), in.bytes);
}

TEST_F(FaultInjectionTest, ToDeviceFromCpuFailsCleanlyThenWorks) {
  const Input in = F32({32, 8});
  const uint64_t on_cpu = Create(in, "cpu");
  auto to = [&] { return rt_->To(session_, on_cpu, kFaulty, false).status(); };
  EXPECT_EQ(Sweep(FaultSite::kAllocate, to).size(), 1u);
  const std::vector<absl::Status> failures =
      Sweep(FaultSite::kCopyFromDevice, to);
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_THAT(Str(failures[0].message()), HasSubstr("1024 bytes from cpu"));
  // A failure reported after the copy was made keeps nothing either.
  const std::string before = Accounting();
  Fault late;
  late.after_forwarding = true;
  faulty_->Arm(FaultSite::kCopyFromDevice, late);
  EXPECT_EQ(to().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(Accounting(), before);
  auto moved = rt_->To(session_, on_cpu, kFaulty, false);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(moved->device, kFaulty);
  EXPECT_EQ(ReadAll(moved->handle), in.bytes);
}

// The CPU device reads a tensor of another device through that device's
// CopyToHost.
TEST_F(FaultInjectionTest, ToCpuFromDeviceFailsCleanlyThenWorks) {
  const Input in = F32({32, 8});
  const uint64_t on_faulty = Create(in);
  auto to = [&] { return rt_->To(session_, on_faulty, "cpu", false).status(); };
  const std::vector<absl::Status> failures = Sweep(FaultSite::kCopyToHost, to);
  ASSERT_EQ(failures.size(), 1u);
  auto moved = rt_->To(session_, on_faulty, "cpu", false);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(moved->device, "cpu");
  EXPECT_EQ(ReadAll(moved->handle), in.bytes);
}

TEST_F(FaultInjectionTest, CopyWithinTheDeviceFailsCleanlyThenWorks) {
  const Input in = F32({32, 8});
  const uint64_t on_faulty = Create(in);
  auto copy = [&] {
    return rt_->To(session_, on_faulty, kFaulty, /*copy=*/true).status();
  };
  const uint64_t to_host = faulty_->calls(FaultSite::kCopyToHost);
  EXPECT_EQ(Sweep(FaultSite::kAllocate, copy).size(), 1u);
  const std::vector<absl::Status> failures =
      Sweep(FaultSite::kCopyFromDevice, copy);
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_THAT(Str(failures[0].message()), HasSubstr("1024 bytes from cuda:7"));
  EXPECT_EQ(faulty_->calls(FaultSite::kCopyToHost), to_host);
  auto copied = rt_->To(session_, on_faulty, kFaulty, true);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_NE(copied->handle, on_faulty);
  EXPECT_EQ(ReadAll(copied->handle), in.bytes);
}

TEST_F(FaultInjectionTest, ReaderReadFailsAndReadsAgain) {
  const Input in = F32({256});
  const uint64_t handle = Create(in);
  auto reader = rt_->OpenReader(session_, handle);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const std::string before = Accounting();
  std::vector<uint8_t> out(in.bytes.size());
  faulty_->FailNth(FaultSite::kCopyToHost, 1);
  const absl::Status failed = (*reader)->Read(0, out);
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(Str(failed.message()), HasSubstr(kMarker));
  EXPECT_THAT(Str(failed.message()), HasSubstr("(1024 bytes at offset 0)"));
  EXPECT_EQ(Accounting(), before);
  ASSERT_TRUE((*reader)->Read(0, out).ok());
  EXPECT_EQ(out, in.bytes);

  // A reader keeps a released tensor's memory while a read fails, and lets
  // it go with the reader.
  ASSERT_TRUE(rt_->Release(session_, handle).ok());
  faulty_->FailNth(FaultSite::kCopyToHost, 1);
  EXPECT_EQ((*reader)->Read(0, out).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(faulty_->live_bytes(), in.bytes.size());
  reader->reset();
  EXPECT_EQ(faulty_->live_bytes(), 0u);
}

// ReadWith on a device whose memory is not host memory reads 1 MiB pieces
// into a bounce buffer: a fault in any piece fails the read.
TEST_F(FaultInjectionTest, ReaderReadWithFailsInEveryPiece) {
  const Input in = Large(3 * kMiB + 400);  // four pieces
  const uint64_t handle = Create(in);
  std::vector<uint8_t> got;
  int pieces = 0;
  auto read = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(std::unique_ptr<Runtime::Reader> reader,
                     rt_->OpenReader(session_, handle));
    got.assign(in.bytes.size(), 0);
    pieces = 0;
    return reader->ReadWith(
        0, in.bytes.size(), [&](std::span<const uint8_t> src, uint64_t at) {
          std::memcpy(got.data() + at, src.data(), src.size());
          ++pieces;
          return absl::OkStatus();
        });
  };
  int failing_piece = 0;
  const std::vector<absl::Status> failures =
      Sweep(FaultSite::kCopyToHost, read, [&](const absl::Status&) {
        // Every piece before the failing one was handed over.
        EXPECT_EQ(pieces, failing_piece++);
      });
  EXPECT_EQ(failures.size(), 4u);
  EXPECT_EQ(pieces, 4);
  EXPECT_EQ(got, in.bytes);
}

// A POSIX shared memory object standing in for a client's: created with a
// cookie, unmapped, closed and unlinked when the test ends.
class ShmObject {
 public:
  ShmObject(const std::string& tag, size_t size)
      : name_("/tensord-" + tag + "-" + std::to_string(::getpid())),
        size_(size),
        cookie_(kSharedMemoryCookieBytes, '\x5a') {
    fd_ = ::shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd_ < 0 || ::ftruncate(fd_, static_cast<off_t>(size)) != 0) return;
    void* map =
        ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (map == MAP_FAILED) return;
    map_ = static_cast<uint8_t*>(map);
    std::memcpy(map_, cookie_.data(), cookie_.size());
  }
  ~ShmObject() {
    if (map_ != nullptr) ::munmap(map_, size_);
    if (fd_ >= 0) ::close(fd_);
    ::shm_unlink(name_.c_str());
  }
  ShmObject(const ShmObject&) = delete;
  ShmObject& operator=(const ShmObject&) = delete;

  bool ok() const { return map_ != nullptr; }
  const std::string& name() const { return name_; }
  const std::string& cookie() const { return cookie_; }
  size_t size() const { return size_; }
  uint8_t* data() const { return map_ + kSharedMemoryDataOffset; }

 private:
  const std::string name_;
  const size_t size_;
  const std::string cookie_;
  int fd_ = -1;
  uint8_t* map_ = nullptr;
};

TEST_F(FaultInjectionTest, SharedMemoryTransfersFailCleanlyThenWork) {
  const Input in = Large(3 * kMiB + 400);  // four bounce pieces
  ShmObject shm("faults", kSharedMemoryDataOffset + in.bytes.size());
  ASSERT_TRUE(shm.ok());
  std::memcpy(shm.data(), in.bytes.data(), in.bytes.size());
  auto region =
      rt_->RegisterSharedMemory(session_, shm.name(), shm.size(), shm.cookie());
  ASSERT_TRUE(region.ok()) << region.status();

  auto upload = [&] {
    return rt_
        ->CreateFromSharedMemory(session_, *region, 0, kFaulty, in.dtype,
                                 in.dims, "shm")
        .status();
  };
  const Runtime::SharedMemoryStats start = rt_->shared_memory_stats();
  EXPECT_EQ(Sweep(FaultSite::kAllocate, upload).size(), 1u);
  EXPECT_EQ(Sweep(FaultSite::kCopyFromHost, upload).size(), 4u);
  // Only the two runs without a fault count.
  EXPECT_EQ(rt_->shared_memory_stats().uploads, start.uploads + 2);
  auto made = rt_->CreateFromSharedMemory(session_, *region, 0, kFaulty,
                                          in.dtype, in.dims, "shm");
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ(ReadAll(made->handle), in.bytes);

  std::memset(shm.data(), 0, in.bytes.size());
  auto fetch = [&] {
    return rt_->FetchToSharedMemory(session_, made->handle, *region, 0)
        .status();
  };
  EXPECT_EQ(Sweep(FaultSite::kCopyToHost, fetch).size(), 4u);
  EXPECT_EQ(rt_->shared_memory_stats().fetches, start.fetches + 1);
  EXPECT_TRUE(std::equal(in.bytes.begin(), in.bytes.end(), shm.data()));
  EXPECT_TRUE(rt_->UnregisterSharedMemory(session_, *region).ok());
}

}  // namespace
}  // namespace tensord::core
