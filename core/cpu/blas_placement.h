// ScopedBlasPlacement: moves OpenBLAS's worker threads off the CPU of the
// thread that calls a multi-threaded BLAS routine; they stay there until a
// later call, from another CPU, moves them again.
//
// Why: a GEMM on T BLAS threads is the calling thread plus T-1 workers,
// each computing a share and meeting at barriers, so the call is as slow
// as its slowest share. A gRPC handler thread is woken on whichever CPU
// the scheduler picks, and between calls OpenBLAS's workers spin (for about
// 0.1 s) on theirs. On the 2-core machine of issue 18 the handler was often
// woken on the CPU where the worker spun; the two then took turns on that
// CPU while the other one idled (the scheduler does not move a task that
// just ran: it is "cache hot"), and the multiply ran at one core's speed.
// A scheduler trace showed it; a loop of n = 512 matmul RPCs had p99 2.4 ms
// against a 1.1 ms GEMM. With the workers kept off the caller's CPU, p99
// was 1.4-1.5 ms.
//
// What it does: for a call of more than kMinWork multiply-adds, reads the
// calling thread's CPU (sched_getcpu, no system call) and, if it differs
// from the CPU the workers were last kept off, sets every worker's affinity
// to the process's CPUs (RecordCpus) without it (openblas_setaffinity). In
// steady state (the handler woken on the same CPU call after call) that is
// no system call at all. The calling thread's own affinity is never
// changed, so gRPC keeps every CPU.
//
// It does nothing when OpenBLAS has no workers (1 thread), when the library
// is not its pthreads build (the OpenMP and serial builds cannot place
// their threads; openblas_setaffinity is looked up at run time), when the
// process may run on fewer than 2 CPUs, after setting a worker's affinity
// failed once, or while another large call is in flight, placed or not
// (concurrent callers share the workers; each moving them off its own CPU
// would fight the other).
//
// Thread-safety: any thread; construct and destroy on the calling thread.
#ifndef TENSORD_CORE_CPU_BLAS_PLACEMENT_H_
#define TENSORD_CORE_CPU_BLAS_PLACEMENT_H_

namespace tensord::core {

class ScopedBlasPlacement {
 public:
  // OpenBLAS threads a GEMM of more than 64^3 multiply-adds (its
  // GEMM_MULTITHREAD_THRESHOLD); smaller calls run on the caller alone.
  static constexpr double kMinWork = 64.0 * 64.0 * 64.0;

  // Whether placement can work in this process (see above).
  static bool Available();

  // Records the CPUs the workers may use: this thread's affinity mask (the
  // process's, when called from main before threads are pinned). Called by
  // ConfigureHostCompute at startup; otherwise the first large call records
  // its own thread's mask. Later calls change nothing.
  static void RecordCpus();

  // `work`: the multiply-adds of each BLAS call it covers (m * n * k).
  explicit ScopedBlasPlacement(double work);
  ~ScopedBlasPlacement();
  ScopedBlasPlacement(const ScopedBlasPlacement&) = delete;
  ScopedBlasPlacement& operator=(const ScopedBlasPlacement&) = delete;

  // Whether this call holds the placement (the workers are off the CPU
  // this thread ran on when it was made).
  bool placed() const { return placed_; }

 private:
  bool in_flight_ = false;  // counted in the calls in flight
  bool placed_ = false;
};

}  // namespace tensord::core

#endif  // TENSORD_CORE_CPU_BLAS_PLACEMENT_H_
