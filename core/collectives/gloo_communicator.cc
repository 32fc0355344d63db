// The host communicator on Gloo: one gloo::rendezvous::Context per rank,
// fully connected over one TCP device on loopback through an in-process
// store, each rank's part of a collective on a thread of its own. Gloo runs
// the algorithms (ring all-reduce, all-gather, broadcast, barrier) and the
// transport; tensord gives it the element-wise reductions.
#include <netdb.h>
#include <sys/socket.h>

#include <exception>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/collectives/host_communicator.h"
#include "core/collectives/reduce_kernels.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/config.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/hash_store.h"
#include "gloo/transport/tcp/device.h"

namespace tensord::core {
namespace {

constexpr int kMaxWorld = 64;

std::string EngineName() {
  return absl::StrCat("gloo ", GLOO_VERSION_MAJOR, ".", GLOO_VERSION_MINOR,
                      ".", GLOO_VERSION_PATCH, ", tcp on 127.0.0.1");
}

// Runs body(rank) for every rank at once (rank 0 on the calling thread) and
// returns the first failure, naming its rank.
absl::Status RunRanks(int world, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> failed(static_cast<size_t>(world));
  auto guarded = [&](int rank) {
    try {
      body(rank);
    } catch (...) {
      failed[static_cast<size_t>(rank)] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(world - 1));
  for (int r = 1; r < world; ++r) threads.emplace_back(guarded, r);
  guarded(0);
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    if (!failed[static_cast<size_t>(r)]) continue;
    std::string what = "unknown error";
    try {
      std::rethrow_exception(failed[static_cast<size_t>(r)]);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    return absl::UnavailableError(absl::StrCat("rank ", r, ": ", what));
  }
  return absl::OkStatus();
}

class GlooCommunicator final : public HostCommunicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::transport::Device> device,
                   std::vector<std::shared_ptr<gloo::Context>> contexts,
                   std::chrono::milliseconds timeout)
      : device_(std::move(device)),
        contexts_(std::move(contexts)),
        timeout_(timeout),
        engine_(EngineName()) {}

  int world_size() const override { return static_cast<int>(contexts_.size()); }
  const std::string& engine() const override { return engine_; }

  absl::Status AllReduce(std::span<void* const> data, size_t count,
                         DType dtype, Reduction op) override {
    const size_t element = DTypeSize(dtype);
    const ReduceFn reduce = ReduceFunction(op, dtype);
    const int world = world_size();
    return Run([&](int rank, uint32_t tag) {
      auto* bytes = static_cast<uint8_t*>(data[static_cast<size_t>(rank)]);
      if (world > 1) {
        gloo::AllreduceOptions opts(contexts_[static_cast<size_t>(rank)]);
        // Gloo reads the element size from the pointer's type.
        switch (element) {
          case 1:
            opts.setOutput(bytes, count);
            break;
          case 2:
            opts.setOutput(reinterpret_cast<uint16_t*>(bytes), count);
            break;
          case 4:
            opts.setOutput(reinterpret_cast<uint32_t*>(bytes), count);
            break;
          default:
            opts.setOutput(reinterpret_cast<uint64_t*>(bytes), count);
            break;
        }
        opts.setReduceFunction(reduce);
        opts.setTag(tag);
        opts.setTimeout(timeout_);
        gloo::allreduce(opts);
      }
      if (op == Reduction::kAvg) DivideBy(bytes, count, dtype, world);
    });
  }

  absl::Status Broadcast(std::span<void* const> data, size_t bytes,
                         int root) override {
    if (world_size() == 1) return Run([](int, uint32_t) {});
    return Run([&](int rank, uint32_t tag) {
      gloo::BroadcastOptions opts(contexts_[static_cast<size_t>(rank)]);
      // The root sends its output buffer when it is given no input.
      opts.setOutput(static_cast<uint8_t*>(data[static_cast<size_t>(rank)]),
                     bytes);
      opts.setRoot(root);
      opts.setTag(tag);
      opts.setTimeout(timeout_);
      gloo::broadcast(opts);
    });
  }

  absl::Status AllGather(std::span<const void* const> in,
                         std::span<void* const> out, size_t bytes) override {
    const size_t world = contexts_.size();
    return Run([&](int rank, uint32_t tag) {
      const auto r = static_cast<size_t>(rank);
      auto* src = static_cast<uint8_t*>(const_cast<void*>(in[r]));
      auto* dst = static_cast<uint8_t*>(out[r]);
      if (world == 1) {
        std::copy(src, src + bytes, dst);
        return;
      }
      gloo::AllgatherOptions opts(contexts_[r]);
      opts.setInput(src, bytes);
      opts.setOutput(dst, bytes * world);
      opts.setTag(tag);
      opts.setTimeout(timeout_);
      gloo::allgather(opts);
    });
  }

  absl::Status Barrier() override {
    if (world_size() == 1) return Run([](int, uint32_t) {});
    return Run([&](int rank, uint32_t tag) {
      gloo::BarrierOptions opts(contexts_[static_cast<size_t>(rank)]);
      opts.setTag(tag);
      opts.setTimeout(timeout_);
      gloo::barrier(opts);
    });
  }

 private:
  // One collective: every rank's part, in the order calls arrive.
  absl::Status Run(const std::function<void(int, uint32_t)>& part) {
    absl::MutexLock lock(&mu_);
    if (!broken_.ok()) return broken_;
    const uint32_t tag = next_tag_++;
    absl::Status s = RunRanks(world_size(), [&](int rank) { part(rank, tag); });
    if (!s.ok()) {
      broken_ = absl::FailedPreconditionError(absl::StrCat(
          "the group is broken (", s.message(), "): create a new one"));
    }
    return s;
  }

  std::shared_ptr<gloo::transport::Device> device_;
  std::vector<std::shared_ptr<gloo::Context>> contexts_;
  const std::chrono::milliseconds timeout_;
  const std::string engine_;
  absl::Mutex mu_;
  uint32_t next_tag_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

bool HostCollectivesBuilt() { return true; }
std::string HostCollectivesEngine() { return EngineName(); }

absl::StatusOr<std::unique_ptr<HostCommunicator>> ConnectHostCommunicator(
    int world, std::chrono::milliseconds timeout) {
  if (world < 1 || world > kMaxWorld) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a group has 1 to ", kMaxWorld, " devices, not ", world));
  }
  std::shared_ptr<gloo::transport::Device> device;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    attr.ai_family = AF_INET;
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("Gloo's TCP device on 127.0.0.1: ", e.what()));
  }
  gloo::rendezvous::HashStore store;
  std::vector<std::shared_ptr<gloo::Context>> contexts(
      static_cast<size_t>(world));
  absl::Status connected = RunRanks(world, [&](int rank) {
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, world);
    context->setTimeout(timeout);
    context->connectFullMesh(store, device);
    contexts[static_cast<size_t>(rank)] = std::move(context);
  });
  if (!connected.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "connecting the group's ranks: ", connected.message()));
  }
  return std::make_unique<GlooCommunicator>(std::move(device),
                                            std::move(contexts), timeout);
}

}  // namespace tensord::core
