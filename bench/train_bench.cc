// train_bench: seed 001's training step (zero_grad, forward, cross_entropy,
// backward, SGD step, loss.item()) on the tutorial's Net through tensord,
// beside the same step in local PyTorch (Debian's python3-torch, in its own
// process, on as many threads as the daemon's OpenBLAS uses), interleaved:
// tensord, torch, tensord, torch... at each batch size. The best time per
// step of --repeats runs counts; the ratio is tensord / torch. The
// train_step_compiled row is the same step compiled once (a Batch registered
// as a program, tensord/program.h) and run with one RunProgram a step,
// measured in the same rounds beside the same torch time. Also conv2d's
// GFLOP/s at seed 001's two convolutions at batch 64 through the service
// and in PyTorch: forward (conv and sum, eight per .item()) and forward with
// both gradients (conv, sum and backward, eight per .item(): three times
// the forward's FLOPs); a ResNet-style block (conv-bn-relu, conv-bn, + x,
// relu) at batch 32, forward and backward, milliseconds per pass. By default
// the server runs in this process on a loopback TCP port; --address measures an
// external tensord. Prints a table and one JSON line; torch's BLAS is printed
// as torch reports it (Debian's: "generic", i.e. libblas.so.3, OpenBLAS on this
// machine, and oneDNN for convolutions). With --metrics (the daemon's
// --metrics-listen address) it also prints what the device's kernel library
// prepared, reused, evicted and reordered during the run, and how its calls
// shared the CPU's one team of threads (its /metrics counters before and
// after). The sessions row runs the conv2 forward from --sessions clients
// (each its own session) at once: their summed GF/s beside one session's
// shows that concurrent sessions share the daemon's cores rather than each
// starting a team (the contended counter: calls that ran alone because
// another session's call held the team).
//
//   train_bench [--batches 4,64] [--steps 50] [--repeats 3] [--threads 2]
//               [--device cuda:0 --address A --python python3]
//               [--metrics HOST:PORT] [--convs conv1,conv2] [--block]
//               [--sessions 2] [--rounds 1]
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_server.h"
#include "examples/cifar_net.h"
#include "server/program_flags.h"
#include "server/server.h"
#include "tensord/client.h"

ABSL_FLAG(std::string, batches, "4,64", "batch sizes");
ABSL_FLAG(int, steps, 50, "timed steps per run");
ABSL_FLAG(int, repeats, 3, "runs per side (the best counts)");
ABSL_FLAG(int, rounds, 1,
          "rounds of every row; above 1, the medians are printed too (the "
          "JSON holds the medians)");
ABSL_FLAG(int, threads, 2, "torch threads (match the daemon's BLAS threads)");
ABSL_FLAG(std::string, device, "cpu",
          "the device both sides train on (cpu, cuda:0; torch uses the same "
          "name)");
ABSL_FLAG(std::string, python, "/usr/bin/python3",
          "the Python that has torch (on GPU machines, the one with CUDA)");
ABSL_FLAG(std::string, address, "",
          "measure this tensord instead of an in-process one");
ABSL_FLAG(std::string, convs, "conv1,conv2",
          "the convolution rows' shapes (empty: none; e.g. conv2 alone, to "
          "profile the daemon on one shape)");
ABSL_FLAG(bool, block, true, "the ResNet-style block row");
ABSL_FLAG(int, sessions, 2,
          "clients (sessions) running the conv2 forward at once in the "
          "sessions row (0 or 1: no row)");
ABSL_FLAG(std::string, metrics, "",
          "the measured tensord's --metrics-listen HOST:PORT: print its kernel "
          "library's cache counters over the run");

namespace {

// The measured device's tensord_device_library_*_total counters from the
// daemon's /metrics at `address` (HOST:PORT), in kLibraryCounters' order;
// empty when it cannot be read.
constexpr const char* kLibraryCounters[] = {
    "prepared", "reused", "evicted", "reorders", "team_calls", "alone_calls",
    "contended"};
std::vector<uint64_t> LibraryCounters(const std::string& address,
                                      const std::string& device) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port)) {
    return {};
  }
  httplib::Client http(address.substr(0, colon), port);
  const auto res = http.Get("/metrics");
  if (!res || res->status != 200) return {};
  std::vector<uint64_t> values;
  for (const char* counter : kLibraryCounters) {
    const std::string key = std::string("tensord_device_library_") + counter +
                            "_total{device=\"" + device + "\"} ";
    const size_t at = res->body.find(key);
    uint64_t v = 0;
    if (at == std::string::npos ||
        !absl::SimpleAtoi(
            absl::string_view(res->body)
                .substr(at + key.size())
                .substr(0, res->body.find('\n', at) - at - key.size()),
            &v)) {
      return {};
    }
    values.push_back(v);
  }
  return values;
}

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Milliseconds per training step through tensord at `batch`: eager, or
// `compiled` (the step recorded once in a Batch and compiled into a
// program: every op planned once on the server, one RunProgram a step).
double TensordStep(const tensord::Client& client, const std::string& device,
                   int batch, int steps, bool compiled = false) {
  tensord::nn::manual_seed(1);
  tensord::examples::Net net(client);
  net.to(device);
  tensord::optim::SGD optimizer(net.parameters(),
                                {.lr = 0.001, .momentum = 0.9});
  auto inputs = client.randn({batch, 3, 32, 32}, device, 2);
  std::vector<int64_t> labels(batch);
  for (int i = 0; i < batch; ++i) labels[i] = i % 10;
  auto target = client.tensor<int64_t>(labels).to(device);
  std::optional<tensord::Program> program;
  std::optional<tensord::Batch::Value> compiled_loss;
  if (compiled) {
    tensord::Batch b = client.batch();
    optimizer.zero_grad(b);
    compiled_loss.emplace(b.cross_entropy(net.forward(b, inputs), target));
    b.backward(*compiled_loss);
    optimizer.step(b);
    b.keep(*compiled_loss);
    program.emplace(b.compile({inputs, target}));
  }
  double running = 0;
  auto step = [&] {
    if (program.has_value()) {
      running += program->run({inputs, target}).item<float>(*compiled_loss);
      return;
    }
    optimizer.zero_grad();
    auto loss = tensord::cross_entropy(net(inputs), target);
    loss.backward();
    optimizer.step();
    running += loss.item<float>();
  };
  for (int i = 0; i < 3; ++i) step();  // warm-up
  const auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) step();
  return Seconds(t0, Clock::now()) * 1e3 / steps;
}

// Seed 001's convolutions at batch 64: input channels, size, output
// channels (5x5 kernels, no padding).
struct ConvShape {
  const char* name;
  int64_t c, hw, oc;
  double Flops() const {
    const int64_t o = hw - 4;
    return 2.0 * 64 * oc * o * o * c * 5 * 5;
  }
};
constexpr ConvShape kConvs[] = {{"conv1", 3, 32, 6}, {"conv2", 6, 14, 16}};
constexpr int kQueued = 8;  // convolutions per sync, both sides

// GFLOP/s of `shape` through tensord: forward, or forward and both
// gradients (`backward`).
double TensordConv(const tensord::Client& client, const std::string& device,
                   int steps, const ConvShape& shape, bool backward) {
  auto x = client.randn({64, shape.c, shape.hw, shape.hw}, device, 3);
  auto w = client.randn({shape.oc, shape.c, 5, 5}, device, 4);
  auto b = client.randn({shape.oc}, device, 5);
  if (backward) {
    x.requires_grad_();
    w.requires_grad_();
    b.requires_grad_();
  }
  // kQueued calls per round trip: one call per round trip would time the
  // round trip.
  auto once = [&] {
    std::optional<tensord::Tensor> s;
    for (int k = 0; k < kQueued; ++k) {
      s = tensord::conv2d(x, w, b).sum();
      if (backward) s->backward();
    }
    (void)s->item<float>();
  };
  once();
  const auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) once();
  return shape.Flops() * (backward ? 3 : 1) * kQueued * steps /
         Seconds(t0, Clock::now()) / 1e9;
}

// The conv2 forward from `sessions` clients at once, each its own session
// on its own thread: their GFLOP/s summed.
double ConcurrentConv(const std::string& address, const std::string& device,
                      int steps, int sessions) {
  std::vector<double> gflops(sessions);
  std::vector<std::thread> threads;
  for (int s = 0; s < sessions; ++s) {
    threads.emplace_back([&, s] {
      tensord::Client client(address);
      gflops[s] = TensordConv(client, device, steps, kConvs[1], false);
    });
  }
  for (std::thread& t : threads) t.join();
  double sum = 0;
  for (double g : gflops) sum += g;
  return sum;
}

// A ResNet-style block at batch 32 (x [32, 16, 32, 32]; conv 3x3 pad 1,
// batch norm in training, relu, conv, batch norm, + x, relu), forward and
// backward of its sum per .item(): milliseconds per pass.
double TensordBlock(const tensord::Client& client, const std::string& device,
                    int steps) {
  using tensord::DType;
  auto x = client.randn({32, 16, 32, 32}, device, 6);
  auto w1 = client.randn({16, 16, 3, 3}, device, 7) * 0.1;
  auto w2 = client.randn({16, 16, 3, 3}, device, 8) * 0.1;
  auto g1 = client.ones({16}, DType::kFloat32, device),
       b1 = client.zeros({16}, DType::kFloat32, device);
  auto g2 = client.ones({16}, DType::kFloat32, device),
       b2 = client.zeros({16}, DType::kFloat32, device);
  auto m1 = client.zeros({16}, DType::kFloat32, device),
       v1 = client.ones({16}, DType::kFloat32, device);
  auto m2 = client.zeros({16}, DType::kFloat32, device),
       v2 = client.ones({16}, DType::kFloat32, device);
  for (auto* t : {&x, &w1, &w2, &g1, &b1, &g2, &b2}) t->requires_grad_();
  tensord::Conv2dOptions same;
  same.padding = {1};
  tensord::BatchNormOptions train;
  train.training = true;
  auto once = [&] {
    auto h = tensord::batch_norm(tensord::conv2d(x, w1, std::nullopt, same), m1,
                                 v1, g1, b1, train)
                 .relu();
    h = tensord::batch_norm(tensord::conv2d(h, w2, std::nullopt, same), m2, v2,
                            g2, b2, train);
    auto s = (h + x).relu().sum();
    s.backward();
    (void)s.item<float>();
  };
  once();
  const auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) once();
  return Seconds(t0, Clock::now()) * 1e3 / steps;
}

// The same step in local PyTorch: {ms per step, conv GFLOP/s, BLAS}.
struct TorchResult {
  double ms = 0, block_ms = 0;
  double conv_gflops[2][2] = {};  // [kConvs][backward]
  std::string blas;
};
TorchResult TorchStep(const std::string& device, int batch, int steps,
                      int threads, int conv_steps) {
  std::ostringstream script;
  script << R"PY(
import time, torch, torch.nn as nn, torch.nn.functional as F
torch.set_num_threads()PY"
         << threads << R"PY()
dev = torch.device(")PY"
         << device << R"PY(")
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5); self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5); self.fc1 = nn.Linear(400, 120)
        self.fc2 = nn.Linear(120, 84); self.fc3 = nn.Linear(84, 10)
    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x))); x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1); x = F.relu(self.fc1(x)); x = F.relu(self.fc2(x))
        return self.fc3(x)
torch.manual_seed(1)
net = Net().to(dev); opt = torch.optim.SGD(net.parameters(), lr=0.001, momentum=0.9)
b, steps = )PY"
         << batch << ", " << steps << R"PY(
x = torch.randn(b, 3, 32, 32, device=dev); y = torch.arange(b, device=dev) % 10
running = 0.0
def step():
    global running
    opt.zero_grad(); loss = F.cross_entropy(net(x), y); loss.backward(); opt.step()
    running += loss.item()
for _ in range(3): step()
t0 = time.perf_counter()
for _ in range(steps): step()
ms = (time.perf_counter() - t0) * 1e3 / steps
gf = []
for c, hw, oc in ((3, 32, 6), (6, 14, 16)):
    for backward in (False, True):
        cx = torch.randn(64, c, hw, hw, device=dev, requires_grad=backward)
        cw = torch.randn(oc, c, 5, 5, device=dev, requires_grad=backward)
        cb = torch.randn(oc, device=dev, requires_grad=backward)
        def once():
            for _ in range(8):
                s = F.conv2d(cx, cw, cb).sum()
                if backward: s.backward()
            s.item()
        once()
        t0 = time.perf_counter()
        for _ in range()PY"
         << conv_steps << R"PY(): once()
        flops = 2.0 * 64 * oc * (hw - 4) ** 2 * c * 25 * (3 if backward else 1)
        gf.append(flops * 8 * )PY"
         << conv_steps << R"PY( / (time.perf_counter() - t0) / 1e9)
x = torch.randn(32, 16, 32, 32, device=dev, requires_grad=True)
w1 = (torch.randn(16, 16, 3, 3, device=dev) * 0.1).requires_grad_()
w2 = (torch.randn(16, 16, 3, 3, device=dev) * 0.1).requires_grad_()
g1, b1, g2, b2 = [torch.full((16,), v, device=dev, requires_grad=True) for v in (1., 0., 1., 0.)]
m1, v1, m2, v2 = [torch.full((16,), v, device=dev) for v in (0., 1., 0., 1.)]
def block():
    h = F.relu(F.batch_norm(F.conv2d(x, w1, padding=1), m1, v1, g1, b1, training=True))
    h = F.batch_norm(F.conv2d(h, w2, padding=1), m2, v2, g2, b2, training=True)
    s = F.relu(h + x).sum(); s.backward(); s.item()
block()
t0 = time.perf_counter()
for _ in range()PY"
         << conv_steps << R"PY(): block()
block_ms = (time.perf_counter() - t0) * 1e3 / )PY"
         << conv_steps << R"PY(
import re
blas = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
blas = blas.group(1) if blas else "unknown"
if "USE_MKLDNN=ON" in torch.__config__.show(): blas += "+oneDNN"
print(ms, *gf, block_ms, blas)
)PY";
  const std::string path = "/tmp/tensord_train_bench.py";
  FILE* f = std::fopen(path.c_str(), "w");
  std::fputs(script.str().c_str(), f);
  std::fclose(f);
  TorchResult r;
  FILE* p = popen((absl::GetFlag(FLAGS_python) + " " + path).c_str(), "r");
  char line[512] = {0};
  if (p != nullptr && std::fgets(line, sizeof(line), p) != nullptr) {
    std::istringstream in(line);
    in >> r.ms >> r.conv_gflops[0][0] >> r.conv_gflops[0][1] >>
        r.conv_gflops[1][0] >> r.conv_gflops[1][1] >> r.block_ms >> r.blas;
  }
  if (p != nullptr) pclose(p);
  return r;
}

// One row of the table: tensord's figure beside the reference's (PyTorch's,
// or one session's in the sessions row), in ms (lower is better) or GF/s.
struct Row {
  std::string name;
  int batch = 0;
  double ours = 0, theirs = 0;
  bool ms = true;
  std::string reference = "torch";  // the JSON key of `theirs`
  double ratio() const { return ours / theirs; }
};

void PrintRow(const Row& row, const char* suffix = "") {
  if (row.ms) {
    std::printf("%-22s %8d %9.3f ms %9.3f ms %8.2f%s\n", row.name.c_str(),
                row.batch, row.ours, row.theirs, row.ratio(), suffix);
  } else {
    std::printf("%-22s %8d %8.2f GF/s %8.2f GF/s %8.2f%s\n", row.name.c_str(),
                row.batch, row.ours, row.theirs, row.ratio(), suffix);
  }
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct Settings {
  std::string device, address, metrics;
  int steps = 1, repeats = 1, threads = 1, sessions = 0;
  std::vector<int> batches;
  bool conv_rows[2] = {};
  bool block = true;
};

// One round: every row, each side's best of --repeats runs, interleaved.
// Prints the rows as they come; `blas` gets torch's BLAS.
std::vector<Row> MeasureRound(const tensord::Client& client, const Settings& s,
                              std::string& blas) {
  std::vector<Row> rows;
  auto add = [&](Row row, const char* suffix = "") {
    PrintRow(row, suffix);
    rows.push_back(std::move(row));
  };
  for (int batch : s.batches) {
    double best_ours = 1e30, best_compiled = 1e30, best_torch = 1e30;
    for (int r = 0; r < s.repeats; ++r) {
      best_ours =
          std::min(best_ours, TensordStep(client, s.device, batch, s.steps));
      TorchResult t = TorchStep(s.device, batch, s.steps, s.threads, 1);
      if (t.ms > 0) best_torch = std::min(best_torch, t.ms);
      blas = t.blas;
      best_compiled = std::min(
          best_compiled, TensordStep(client, s.device, batch, s.steps, true));
    }
    add({"train_step", batch, best_ours, best_torch});
    add({"train_step_compiled", batch, best_compiled, best_torch});
  }
  double ours[2][2] = {}, theirs[2][2] = {};
  double block_ours = 1e30, block_theirs = 1e30;
  for (int r = 0; r < s.repeats; ++r) {
    for (int c = 0; c < 2; ++c) {
      if (!s.conv_rows[c]) continue;
      for (int backward = 0; backward < 2; ++backward) {
        ours[c][backward] = std::max(
            ours[c][backward],
            TensordConv(client, s.device, s.steps, kConvs[c], backward));
      }
    }
    if (s.block) {
      block_ours = std::min(block_ours, TensordBlock(client, s.device, s.steps));
    }
    if (!s.conv_rows[0] && !s.conv_rows[1] && !s.block) break;
    const TorchResult t = TorchStep(s.device, 1, 1, s.threads, s.steps);
    if (t.block_ms > 0) block_theirs = std::min(block_theirs, t.block_ms);
    for (int c = 0; c < 2; ++c) {
      for (int backward = 0; backward < 2; ++backward) {
        theirs[c][backward] =
            std::max(theirs[c][backward], t.conv_gflops[c][backward]);
      }
    }
  }
  for (int c = 0; c < 2; ++c) {
    if (!s.conv_rows[c]) continue;
    for (int backward = 0; backward < 2; ++backward) {
      add({std::string(kConvs[c].name) + (backward ? "_fwd_bwd" : "_forward"),
           64, ours[c][backward], theirs[c][backward], false});
    }
  }
  if (s.block) add({"resnet_block_fwd_bwd", 32, block_ours, block_theirs});
  // Sessions at once against one session, interleaved; the library's
  // counters over these runs alone.
  if (s.sessions > 1) {
    double one = 0, all = 0;
    std::vector<uint64_t> counters;  // deltas; empty: unread
    for (int r = 0; r < s.repeats; ++r) {
      one = std::max(one,
                     TensordConv(client, s.device, s.steps, kConvs[1], false));
      const std::vector<uint64_t> before =
          s.metrics.empty() ? std::vector<uint64_t>{}
                            : LibraryCounters(s.metrics, s.device);
      all = std::max(all,
                     ConcurrentConv(s.address, s.device, s.steps, s.sessions));
      const std::vector<uint64_t> after =
          before.empty() ? std::vector<uint64_t>{}
                         : LibraryCounters(s.metrics, s.device);
      if (after.size() == before.size() && !after.empty()) {
        counters.resize(after.size());
        for (size_t i = 0; i < after.size(); ++i) {
          counters[i] += after[i] - before[i];
        }
      }
    }
    Row row{"conv2_fwd_" + std::to_string(s.sessions) + "_sessions", 64, all,
            one, false, "one_session"};
    add(row, "  (summed; beside one session's)");
    if (!counters.empty()) {
      std::printf("library counters over the sessions row (%s):",
                  s.device.c_str());
      for (size_t i = 0; i < counters.size(); ++i) {
        std::printf(" %s %llu", kLibraryCounters[i],
                    static_cast<unsigned long long>(counters[i]));
      }
      std::printf("\n");
    }
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  tensord::server::ParseProgramFlags(
      argc, argv,
      {.name = "train_bench",
       .summary = "seed 001's training step through tensord beside local "
                  "PyTorch, interleaved, at each batch size; conv2d GFLOP/s "
                  "(seed 001's two convolutions at batch 64, forward and "
                  "with both gradients) beside PyTorch's. Prints a table "
                  "per round, the medians over --rounds, and one JSON line.",
       .example = "train_bench --address 127.0.0.1:50051 --rounds 5",
       .flag_files = {__FILE__}});
  Settings s;
  s.steps = std::max(1, absl::GetFlag(FLAGS_steps));
  s.repeats = std::max(1, absl::GetFlag(FLAGS_repeats));
  s.threads = std::max(1, absl::GetFlag(FLAGS_threads));
  s.sessions = absl::GetFlag(FLAGS_sessions);
  s.device = absl::GetFlag(FLAGS_device);
  s.metrics = absl::GetFlag(FLAGS_metrics);
  s.block = absl::GetFlag(FLAGS_block);
  const int rounds = std::max(1, absl::GetFlag(FLAGS_rounds));
  for (absl::string_view b :
       absl::StrSplit(absl::GetFlag(FLAGS_batches), ',')) {
    int v = 0;
    if (absl::SimpleAtoi(b, &v) && v > 0) s.batches.push_back(v);
  }
  for (absl::string_view c : absl::StrSplit(absl::GetFlag(FLAGS_convs), ',')) {
    for (int k = 0; k < 2; ++k) s.conv_rows[k] |= c == kConvs[k].name;
  }
  std::unique_ptr<tensord::server::Server> server;
  s.address = tensord::bench::BenchAddress(
      "train_bench", absl::GetFlag(FLAGS_address), &server);
  if (s.address.empty()) return 1;
  tensord::Client client(s.address);
  const std::vector<uint64_t> counters_before =
      s.metrics.empty() ? std::vector<uint64_t>{}
                        : LibraryCounters(s.metrics, s.device);
  std::string blas;
  std::vector<std::vector<Row>> all;  // per round
  for (int r = 0; r < rounds; ++r) {
    if (rounds > 1) std::printf("round %d of %d\n", r + 1, rounds);
    std::printf("%-22s %8s %12s %12s %8s\n", "measurement", "batch", "tensord",
                "torch", "ratio");
    all.push_back(MeasureRound(client, s, blas));
  }
  // Per row: the median of each side and of the rounds' ratios (the ratio
  // of medians can hide a noisy round), with the ratios' range.
  std::vector<Row> medians = all[0];
  std::vector<std::pair<double, double>> ranges(medians.size());
  std::vector<double> median_ratios(medians.size());
  for (size_t i = 0; i < medians.size(); ++i) {
    std::vector<double> ours, theirs, ratios;
    for (const std::vector<Row>& round : all) {
      ours.push_back(round[i].ours);
      theirs.push_back(round[i].theirs);
      ratios.push_back(round[i].ratio());
    }
    medians[i].ours = Median(ours);
    medians[i].theirs = Median(theirs);
    ranges[i] = {*std::min_element(ratios.begin(), ratios.end()),
                 *std::max_element(ratios.begin(), ratios.end())};
    const double median_ratio = Median(ratios);
    median_ratios[i] = median_ratio;
    if (rounds > 1) {
      if (i == 0) {
        std::printf("medians over %d rounds (ratio: the rounds' median, "
                    "their range)\n%-22s %8s %12s %12s %8s\n",
                    rounds, "measurement", "batch", "tensord", "torch",
                    "ratio");
      }
      const std::string range = absl::StrFormat(
          "  (median of ratios %.2f, %.2f-%.2f)", median_ratio,
          ranges[i].first, ranges[i].second);
      PrintRow(medians[i], range.c_str());
    }
  }
  std::string json = absl::StrFormat(
      "{\"bench\":\"train_bench\",\"rounds\":%d,\"rows\":[", rounds);
  for (size_t i = 0; i < medians.size(); ++i) {
    const Row& row = medians[i];
    const char* unit = row.ms ? "ms" : "gflops";
    if (i > 0) json += ',';
    json += absl::StrFormat(
        "{\"row\":\"%s\",\"batch\":%d,\"tensord_%s\":%f,\"%s_%s\":%f,"
        "\"ratio_median\":%f,\"ratio_min\":%f,\"ratio_max\":%f}",
        row.name, row.batch, unit, row.ours, row.reference, unit, row.theirs,
        median_ratios[i], ranges[i].first, ranges[i].second);
  }
  json += "],\"torch_blas\":\"" + blas + "\"}";
  if (!s.metrics.empty()) {
    const std::vector<uint64_t> after = LibraryCounters(s.metrics, s.device);
    if (counters_before.empty() || after.empty()) {
      std::printf("library counters: /metrics at %s unreadable\n",
                  s.metrics.c_str());
    } else {
      std::printf("library counters over the run (%s):", s.device.c_str());
      for (size_t i = 0; i < after.size(); ++i) {
        std::printf(
            " %s %llu", kLibraryCounters[i],
            static_cast<unsigned long long>(after[i] - counters_before[i]));
      }
      std::printf("\n");
    }
  }
  std::printf("torch BLAS: %s; torch threads: %d\n%s\n", blas.c_str(),
              s.threads, json.c_str());
  return 0;
}
