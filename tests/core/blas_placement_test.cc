// ScopedBlasPlacement: OpenBLAS's workers kept off the calling thread's CPU
// for large calls, left alone for small ones and for concurrent callers.
#include "core/cpu/blas_placement.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sched.h>

#include <vector>

#include "core/cpu/blas.h"

namespace tensord::core {
namespace {

using GetAffinityFn = int (*)(int, size_t, cpu_set_t*);

class BlasPlacementTest : public testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::sched_getaffinity(0, sizeof(home_), &home_), 0);
    ScopedBlasPlacement::RecordCpus();  // before any test pins this thread
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &home_)) cpus_.push_back(cpu);
    }
    if (cpus_.size() < 2) {
      GTEST_SKIP() << "this process may use " << cpus_.size()
                   << " CPU: placement needs 2";
    }
    get_affinity_ = reinterpret_cast<GetAffinityFn>(
        ::dlsym(RTLD_DEFAULT, "openblas_getaffinity"));
    if (!ScopedBlasPlacement::Available() || get_affinity_ == nullptr) {
      GTEST_SKIP() << "this OpenBLAS is not the pthreads build: its threads "
                      "cannot be placed";
    }
    threads_ = CurrentBlas().threads;
    SetBlasThreads(2);
  }

  void TearDown() override {
    if (cpus_.size() < 2) return;
    // This thread back on every CPU. The worker stays where the last
    // placement put it: the placement remembers that CPU, and moving the
    // worker behind its back would make it skip the next move.
    ::sched_setaffinity(0, sizeof(home_), &home_);
    SetBlasThreads(threads_);
  }

  static void RunOn(int cpu) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    ASSERT_EQ(::sched_setaffinity(0, sizeof(one), &one), 0);
    ASSERT_EQ(::sched_getcpu(), cpu);
  }

  cpu_set_t WorkerCpus() const {
    cpu_set_t set;
    CPU_ZERO(&set);
    EXPECT_EQ(get_affinity_(0, sizeof(set), &set), 0);
    return set;
  }

  GetAffinityFn get_affinity_ = nullptr;
  cpu_set_t home_;
  std::vector<int> cpus_;
  int threads_ = 1;
};

constexpr double kLarge = 512.0 * 512.0 * 512.0;

TEST_F(BlasPlacementTest, TheWorkerLeavesTheCallersCpu) {
  const int a = cpus_[0], b = cpus_[1];
  ASSERT_NO_FATAL_FAILURE(RunOn(a));
  {
    const ScopedBlasPlacement placement(kLarge);
    EXPECT_TRUE(placement.placed());
    const cpu_set_t workers = WorkerCpus();
    EXPECT_FALSE(CPU_ISSET(a, &workers));
    EXPECT_TRUE(CPU_ISSET(b, &workers));
    EXPECT_EQ(CPU_COUNT(&workers), static_cast<int>(cpus_.size()) - 1);
  }
  // The caller woken on another CPU next time: the worker follows.
  ASSERT_NO_FATAL_FAILURE(RunOn(b));
  {
    const ScopedBlasPlacement placement(kLarge);
    EXPECT_TRUE(placement.placed());
    const cpu_set_t workers = WorkerCpus();
    EXPECT_FALSE(CPU_ISSET(b, &workers));
    EXPECT_TRUE(CPU_ISSET(a, &workers));
  }
  // The calling thread itself was never confined by the placement.
  cpu_set_t mine;
  ASSERT_EQ(::sched_getaffinity(0, sizeof(mine), &mine), 0);
  EXPECT_EQ(CPU_COUNT(&mine), 1);  // RunOn's pin, nothing narrower
  EXPECT_TRUE(CPU_ISSET(b, &mine));
}

TEST_F(BlasPlacementTest, SmallCallsAndOneThreadLeaveTheWorkersAlone) {
  ASSERT_NO_FATAL_FAILURE(RunOn(cpus_[1]));
  { const ScopedBlasPlacement large(kLarge); }  // the worker may use cpus_[0]
  ASSERT_NO_FATAL_FAILURE(RunOn(cpus_[0]));
  {
    const ScopedBlasPlacement small(ScopedBlasPlacement::kMinWork);
    EXPECT_FALSE(small.placed());
    const cpu_set_t workers = WorkerCpus();
    EXPECT_TRUE(CPU_ISSET(cpus_[0], &workers));  // not moved for it
  }
  SetBlasThreads(1);
  {
    const ScopedBlasPlacement alone(kLarge);
    EXPECT_FALSE(alone.placed());
  }
  SetBlasThreads(2);
  const ScopedBlasPlacement placed(kLarge);
  EXPECT_TRUE(placed.placed());
}

TEST_F(BlasPlacementTest, AConcurrentCallDoesNotMoveTheWorkers) {
  ASSERT_NO_FATAL_FAILURE(RunOn(cpus_[0]));
  const ScopedBlasPlacement first(kLarge);
  ASSERT_TRUE(first.placed());
  ASSERT_NO_FATAL_FAILURE(RunOn(cpus_[1]));
  {
    // Stands in for a second handler's GEMM while the first one runs.
    const ScopedBlasPlacement second(kLarge);
    EXPECT_FALSE(second.placed());
    const cpu_set_t workers = WorkerCpus();
    EXPECT_FALSE(CPU_ISSET(cpus_[0], &workers));  // still off the first's CPU
  }
  // With the first one done, the next call holds the placement again.
}

TEST_F(BlasPlacementTest, TheNextCallAfterAConcurrentOneIsPlaced) {
  ASSERT_NO_FATAL_FAILURE(RunOn(cpus_[1]));
  {
    const ScopedBlasPlacement first(kLarge);
    const ScopedBlasPlacement second(kLarge);
    EXPECT_TRUE(first.placed());
    EXPECT_FALSE(second.placed());
  }
  ASSERT_NO_FATAL_FAILURE(RunOn(cpus_[0]));
  const ScopedBlasPlacement next(kLarge);
  EXPECT_TRUE(next.placed());
  const cpu_set_t workers = WorkerCpus();
  EXPECT_FALSE(CPU_ISSET(cpus_[0], &workers));
}

}  // namespace
}  // namespace tensord::core
