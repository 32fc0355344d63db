// all_reduce bus bandwidth (issue 36; nccl-tests' definition: busbw =
// size / time x 2(n-1)/n) through a separate tensord daemon's process
// group of host devices (`tensord --host-devices 2`), beside bare Gloo in
// this process with the same sizes and ranks — one gloo::rendezvous::Context
// per rank, fully connected on 127.0.0.1, float32 summed by gloo::sum —
// interleaved per size, medians over rounds, as ratios.
//
//   build/server/tensord --host-devices 2 --listen 127.0.0.1:50900 &
//   build/bench/collective_bench --address 127.0.0.1:50900
//       --sizes_mib 1,4,16,64,256 --rounds 3 --repeats 3   (one line)
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gloo/allreduce.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/hash_store.h"
#include "gloo/transport/tcp/device.h"
#include "server/program_flags.h"
#include "tensord/client.h"

ABSL_FLAG(std::string, address, "",
          "a tensord with at least --ranks host devices (required)");
ABSL_FLAG(std::string, sizes_mib, "1,4,16,64,256", "tensor sizes, MiB");
ABSL_FLAG(int, ranks, 2, "members of the group (host devices cpu:0...)");
ABSL_FLAG(int, rounds, 3, "interleaved rounds (the median counts)");
ABSL_FLAG(int, repeats, 3, "all_reduces per size per round (the best counts)");

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(const std::function<void()>& f) {
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Bare Gloo: `ranks` contexts on one TCP device, each rank on a thread.
class BareGloo {
 public:
  explicit BareGloo(int ranks) : contexts_(static_cast<size_t>(ranks)) {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    attr.ai_family = AF_INET;
    device_ = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::HashStore store;
    OnRanks([&](int r) {
      auto c = std::make_shared<gloo::rendezvous::Context>(r, ranks);
      c->connectFullMesh(store, device_);
      contexts_[static_cast<size_t>(r)] = std::move(c);
    });
  }
  void AllReduce(std::vector<std::vector<float>>& data) {
    const uint32_t tag = tag_++;
    OnRanks([&](int r) {
      gloo::AllreduceOptions opts(contexts_[static_cast<size_t>(r)]);
      std::vector<float>& d = data[static_cast<size_t>(r)];
      opts.setOutput(d.data(), d.size());
      opts.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(
              &gloo::sum<float>));
      opts.setTag(tag);
      gloo::allreduce(opts);
    });
  }

 private:
  void OnRanks(const std::function<void(int)>& f) {
    std::vector<std::thread> threads;
    for (size_t r = 1; r < contexts_.size(); ++r) {
      threads.emplace_back(f, static_cast<int>(r));
    }
    f(0);
    for (std::thread& t : threads) t.join();
  }
  std::shared_ptr<gloo::transport::Device> device_;
  std::vector<std::shared_ptr<gloo::Context>> contexts_;
  uint32_t tag_ = 0;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  tensord::server::ParseProgramFlags(
      argc, argv,
      {.name = "collective_bench",
       .summary = "all_reduce bus bandwidth through a tensord daemon's "
                  "process group of host devices beside bare Gloo in this "
                  "process, interleaved. Prints a table and one JSON line.",
       .example = "collective_bench --address 127.0.0.1:50900 --sizes_mib "
                  "1,64,256",
       .flag_files = {__FILE__}});
  const std::string address = absl::GetFlag(FLAGS_address);
  if (address.empty()) {
    std::fprintf(stderr, "collective_bench: --address is required (a "
                         "tensord --host-devices 2)\n");
    return 2;
  }
  std::vector<uint64_t> sizes;
  for (absl::string_view s :
       absl::StrSplit(absl::GetFlag(FLAGS_sizes_mib), ',')) {
    uint64_t mib = 0;
    if (absl::SimpleAtoi(s, &mib) && mib > 0) sizes.push_back(mib << 20);
  }
  const int ranks = std::max(1, absl::GetFlag(FLAGS_ranks));
  const int rounds = std::max(1, absl::GetFlag(FLAGS_rounds));
  const int repeats = std::max(1, absl::GetFlag(FLAGS_repeats));
  const double factor = 2.0 * (ranks - 1) / ranks;

  tensord::Client client(address);
  std::vector<tensord::Device> devices;
  for (int r = 0; r < ranks; ++r) {
    devices.emplace_back("cpu:" + std::to_string(r));
  }
  tensord::ProcessGroup group = client.new_group(devices);
  BareGloo bare(ranks);

  std::vector<std::vector<double>> bare_s(sizes.size()), tensord_s(sizes.size());
  for (int round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      const size_t n = sizes[i] / sizeof(float);
      std::vector<std::vector<float>> data(static_cast<size_t>(ranks),
                                           std::vector<float>(n, 1.0f));
      std::vector<tensord::Tensor> tensors;
      for (const tensord::Device& d : devices) {
        tensors.push_back(client.ones({static_cast<int64_t>(n)},
                                      tensord::DType::kFloat32, d));
      }
      double best_bare = 1e30, best_tensord = 1e30;
      for (int k = 0; k < repeats; ++k) {
        best_bare = std::min(best_bare, Seconds([&] { bare.AllReduce(data); }));
        best_tensord = std::min(best_tensord,
                                Seconds([&] { group.all_reduce(tensors); }));
      }
      bare_s[i].push_back(best_bare);
      tensord_s[i].push_back(best_tensord);
    }
  }
  std::printf("all_reduce, float32 sum, %d ranks (%s, engine %s), median of "
              "%d rounds (best of %d each)\n",
              ranks, address.c_str(), group.engine().c_str(), rounds, repeats);
  std::printf("%10s %14s %14s %8s\n", "MiB", "bare GB/s", "tensord GB/s",
              "ratio");
  std::string json = "{\"bench\":\"collective\",\"ranks\":" +
                     std::to_string(ranks) + ",\"rows\":[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    const double bare_bw = sizes[i] / Median(bare_s[i]) * factor / 1e9;
    const double tensord_bw = sizes[i] / Median(tensord_s[i]) * factor / 1e9;
    std::printf("%10llu %14.2f %14.2f %8.2f\n",
                static_cast<unsigned long long>(sizes[i] >> 20), bare_bw,
                tensord_bw, tensord_bw / bare_bw);
    char row[160];
    std::snprintf(row, sizeof(row),
                  "%s{\"mib\":%llu,\"bare_busbw_gbs\":%.3f,"
                  "\"tensord_busbw_gbs\":%.3f}",
                  i ? "," : "", static_cast<unsigned long long>(sizes[i] >> 20),
                  bare_bw, tensord_bw);
    json += row;
  }
  std::printf("%s]}\n", json.c_str());
  return 0;
}
