// The CPU device's BLAS (OpenBLAS): which kernel it runs and on how many
// threads, chosen for the machine the daemon runs on.
//
// Kernel: Debian's OpenBLAS is built for every x86-64 core type and picks
// one at load time from CPUID's family and model. On CPUs it does not know
// (newer models, or VMs that mask the model number) it can fall back to a
// generic kernel that runs sgemm at a fifth of the speed of the AVX-512 one
// (65 vs 320 GFLOP/s at n = 2048 measured on the machine). Its
// choice can only be overridden through OPENBLAS_CORETYPE, read when the
// library loads; so the daemon compares the library's core with the best
// one the CPU's features allow (BestCoreType) and, when the library's is
// weaker, re-executes itself once with OPENBLAS_CORETYPE set (main.cc).
//
// Threads: OpenBLAS starts a thread per online CPU, ignoring the CPU quota
// of a container (cgroup cpu.max / cfs_quota), so a daemon limited to 2 of
// 64 CPUs would run 64 spinning threads. UsableCpus() counts the CPUs of
// the affinity mask, capped by the quota.
// Thread-safety: call from main before serving.
#ifndef TENSORD_CORE_CPU_BLAS_H_
#define TENSORD_CORE_CPU_BLAS_H_

#include <optional>
#include <string>
#include <string_view>

namespace tensord::core {

struct CpuFeatures {
  bool avx2 = false, fma = false;
  bool avx512f = false, avx512bw = false, avx512dq = false, avx512vl = false,
       avx512cd = false;
  // This CPU's (with the OS's support for the register state).
  static CpuFeatures Detect();
};

// The OpenBLAS core type (OPENBLAS_CORETYPE spelling) whose float32/64 GEMM
// kernels are the fastest these features run: "SkylakeX" (AVX-512),
// "Haswell" (AVX2 + FMA), or "" when neither applies (the library's own
// choice stands). Newer cores (Cooperlake, SapphireRapids) add bfloat16
// kernels over SkylakeX's sgemm/dgemm; they count as its equal.
std::string BestCoreType(const CpuFeatures& features);

// Whether the library's core (openblas_get_corename(), any case) is weaker
// than `best`: then forcing `best` gives faster kernels.
bool CoreIsWeaker(std::string_view current, std::string_view best);

// CPUs from a cgroup v2 cpu.max text ("max 100000", "150000 100000"):
// quota / period rounded up, nullopt when unlimited or unreadable.
std::optional<int> CpusFromCpuMax(std::string_view cpu_max);
// CPUs from cgroup v1 cfs_quota_us and cfs_period_us (quota -1: unlimited).
std::optional<int> CpusFromCfsQuota(long long quota_us, long long period_us);

// CPUs this process may use: its affinity mask, capped by its cgroup's CPU
// quota (v2 or v1); at least 1.
int UsableCpus();

// The environment this process's host compute wants and did not start
// with, set in it now: OPENBLAS_CORETYPE when the library runs a weaker
// kernel than BestCoreType and the user chose none; the thread policy's
// OMP_WAIT_POLICY=PASSIVE (libgomp's team, oneDNN's, sleeps as soon as a
// call ends instead of spinning on the cores OpenBLAS's threads and the
// service use) and OPENBLAS_THREAD_TIMEOUT=4 (OpenBLAS's idle workers
// sleep after 2^4 cycles of yielding, not 2^28), each unless the user set
// it. All are read only when the libraries load,
// so true means: execute the program again (ReexecForHostCompute).
bool SetHostComputeEnvironment();
// Executes /proc/self/exe again with `argv` when SetHostComputeEnvironment
// set anything; returns otherwise (also when the exec fails, with the
// environment as it was). Call first thing in main, before any thread
// starts.
void ReexecForHostCompute(char** argv);
// The library's own choice when ReexecForHostCompute replaced it, else ""
// (for the log).
std::string ReplacedBlasCore();

struct BlasInfo {
  std::string config;  // openblas_get_config(): version, build options
  std::string core;    // openblas_get_corename()
  int threads = 0;     // openblas_get_num_threads()
};
BlasInfo CurrentBlas();
void SetBlasThreads(int threads);
// openblas_get_num_threads(): the host's compute threads (--blas-threads),
// which the CPU device's library kernels use too.
int BlasThreads();

}  // namespace tensord::core

#endif  // TENSORD_CORE_CPU_BLAS_H_
