#include "server/metrics.h"

#include <httplib.h>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/absl_compat.h"

namespace tensord::server {

void Metrics::RecordRpc(std::string_view method, std::string_view code,
                        double seconds) {
  absl::MutexLock lock(&mu_);
  ++rpcs_[{std::string(method), std::string(code)}];
  Histogram& h = latency_[std::string(method)];
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    if (seconds <= kBuckets[i]) ++h.buckets[i];
  }
  ++h.count;
  h.sum += seconds;
}

void Metrics::RecordRefusal(core::Refusal why) {
  absl::MutexLock lock(&mu_);
  ++refusals_[static_cast<size_t>(why)];
}

std::string Metrics::RenderPrometheus(core::Runtime& runtime) const {
  std::string out;
  auto header = [&out](const char* name, const char* type, const char* help) {
    absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ",
                    type, "\n");
  };
  {
    absl::MutexLock lock(&mu_);
    header("tensord_rpcs_total", "counter",
           "RPCs finished, by method and code.");
    for (const auto& [key, count] : rpcs_) {
      absl::StrAppend(&out, "tensord_rpcs_total{method=\"", key.first,
                      "\",code=\"", key.second, "\"} ", count, "\n");
    }
    header("tensord_refusals_total", "counter",
           "Requests refused, by reason: bad_token, no_token, session_quota, "
           "device_budget (each also logged, rate-limited, with the peer).");
    for (core::Refusal r : core::kRefusals) {
      absl::StrAppend(&out, "tensord_refusals_total{reason=\"",
                      core::ToAbsl(core::RefusalName(r)), "\"} ",
                      refusals_[static_cast<size_t>(r)], "\n");
    }
    header("tensord_rpc_duration_seconds", "histogram",
           "RPC latency from arrival to status, by method.");
    for (const auto& [method, h] : latency_) {
      for (size_t i = 0; i < kBuckets.size(); ++i) {
        absl::StrAppend(&out, "tensord_rpc_duration_seconds_bucket{method=\"",
                        method, "\",le=\"", kBuckets[i], "\"} ", h.buckets[i],
                        "\n");
      }
      absl::StrAppend(&out, "tensord_rpc_duration_seconds_bucket{method=\"",
                      method, "\",le=\"+Inf\"} ", h.count, "\n");
      absl::StrAppend(&out, "tensord_rpc_duration_seconds_sum{method=\"",
                      method, "\"} ", absl::StrFormat("%.9f", h.sum), "\n");
      absl::StrAppend(&out, "tensord_rpc_duration_seconds_count{method=\"",
                      method, "\"} ", h.count, "\n");
    }
  }
  const std::vector<core::DeviceStatus> devices = runtime.ListDevices();
  struct Gauge {
    const char* name;
    const char* help;
    uint64_t (*value)(const core::DeviceStatus&);
  };
  const Gauge gauges[] = {
      {"tensord_device_live_tensors", "Live tensors on the device.",
       [](const core::DeviceStatus& d) { return d.live_tensors; }},
      {"tensord_device_held_bytes", "Bytes held by tensord on the device.",
       [](const core::DeviceStatus& d) { return d.held_bytes; }},
      {"tensord_device_budget_bytes", "Bytes tensord may hold on the device.",
       [](const core::DeviceStatus& d) { return d.budget_bytes; }},
      {"tensord_device_memory_total_bytes", "Memory the device has.",
       [](const core::DeviceStatus& d) { return d.properties.total_memory; }},
      {"tensord_device_memory_free_bytes",
       "Memory free on the device, as the OS or driver reports it.",
       [](const core::DeviceStatus& d) { return d.properties.free_memory; }},
      {"tensord_device_allocation_failures_total",
       "Allocations refused for the memory budget or by the device.",
       [](const core::DeviceStatus& d) { return d.allocation_failures; }},
      {"tensord_device_library_prepared_total",
       "Library calls prepared (oneDNN primitives, cuDNN descriptors and "
       "algorithms): cache misses.",
       [](const core::DeviceStatus& d) {
         return d.properties.library_prepared;
       }},
      {"tensord_device_library_reused_total",
       "Library calls run from the cache of prepared calls.",
       [](const core::DeviceStatus& d) { return d.properties.library_reused; }},
      {"tensord_device_library_evicted_total",
       "Prepared library calls dropped to keep the cache bounded.",
       [](const core::DeviceStatus& d) {
         return d.properties.library_evicted;
       }},
      {"tensord_device_library_reorders_total",
       "Layout conversions the library ran (plain to blocked and back).",
       [](const core::DeviceStatus& d) {
         return d.properties.library_reorders;
       }},
      {"tensord_device_library_team_calls_total",
       "Library calls run on the device's team of threads.",
       [](const core::DeviceStatus& d) {
         return d.properties.library_team_calls;
       }},
      {"tensord_device_library_alone_calls_total",
       "Library calls run on their calling thread alone (below the grain, "
       "or the team was busy).",
       [](const core::DeviceStatus& d) {
         return d.properties.library_alone_calls;
       }},
      {"tensord_device_library_contended_total",
       "Library calls that found the team busy with another call and ran "
       "alone instead of starting a second team.",
       [](const core::DeviceStatus& d) {
         return d.properties.library_contended;
       }},
  };
  for (const Gauge& g : gauges) {
    const bool counter = std::string_view(g.name).ends_with("_total");
    header(g.name, counter ? "counter" : "gauge", g.help);
    for (const core::DeviceStatus& d : devices) {
      absl::StrAppend(&out, g.name, "{device=\"", d.name, "\"} ", g.value(d),
                      "\n");
    }
  }
  header("tensord_sessions", "gauge", "Open client sessions.");
  absl::StrAppend(&out, "tensord_sessions ", runtime.session_count(), "\n");
  return out;
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& listen, const Metrics* metrics, core::Runtime* runtime) {
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(listen.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid metrics address '", listen, "': expected host:port"));
  }
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer());
  server->http_ = std::make_unique<httplib::Server>();
  server->http_->Get("/metrics", [metrics, runtime](const httplib::Request&,
                                                    httplib::Response& res) {
    res.set_content(metrics->RenderPrometheus(*runtime),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  server->port_ = port == 0
                      ? server->http_->bind_to_any_port(host)
                      : (server->http_->bind_to_port(host, port) ? port : -1);
  if (server->port_ <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for metrics on '", listen, "'"));
  }
  httplib::Server* http = server->http_.get();
  server->thread_ = std::thread([http] { http->listen_after_bind(); });
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (http_ != nullptr) http_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace tensord::server
