#include "core/cpu/blas_placement.h"

#include <cblas.h>
#include <dlfcn.h>
#include <sched.h>

#include <atomic>

namespace tensord::core {
namespace {

// openblas_setaffinity(thread_idx, cpusetsize, cpu_set): thread_idx 0 ..
// threads - 2 are the workers (threads - 1 is the caller itself).
using SetAffinityFn = int (*)(int, size_t, cpu_set_t*);

// One per process, as OpenBLAS's worker pool is.
struct Placer {
  // Null when placement cannot work here; a worker whose affinity cannot be
  // set turns it off for good (no retry on every multiply).
  std::atomic<SetAffinityFn> set_affinity{nullptr};
  cpu_set_t cpus;  // the process's CPUs (RecordCpus)
  std::atomic<int> in_flight{0};
  // Written only by the call that holds the placement (the one that found
  // in_flight at 0): the CPU the workers are kept off (-1: none) and the
  // thread count they were placed for (workers added later start unplaced).
  std::atomic<int> kept_off{-1};
  std::atomic<int> placed_threads{0};

  Placer() {
    CPU_ZERO(&cpus);
    const bool two_cpus = ::sched_getaffinity(0, sizeof(cpus), &cpus) == 0 &&
                          CPU_COUNT(&cpus) >= 2;
    // The OpenMP and serial builds export a stub that fails (and prints):
    // only the pthreads build's workers can be placed.
    if (openblas_get_parallel() == OPENBLAS_THREAD && two_cpus) {
      set_affinity = reinterpret_cast<SetAffinityFn>(
          ::dlsym(RTLD_DEFAULT, "openblas_setaffinity"));
    }
  }
};

Placer& GetPlacer() {
  static Placer* const placer = new Placer();
  return *placer;
}

}  // namespace

void ScopedBlasPlacement::RecordCpus() { (void)GetPlacer(); }

bool ScopedBlasPlacement::Available() {
  return GetPlacer().set_affinity.load() != nullptr;
}

ScopedBlasPlacement::ScopedBlasPlacement(double work) {
  if (work <= kMinWork) return;
  Placer& p = GetPlacer();
  const SetAffinityFn set_affinity = p.set_affinity.load();
  if (set_affinity == nullptr) return;
  const int threads = openblas_get_num_threads();
  if (threads < 2) return;
  in_flight_ = true;
  if (p.in_flight.fetch_add(1, std::memory_order_acq_rel) != 0) return;
  const int cpu = ::sched_getcpu();
  if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &p.cpus)) return;
  if (p.kept_off.load(std::memory_order_relaxed) == cpu &&
      p.placed_threads.load(std::memory_order_relaxed) == threads) {
    placed_ = true;
    return;
  }
  cpu_set_t others = p.cpus;
  CPU_CLR(cpu, &others);
  bool ok = true;
  for (int worker = 0; worker < threads - 1; ++worker) {
    ok = set_affinity(worker, sizeof(others), &others) == 0 && ok;
  }
  if (!ok) {
    p.set_affinity.store(nullptr);
    return;
  }
  p.kept_off.store(cpu, std::memory_order_relaxed);
  p.placed_threads.store(threads, std::memory_order_relaxed);
  placed_ = true;
}

ScopedBlasPlacement::~ScopedBlasPlacement() {
  if (in_flight_) GetPlacer().in_flight.fetch_sub(1, std::memory_order_acq_rel);
}

}  // namespace tensord::core
