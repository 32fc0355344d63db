// The CPU device's BLAS choices: kernel by CPU features, threads by quota.
#include "core/cpu/blas.h"

#include <thread>

#include <gtest/gtest.h>

namespace tensord::core {
namespace {

CpuFeatures Avx512() {
  CpuFeatures f;
  f.avx2 = f.fma = true;
  f.avx512f = f.avx512bw = f.avx512dq = f.avx512vl = f.avx512cd = true;
  return f;
}

TEST(BlasTest, BestCoreFollowsTheFeatures) {
  EXPECT_EQ(BestCoreType(Avx512()), "SkylakeX");
  CpuFeatures knl = Avx512();  // AVX-512F without BW/DQ/VL (Xeon Phi)
  knl.avx512bw = knl.avx512dq = knl.avx512vl = false;
  EXPECT_EQ(BestCoreType(knl), "Haswell");
  CpuFeatures avx2;
  avx2.avx2 = avx2.fma = true;
  EXPECT_EQ(BestCoreType(avx2), "Haswell");
  avx2.fma = false;
  EXPECT_EQ(BestCoreType(avx2), "");
  EXPECT_EQ(BestCoreType(CpuFeatures{}), "");
}

TEST(BlasTest, OnlyAWeakerCoreIsReplaced) {
  // The machine: the library fell back to a generic core.
  EXPECT_TRUE(CoreIsWeaker("Prescott", "SkylakeX"));
  EXPECT_TRUE(CoreIsWeaker("sandybridge", "SkylakeX"));
  EXPECT_TRUE(CoreIsWeaker("Haswell", "SkylakeX"));
  EXPECT_TRUE(CoreIsWeaker("Prescott", "Haswell"));
  // Equal or better stays, whatever the spelling.
  EXPECT_FALSE(CoreIsWeaker("SkylakeX", "SkylakeX"));
  EXPECT_FALSE(CoreIsWeaker("skylakex", "SkylakeX"));
  EXPECT_FALSE(CoreIsWeaker("Cooperlake", "SkylakeX"));
  EXPECT_FALSE(CoreIsWeaker("SapphireRapids", "SkylakeX"));
  EXPECT_FALSE(CoreIsWeaker("Zen", "Haswell"));
  EXPECT_FALSE(CoreIsWeaker("SkylakeX", "Haswell"));
  EXPECT_FALSE(CoreIsWeaker("Prescott", ""));  // nothing better known
}

TEST(BlasTest, CgroupQuotasBecomeWholeCpus) {
  EXPECT_EQ(CpusFromCpuMax("max 100000\n"), std::nullopt);
  EXPECT_EQ(CpusFromCpuMax("200000 100000\n"), 2);
  EXPECT_EQ(CpusFromCpuMax("150000 100000"), 2);  // 1.5 CPUs: 2 threads
  EXPECT_EQ(CpusFromCpuMax("50000 100000"), 1);
  EXPECT_EQ(CpusFromCpuMax(""), std::nullopt);
  EXPECT_EQ(CpusFromCpuMax("garbage"), std::nullopt);
  EXPECT_EQ(CpusFromCpuMax("100000 0"), std::nullopt);
  EXPECT_EQ(CpusFromCfsQuota(-1, 100000), std::nullopt);
  EXPECT_EQ(CpusFromCfsQuota(400000, 100000), 4);
  EXPECT_EQ(CpusFromCfsQuota(10000, 100000), 1);
}

TEST(BlasTest, UsableCpusIsWithinTheMachine) {
  const int cpus = UsableCpus();
  EXPECT_GE(cpus, 1);
  EXPECT_LE(cpus, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

TEST(BlasTest, ThreadsCanBeSetAndTheKernelIsNamed) {
  const BlasInfo before = CurrentBlas();
  EXPECT_FALSE(before.core.empty());
  EXPECT_NE(before.config.find("OpenBLAS"), std::string::npos);
  SetBlasThreads(1);
  EXPECT_EQ(CurrentBlas().threads, 1);
  SetBlasThreads(before.threads);
  EXPECT_EQ(CurrentBlas().threads, before.threads);
}

}  // namespace
}  // namespace tensord::core
