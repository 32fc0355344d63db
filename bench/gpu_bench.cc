// gpu_bench: the GPU figures of issue 3, as one JSON object on stdout.
//
//   * matmul TFLOP/s for n = 1024 ... 8192 in float32 (exact), TF32,
//     bfloat16 and float16, through the service (an in-process tensord on loopback TCP,
//     driven by the client library: operands made with rand on the GPU,
//     `iterations` matmuls queued back to back, then a wait by fetching one
//     element of the last product) and for the cuBLAS kernel alone
//     (in-process, CUDA events), with their ratio;
//   * upload (client -> GPU tensor) and fetch (GPU tensor -> client) GB/s,
//     and the same to and from the server's `cpu` (the wire alone).
//
// Without a GPU (or in a build without CUDA) it prints
// {"skipped": "no CUDA device: <why>"} and exits 0. A table goes to stderr.
//
//   gpu_bench [--sizes 1024,2048,4096,8192] [--min-seconds 1]
//             [--transfer-mib 256] [--device 0]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "core/runtime/device_registry.h"
#include "server/program_flags.h"
#include "server/server.h"
#include "tensord/client.h"
#ifdef TENSORD_WITH_CUDA
#include "core/cuda/cuda_bench.h"
#endif

ABSL_FLAG(std::string, sizes, "1024,2048,4096,8192", "matrix sizes n");
ABSL_FLAG(double, min_seconds, 1.0,
          "time each (size, precision) for at least this long");
ABSL_FLAG(int, transfer_mib, 256, "bytes per upload/fetch measurement, MiB");
ABSL_FLAG(int, device, 0, "which GPU (cuda:<i>)");

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

struct Server {
  std::unique_ptr<tensord::server::Server> server;
  std::string summary;
  bool has_gpu = false;
};

// An in-process tensord serving the GPUs, exact float32 or with TF32.
Server StartServer(bool allow_tf32) {
  Server s;
  tensord::core::AcceleratorDiscovery found =
      tensord::core::DiscoverAccelerators({.allow_tf32 = allow_tf32});
  s.summary = found.summary;
  s.has_gpu = !found.devices.empty();
  if (!s.has_gpu) return s;
  tensord::server::ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.runtime.extra_devices = std::move(found.devices);
  auto started = tensord::server::Server::Start(std::move(options));
  if (!started.ok()) {
    s.summary = std::string(started.status().message());
    s.has_gpu = false;
    return s;
  }
  s.server = std::move(*started);
  return s;
}

// Seconds per matmul of two n x n `dtype` tensors made on `dev` by rand,
// through the service.
double ServiceMatMul(tensord::Client& client, const tensord::Device& dev, int n,
                     tensord::DType dtype, double min_seconds) {
  auto a = client.rand({n, n}, dev, 1);
  auto b = client.rand({n, n}, dev, 2);
  if (dtype != tensord::DType::kFloat32) {
    a = a.to(dtype);
    b = b.to(dtype);
  }
  auto wait = [](const tensord::Tensor& t) {
    (void)t.narrow(0, 0, 1).narrow(1, 0, 1).fetch_bytes();
  };
  wait(a.matmul(b));  // warm-up: cuBLAS heuristics, pool growth
  int iterations = 1;
  for (;;) {
    const auto start = Clock::now();
    tensord::Tensor last = a.matmul(b);
    for (int i = 1; i < iterations; ++i) last = a.matmul(b);
    wait(last);
    const double s = Seconds(start, Clock::now());
    if (s >= min_seconds || iterations >= (1 << 16)) return s / iterations;
    iterations = std::max(iterations * 2,
                          static_cast<int>(iterations * min_seconds / s * 1.2));
  }
}

}  // namespace

int main(int argc, char** argv) {
  tensord::server::ParseProgramFlags(
      argc, argv,
      {.name = "gpu_bench",
       .summary =
           "GPU figures: matmul TFLOP/s in float32, TF32 and bfloat16 "
           "through an in-process tensord and for the cuBLAS kernel alone, "
           "and upload/fetch GB/s; one JSON object on stdout, a table on "
           "stderr. Without a GPU it prints {\"skipped\": ...} and exits 0.",
       .example = "gpu_bench --sizes 1024,4096 --min-seconds 1 --device 0",
       .flag_files = {__FILE__}});
  std::vector<int> sizes;
  for (absl::string_view piece :
       absl::StrSplit(absl::GetFlag(FLAGS_sizes), ',', absl::SkipEmpty())) {
    int n = 0;
    if (!absl::SimpleAtoi(piece, &n) || n <= 0) {
      std::fprintf(stderr, "gpu_bench: bad --sizes entry '%s'\n",
                   std::string(piece).c_str());
      return 2;
    }
    sizes.push_back(n);
  }
  const double min_seconds = absl::GetFlag(FLAGS_min_seconds);
  const int ordinal = absl::GetFlag(FLAGS_device);
  const std::string dev_name = "cuda:" + std::to_string(ordinal);

  Server exact = StartServer(false);
  if (!exact.has_gpu) {
    std::printf("{\"skipped\": \"no CUDA device: %s\"}\n",
                JsonEscape(exact.summary).c_str());
    return 0;
  }

  struct Row {
    int n;
    std::string precision;
    double service_tflops = 0, kernel_tflops = 0;
  };
  std::vector<Row> rows;
  std::string model, error;
  double upload_gbps = 0, fetch_gbps = 0;
  double cpu_upload_gbps = 0, cpu_fetch_gbps = 0;
  try {
    {
      tensord::Client client(exact.server->address());
      for (const auto& d : client.devices()) {
        if (d.name == dev_name) model = d.model;
      }
      // Transfers: one tensor of transfer_mib MiB up and back, to the GPU
      // and to the server's `cpu` (the same wire without the device copy),
      // best of three.
      const size_t bytes =
          static_cast<size_t>(absl::GetFlag(FLAGS_transfer_mib)) << 20;
      std::string data(bytes, '\x01');
      const int64_t elems = static_cast<int64_t>(bytes / 4);
      for (auto [dev, up_gbps, down_gbps] :
           {std::tuple{dev_name, &upload_gbps, &fetch_gbps},
            std::tuple{std::string("cpu"), &cpu_upload_gbps,
                       &cpu_fetch_gbps}}) {
        for (int i = 0; i < 4; ++i) {
          auto t0 = Clock::now();
          auto up =
              client.FromBytes(tensord::DType::kFloat32, {elems}, data, dev);
          const double up_s = Seconds(t0, Clock::now());
          t0 = Clock::now();
          const std::string back = up.fetch_bytes();
          const double down_s = Seconds(t0, Clock::now());
          if (back != data) error = "fetched bytes differ from the uploaded ones";
          if (i == 0) continue;  // warm-up
          *up_gbps = std::max(*up_gbps, bytes / up_s / 1e9);
          *down_gbps = std::max(*down_gbps, bytes / down_s / 1e9);
        }
      }

      for (int n : sizes) {
        for (auto [name, dtype] :
             {std::pair{"float32", tensord::DType::kFloat32},
              std::pair{"bfloat16", tensord::DType::kBFloat16},
              std::pair{"float16", tensord::DType::kFloat16}}) {
          Row r{n, name};
          const double s =
              ServiceMatMul(client, dev_name, n, dtype, min_seconds);
          r.service_tflops = 2.0 * n * n * static_cast<double>(n) / s / 1e12;
          rows.push_back(r);
        }
      }
    }
    exact.server.reset();
    Server tf32 = StartServer(true);
    if (tf32.has_gpu) {
      tensord::Client client(tf32.server->address());
      for (int n : sizes) {
        Row r{n, "tf32"};
        const double s = ServiceMatMul(client, dev_name, n,
                                       tensord::DType::kFloat32, min_seconds);
        r.service_tflops = 2.0 * n * n * static_cast<double>(n) / s / 1e12;
        rows.push_back(r);
      }
    }
  } catch (const std::exception& e) {
    error = e.what();
  }

#ifdef TENSORD_WITH_CUDA
  namespace cuda = tensord::core::cuda;
  for (Row& r : rows) {
    const cuda::BenchPrecision p =
        r.precision == "float32" ? cuda::BenchPrecision::kFloat32
        : r.precision == "tf32"  ? cuda::BenchPrecision::kTF32
        : r.precision == "float16" ? cuda::BenchPrecision::kFloat16
                                   : cuda::BenchPrecision::kBFloat16;
    const double flop = 2.0 * r.n * r.n * static_cast<double>(r.n);
    // About min_seconds of kernels, from the service's own rate.
    const int iterations = std::clamp(
        static_cast<int>(min_seconds * r.service_tflops * 1e12 / flop), 3,
        10000);
    auto t = cuda::TimeCublasMatMul(ordinal, r.n, p, iterations);
    if (t.ok()) {
      r.kernel_tflops = t->tflops;
    } else if (error.empty()) {
      error = t.status().ToString();
    }
  }
#endif

  std::fprintf(stderr, "%s (%s)\n%-6s %-9s %14s %14s %7s\n", dev_name.c_str(),
               model.c_str(), "n", "precision", "service_TFLOPs",
               "kernel_TFLOPs", "ratio");
  std::string json = "{\"benchmark\":\"gpu\",\"device\":\"" + dev_name +
                     "\",\"model\":\"" + JsonEscape(model) + "\",\"matmul\":[";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const double ratio =
        r.kernel_tflops > 0 ? r.service_tflops / r.kernel_tflops : 0;
    std::fprintf(stderr, "%-6d %-9s %14.2f %14.2f %7.3f\n", r.n,
                 r.precision.c_str(), r.service_tflops, r.kernel_tflops, ratio);
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "%s{\"n\":%d,\"precision\":\"%s\",\"service_tflops\":%.3f,"
                  "\"kernel_tflops\":%.3f,\"service_over_kernel\":%.4f}",
                  i == 0 ? "" : ",", r.n, r.precision.c_str(), r.service_tflops,
                  r.kernel_tflops, ratio);
    json += buf;
  }
  char buf[256];
  std::snprintf(
      buf, sizeof(buf),
      "],\"upload_gbps\":%.3f,\"fetch_gbps\":%.3f,\"cpu_upload_gbps\":%.3f,"
      "\"cpu_fetch_gbps\":%.3f,\"transfer_mib\":%d",
      upload_gbps, fetch_gbps, cpu_upload_gbps, cpu_fetch_gbps,
      absl::GetFlag(FLAGS_transfer_mib));
  json += buf;
  if (!error.empty()) json += ",\"error\":\"" + JsonEscape(error) + "\"";
  json += "}";
  std::fprintf(stderr,
               "%s: upload %.2f GB/s, fetch %.2f GB/s; cpu: upload %.2f GB/s, "
               "fetch %.2f GB/s\n",
               dev_name.c_str(), upload_gbps, fetch_gbps, cpu_upload_gbps,
               cpu_fetch_gbps);
  std::printf("%s\n", json.c_str());
  return error.empty() ? 0 : 1;
}
