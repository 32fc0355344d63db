// Runtime and handle-table concurrency: many threads creating, moving,
// computing on, reading and releasing tensors, across sessions and devices,
// while other threads close sessions under them and operators list
// everything. Built and run normally, and under ThreadSanitizer by
// `make test-tsan` (core only: no gRPC in this binary).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/runtime/runtime.h"

namespace tensord::core {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

std::span<const uint8_t> Bytes(const std::vector<float>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float)};
}

std::unique_ptr<Runtime> MakeRuntime() {
  RuntimeOptions options;
  options.host_devices = 3;
  options.host_memory_budget = 64 * kMiB;
  return Runtime::Create(std::move(options)).value();
}

uint64_t TotalHeld(const Runtime& rt) {
  uint64_t held = 0;
  for (const DeviceStatus& d : rt.ListDevices()) held += d.held_bytes;
  return held;
}

std::vector<float> Read(Runtime& rt, const std::string& s, uint64_t h) {
  auto reader = rt.OpenReader(s, h);
  if (!reader.ok()) return {};
  std::vector<float> out((*reader)->meta().nbytes / sizeof(float));
  if (!(*reader)
           ->Read(0, {reinterpret_cast<uint8_t*>(out.data()),
                      out.size() * sizeof(float)})
           .ok()) {
    return {};
  }
  return out;
}

// Each worker owns sessions and runs create / To / add / matmul / sum /
// Execute / read / release on them, checking every value; results are
// exact (small integers in float32).
TEST(ConcurrencyTest, WorkersAcrossSessionsAndDevices) {
  auto rt = MakeRuntime();
  constexpr int kWorkers = 8, kIters = 150;
  std::atomic<int> failures{0};
  std::atomic<bool> done{false};
  auto fail = [&](int line) {
    ++failures;
    ADD_FAILURE_AT(__FILE__, line);
  };
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937 rng(w);
      std::string s = rt->OpenSession("worker").value();
      for (int i = 0; i < kIters; ++i) {
        const std::string dev = "cpu:" + std::to_string(rng() % 3);
        const std::string other = "cpu:" + std::to_string(rng() % 3);
        const float a0 = static_cast<float>(rng() % 7);
        std::vector<float> av = {a0, 1, 2, 3, 4, 5};  // [2, 3]
        auto a = rt->CreateFromData(s, dev, DType::kFloat32,
                                    std::vector<int64_t>{2, 3}, Bytes(av), "");
        if (!a.ok()) {
          fail(__LINE__);
          continue;
        }
        auto moved = rt->To(s, a->handle, other, false);
        if (!moved.ok()) {
          fail(__LINE__);
          continue;
        }
        // a (dev) + moved (other): same device or PyTorch's error.
        auto sum = rt->Binary(s, BinaryOp::kAdd, a->handle, moved->handle);
        if (dev == other) {
          if (!sum.ok() || moved->handle != a->handle) {
            fail(__LINE__);
            continue;
          }
          std::vector<float> got = Read(*rt, s, sum->handle);
          if (got.size() != 6 || got[0] != 2 * a0 || got[5] != 10)
            fail(__LINE__);
          (void)rt->Release(s, sum->handle);
        } else if (sum.status().code() !=
                   absl::StatusCode::kFailedPrecondition) {
          fail(__LINE__);
        }
        // a @ a^T via Execute on a's device: [[a0^2+14, a0+...]]; keep the
        // matmul and its sum.
        std::vector<OpSpec> ops(3);
        ops[0].kind = OpSpec::Kind::kTranspose;
        ops[0].inputs = {Operand::Handle(a->handle)};
        ops[0].dim = 0;
        ops[0].dim1 = 1;
        ops[1].kind = OpSpec::Kind::kMatMul;
        ops[1].inputs = {Operand::Handle(a->handle), Operand::Result(0)};
        ops[2].kind = OpSpec::Kind::kReduce;
        ops[2].reduce = ReduceOp::kSum;
        ops[2].inputs = {Operand::Result(1)};
        const uint32_t keep[] = {1, 2};
        auto kept = rt->Execute(s, ops, keep);
        if (!kept.ok() || kept->size() != 2) {
          fail(__LINE__);
          continue;
        }
        std::vector<float> mm = Read(*rt, s, (*kept)[0].handle);
        const float r00 = a0 * a0 + 1 + 4, r01 = 3 * a0 + 4 + 10,
                    r11 = 9 + 16 + 25;
        if (mm.size() != 4 || mm[0] != r00 || mm[1] != r01 || mm[2] != r01 ||
            mm[3] != r11) {
          fail(__LINE__);
        }
        std::vector<float> total = Read(*rt, s, (*kept)[1].handle);
        if (total.size() != 1 || total[0] != r00 + 2 * r01 + r11)
          fail(__LINE__);
        // Direct MatMul with bad shapes: INVALID_ARGUMENT, nothing held.
        auto bad = rt->MatMul(s, a->handle, a->handle);
        if (bad.status().code() != absl::StatusCode::kInvalidArgument)
          fail(__LINE__);
        // A reader outlives a release of its handle.
        auto reader = rt->OpenReader(s, (*kept)[0].handle);
        if (!reader.ok()) {
          fail(__LINE__);
          continue;
        }
        if (!rt->Release(s, (*kept)[0].handle).ok()) fail(__LINE__);
        float first = -1;
        if (!(*reader)->Read(0, {reinterpret_cast<uint8_t*>(&first), 4}).ok() ||
            first != r00) {
          fail(__LINE__);
        }
        reader->reset();
        if (rt->Release(s, (*kept)[0].handle).code() !=
            absl::StatusCode::kNotFound) {
          fail(__LINE__);
        }
        // Leave some tensors behind for CloseSession to free; reopen now
        // and then.
        if (i % 3 != 0) {
          (void)rt->Release(s, a->handle);
          if (moved->handle != a->handle) (void)rt->Release(s, moved->handle);
        }
        if (i % 25 == 24) {
          if (!rt->CloseSession(s).ok()) fail(__LINE__);
          s = rt->OpenSession("worker").value();
        }
      }
      if (!rt->CloseSession(s).ok()) fail(__LINE__);
    });
  }
  // Two threads hammer one shared session: create, look up, release the
  // other's handles; an intruder closes it now and then.
  std::string shared = rt->OpenSession("shared").value();
  std::atomic<uint64_t> last_handle{0};
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      FillSpec ones;
      ones.kind = FillSpec::Kind::kOnes;
      const int64_t dims[] = {64};
      for (int i = 0; i < 400; ++i) {
        auto t = rt->CreateFilled(shared, w == 0 ? "cpu:0" : "cpu:2",
                                  DType::kFloat32, dims, ones, 0, "");
        if (t.ok()) {
          const uint64_t prev = last_handle.exchange(t->handle);
          (void)rt->GetTensor(shared, prev);
          (void)rt->Release(shared, prev);
        } else if (t.status().code() != absl::StatusCode::kNotFound) {
          fail(__LINE__);  // only a closed session may refuse
        }
      }
    });
  }
  threads.emplace_back([&] {
    for (int i = 0; i < 20; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      (void)rt->CloseSession(shared);
    }
  });
  // Operators watching.
  std::thread watcher([&] {
    while (!done.load()) {
      (void)rt->ListDevices();
      (void)rt->ListSessions();
      (void)rt->ListAllTensors();
      (void)rt->session_count();
    }
  });
  for (std::thread& t : threads) t.join();
  done = true;
  watcher.join();
  (void)rt->CloseSession(shared);
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(rt->session_count(), 0u);
  EXPECT_EQ(TotalHeld(*rt), 0u);
  for (const DeviceStatus& d : rt->ListDevices()) {
    EXPECT_EQ(d.live_tensors, 0u) << d.name;
  }
}

// Uploads racing with closes of their session: an upload either finishes
// (and its tensor is freed by the close) or fails; no byte stays held.
TEST(ConcurrencyTest, UploadsRacingSessionClose) {
  auto rt = MakeRuntime();
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int i = 0; i < 50; ++i) {
        std::string s = rt->OpenSession("up").value();
        const int64_t dims[] = {1024};
        auto up = rt->BeginUpload(s, "cpu:" + std::to_string(w % 3),
                                  DType::kFloat32, dims, "");
        ASSERT_TRUE(up.ok()) << up.status();
        std::vector<uint8_t> chunk(1024, 1);
        std::thread closer([&] { (void)rt->CloseSession(s); });
        for (int c = 0; c < 4; ++c) (void)(*up)->Append(chunk);
        (void)(*up)->Finish();
        closer.join();
        up->reset();
        (void)rt->CloseSession(s);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(TotalHeld(*rt), 0u);
}

}  // namespace
}  // namespace tensord::core
