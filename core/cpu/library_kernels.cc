#include "core/cpu/library_kernels.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "core/base/library_cache.h"
#include "core/base/status.h"
#include "core/cpu/blas.h"

#ifdef TENSORD_WITH_ONEDNN
#include "core/cpu/onednn_call.h"

// libgomp's, oneDNN's OpenMP runtime (linked by name: no -fopenmp).
extern "C" void omp_set_num_threads(int threads);
#endif

namespace tensord::core::cpu {
namespace {

std::atomic<uint64_t> reorders{0}, team_calls{0}, alone_calls{0}, contended{0};

// Below this many floating-point operations a library call runs on its
// calling thread alone: waking a sleeping team costs tens of microseconds
// on a small VM (bench/train_bench, seed 001 at batch 4).
constexpr double kParallelGrainFlops = 4e6;

// What the cache of prepared calls made, reused and evicted (none without
// oneDNN).
LibraryCacheCounts CacheCounts();

}  // namespace

LibraryKernelCounters GetLibraryKernelCounters() {
  const LibraryCacheCounts cache = CacheCounts();
  return {cache.made,      cache.reused,      cache.evicted,
          reorders.load(), team_calls.load(), alone_calls.load(),
          contended.load()};
}

void NoteLibraryReorder() { reorders.fetch_add(1); }

int LibraryThreads(double flops) {
  return flops < kParallelGrainFlops ? 1 : BlasThreads();
}

#ifndef TENSORD_WITH_ONEDNN

namespace {
LibraryCacheCounts CacheCounts() { return {}; }
}  // namespace

const std::string& KernelLibraryName() {
  static const std::string none;
  return none;
}
bool LibraryRuns(const KernelArgs&, DType) { return false; }
absl::StatusOr<uint64_t> LibraryWorkspace(const KernelArgs&, DType) {
  return absl::InternalError("this build has no oneDNN");
}
absl::Status RunLibraryKernel(const KernelCall&) {
  return absl::InternalError("this build has no oneDNN");
}

#else  // TENSORD_WITH_ONEDNN

namespace {

using onednn::PreparedCall;

double Flops(const KernelArgs& args) {
  if (const auto* conv = std::get_if<Conv2dArgs>(&args)) {
    const WindowDims& w = conv->dims;
    return 2.0 * w.n * conv->out_channels * w.oh * w.ow * (w.c / conv->groups) *
           w.kh * w.kw;
  }
  return 0;
}

// Held by the one library call running on a team: a call that finds it
// taken runs on its own thread, so concurrent sessions never run two teams
// on the same cores.
std::mutex& TeamMutex() {
  static auto* mu = new std::mutex;
  return *mu;
}

// The cache's bound: a network has a few dozen window shapes, each with a
// few passes.
constexpr size_t kMaxPreparedCalls = 256;

// oneDNN sizes a primitive's work split by the OpenMP threads when it is
// made (a convolution made on one thread runs on one thread whatever the
// team at execution), so each call is made for the threads it runs on:
// the threads are part of the key.
absl::StatusOr<PreparedCall> Prepare(const KernelArgs& args, DType dtype,
                                     int threads) {
  omp_set_num_threads(threads);
  if (const auto* conv = std::get_if<Conv2dArgs>(&args)) {
    return onednn::PrepareConv(*conv, dtype);
  }
  return absl::InternalError(
      absl::StrCat("no library kernel for kernel kind ", args.index()));
}

using Cache = LibraryCache<PreparedCall>;

Cache& TheCache() {
  static auto* cache = new Cache(kMaxPreparedCalls);
  return *cache;
}

LibraryCacheCounts CacheCounts() { return TheCache().counts(); }

Cache::Entry Get(const KernelArgs& args, DType dtype, int threads) {
  return TheCache().Get(LibraryKeyOf(args, dtype, threads),
                        [&] { return Prepare(args, dtype, threads); });
}

std::string Probe() {
  Conv2dArgs conv;
  conv.dims = WindowDims{1, 1, 3, 3, 2, 2, 1, 1, 0, 0, 1, 1, 2, 2};
  if (!onednn::PrepareConv(conv, DType::kFloat32).ok()) return "";
  const dnnl_version_t* v = dnnl_version();
  return absl::StrCat("oneDNN ", v->major, ".", v->minor, ".", v->patch);
}

// The threads a call of `args` runs on when no other call holds the team.
int TeamThreads(const KernelArgs& args) { return LibraryThreads(Flops(args)); }

absl::StatusOr<const PreparedCall*> Lookup(const KernelArgs& args, DType dtype,
                                           int threads, Cache::Entry& hold) {
  hold = Get(args, dtype, threads);
  if (!hold->ok()) return hold->status();
  return &**hold;
}

}  // namespace

const std::string& KernelLibraryName() {
  static const std::string* library = new std::string(Probe());
  return *library;
}

bool LibraryRuns(const KernelArgs& args, DType dtype) {
  if (dtype != DType::kFloat32 || KernelLibraryName().empty() ||
      !std::holds_alternative<Conv2dArgs>(args)) {
    return false;
  }
  return Get(args, dtype, TeamThreads(args))->ok();
}

absl::StatusOr<uint64_t> LibraryWorkspace(const KernelArgs& args, DType dtype) {
  Cache::Entry hold;
  ASSIGN_OR_RETURN(const PreparedCall* call,
                   Lookup(args, dtype, TeamThreads(args), hold));
  return static_cast<uint64_t>(call->bytes());
}

absl::Status RunLibraryKernel(const KernelCall& call) {
  const DType dtype = call.out.dtype;
  const TensorRef& workspace = call.inputs.back();
  const uint64_t workspace_bytes = workspace.shape.NumElements();
  const int wanted = TeamThreads(call.args);
  int threads = wanted;
  std::unique_lock<std::mutex> team(TeamMutex(), std::defer_lock);
  if (threads > 1 && !team.try_lock()) {
    threads = 1;
    contended.fetch_add(1);
  }
  Cache::Entry hold;
  ASSIGN_OR_RETURN(const PreparedCall* prepared,
                   Lookup(call.args, dtype, threads, hold));
  if (prepared->bytes() > workspace_bytes) {
    // Alone it wants more scratch than the team's call the executor
    // admitted: wait for the team instead.
    team.lock();
    threads = wanted;
    ASSIGN_OR_RETURN(prepared, Lookup(call.args, dtype, threads, hold));
  }
  (threads > 1 ? team_calls : alone_calls).fetch_add(1);
  // The operands as PrepareConv numbered them: a forward's bias after the
  // two inputs, the output last.
  const bool bias = std::get<Conv2dArgs>(call.args).bias;
  void* const given[4] = {
      call.inputs[0].buffer->data(), call.inputs[1].buffer->data(),
      bias ? call.inputs[2].buffer->data() : call.out.buffer->data(),
      call.out.buffer->data()};
  return prepared->Run(std::span<void* const>(given, bias ? 4 : 3),
                       workspace.buffer->data(), threads,
                       KernelKindName(call.kind()));
}

#endif  // TENSORD_WITH_ONEDNN

}  // namespace tensord::core::cpu
