#include "core/cpu/blas.h"

#include <cblas.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace tensord::core {
namespace {

// Kernel families from weakest to strongest, as OpenBLAS names cores.
int Rank(std::string_view core) {
  std::string lower(core);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "skylakex" || lower == "cooperlake" ||
      lower == "sapphirerapids") {
    return 2;
  }
  if (lower == "haswell" || lower == "zen") return 1;
  return 0;  // prescott, nehalem, sandybridge, core2, ... and unknown names
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::optional<long long> ReadNumber(const std::string& path) {
  const std::string text = ReadFile(path);
  long long v = 0;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || p == text.data()) return std::nullopt;
  return v;
}

// This process's cgroup v2 path ("0::/path" in /proc/self/cgroup).
std::string CgroupV2Path() {
  std::istringstream lines(ReadFile("/proc/self/cgroup"));
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return "";
}

}  // namespace

CpuFeatures CpuFeatures::Detect() {
  CpuFeatures f;
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512cd = __builtin_cpu_supports("avx512cd");
  return f;
}

std::string BestCoreType(const CpuFeatures& f) {
  if (f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl && f.avx512cd) {
    return "SkylakeX";
  }
  if (f.avx2 && f.fma) return "Haswell";
  return "";
}

bool CoreIsWeaker(std::string_view current, std::string_view best) {
  return !best.empty() && Rank(current) < Rank(best);
}

std::optional<int> CpusFromCpuMax(std::string_view cpu_max) {
  std::istringstream in{std::string(cpu_max)};
  std::string quota;
  long long period = 0;
  if (!(in >> quota >> period) || quota == "max" || period <= 0) {
    return std::nullopt;
  }
  long long q = 0;
  const auto [p, ec] = std::from_chars(quota.data(), quota.data() + quota.size(), q);
  if (ec != std::errc() || q <= 0) return std::nullopt;
  return static_cast<int>(std::max(1LL, (q + period - 1) / period));
}

std::optional<int> CpusFromCfsQuota(long long quota_us, long long period_us) {
  if (quota_us <= 0 || period_us <= 0) return std::nullopt;
  return static_cast<int>(std::max(1LL, (quota_us + period_us - 1) / period_us));
}

int UsableCpus() {
  int cpus = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = CPU_COUNT(&set);
  if (cpus <= 0) cpus = 1;
  auto cap = [&](std::optional<int> limit) {
    if (limit.has_value()) cpus = std::min(cpus, *limit);
  };
  // cgroup v2: the file at the mount root (a container's own cgroup) and
  // at this process's path (a systemd unit's CPUQuota=).
  cap(CpusFromCpuMax(ReadFile("/sys/fs/cgroup/cpu.max")));
  if (const std::string path = CgroupV2Path(); !path.empty() && path != "/") {
    cap(CpusFromCpuMax(ReadFile("/sys/fs/cgroup" + path + "/cpu.max")));
  }
  // cgroup v1.
  for (const char* dir : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"}) {
    const std::string d(dir);
    auto quota = ReadNumber(d + "/cpu.cfs_quota_us");
    auto period = ReadNumber(d + "/cpu.cfs_period_us");
    if (quota && period) cap(CpusFromCfsQuota(*quota, *period));
  }
  return std::max(1, cpus);
}

namespace {
constexpr char kReplacedCoreEnv[] = "TENSORD_BLAS_CORE_REPLACED";

// The thread policy's variables, each set (and marked set by tensord)
// only where the user left it unset.
struct PolicyVariable {
  const char* name;
  const char* value;
  const char* marker;
};
constexpr PolicyVariable kThreadPolicy[] = {
    // libgomp's team (oneDNN's) sleeps as soon as a call ends.
    {"OMP_WAIT_POLICY", "PASSIVE", "TENSORD_OMP_PASSIVE_SET"},
    // OpenBLAS's idle workers sleep after 2^4 cycles of sched_yield()
    // instead of 2^28 (about 0.1 s): a worker yielding in a loop takes a
    // core from the handler thread and oneDNN on a small machine.
    {"OPENBLAS_THREAD_TIMEOUT", "4", "TENSORD_BLAS_TIMEOUT_SET"},
};
}  // namespace

bool SetHostComputeEnvironment() {
  bool set = false;
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {  // else chosen already
    const std::string best = BestCoreType(CpuFeatures::Detect());
    const std::string current = CurrentBlas().core;
    if (CoreIsWeaker(current, best)) {
      ::setenv("OPENBLAS_CORETYPE", best.c_str(), 1);
      ::setenv(kReplacedCoreEnv, current.c_str(), 1);
      set = true;
    }
  }
  for (const PolicyVariable& v : kThreadPolicy) {
    if (std::getenv(v.name) != nullptr) continue;  // the user's choice
    ::setenv(v.name, v.value, 1);
    ::setenv(v.marker, "1", 1);
    set = true;
  }
  return set;
}

void ReexecForHostCompute(char** argv) {
  if (!SetHostComputeEnvironment()) return;
  ::execv("/proc/self/exe", argv);
  // The exec failed: carry on as we are (the libraries read none of it).
  if (std::getenv(kReplacedCoreEnv) != nullptr) {
    ::unsetenv("OPENBLAS_CORETYPE");
    ::unsetenv(kReplacedCoreEnv);
  }
  for (const PolicyVariable& v : kThreadPolicy) {
    if (std::getenv(v.marker) == nullptr) continue;
    ::unsetenv(v.name);
    ::unsetenv(v.marker);
  }
}

std::string ReplacedBlasCore() {
  const char* replaced = std::getenv(kReplacedCoreEnv);
  return replaced == nullptr ? "" : replaced;
}

BlasInfo CurrentBlas() {
  BlasInfo info;
  if (const char* config = openblas_get_config()) info.config = config;
  if (const char* core = openblas_get_corename()) info.core = core;
  info.threads = openblas_get_num_threads();
  return info;
}

void SetBlasThreads(int threads) { openblas_set_num_threads(std::max(1, threads)); }

int BlasThreads() { return openblas_get_num_threads(); }

}  // namespace tensord::core
