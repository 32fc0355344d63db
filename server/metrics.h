// Prometheus metrics for the daemon.
//
// RPC outcomes are recorded by the service (once per RPC, where its status is
// mapped); device and session gauges are read from the Runtime when scraped,
// so they are never stale. RenderPrometheus() writes the text exposition
// format (version 0.0.4). MetricsHttpServer serves it on /metrics.
// Thread-safety: RecordRpc and RenderPrometheus may be called concurrently.
#ifndef TENSORD_SERVER_METRICS_H_
#define TENSORD_SERVER_METRICS_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/base/refusal.h"
#include "core/runtime/runtime.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace tensord::server {

class Metrics {
 public:
  // Upper bounds (seconds) of the latency histogram buckets.
  static constexpr std::array<double, 12> kBuckets = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
      0.01,   0.025,   0.05,   0.1,   1.0,    10.0};

  // `code` is the gRPC status code name, e.g. "OK", "NOT_FOUND".
  void RecordRpc(std::string_view method, std::string_view code,
                 double seconds);
  // A request refused for `why` (core/base/refusal.h), counted in
  // tensord_refusals_total{reason="bad_token"|"no_token"|"session_quota"|
  // "device_budget"}.
  void RecordRefusal(core::Refusal why);
  std::string RenderPrometheus(core::Runtime& runtime) const;

 private:
  struct Histogram {
    std::array<uint64_t, kBuckets.size()> buckets{};
    uint64_t count = 0;
    double sum = 0;
  };
  mutable absl::Mutex mu_;
  std::map<std::pair<std::string, std::string>, uint64_t> rpcs_
      ABSL_GUARDED_BY(mu_);  // (method, code) -> count
  std::map<std::string, Histogram> latency_ ABSL_GUARDED_BY(mu_);  // method
  std::array<uint64_t, 5> refusals_ ABSL_GUARDED_BY(mu_){};        // by Refusal
};

// Serves GET /metrics over HTTP (cpp-httplib) on its own thread.
class MetricsHttpServer {
 public:
  // `listen` is host:port (port 0 picks one). `metrics` and `runtime` are
  // borrowed and must outlive the server. UNAVAILABLE if it cannot bind.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& listen, const Metrics* metrics,
      core::Runtime* runtime);
  ~MetricsHttpServer();  // stops serving and joins the thread

  int port() const { return port_; }

 private:
  MetricsHttpServer() = default;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace tensord::server

#endif  // TENSORD_SERVER_METRICS_H_
