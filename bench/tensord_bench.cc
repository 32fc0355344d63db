// tensord-bench: what a remote tensor costs, next to the floors, in one run.
//
//   (a) bare gRPC empty unary round trip (bench/tensord_bench/echo.proto)
//   (b) tensord round trips: Create (3 elements), Binary mul, fetch (3
//       elements: the unary Read the client library sends for tensors of
//       up to 1 MiB; the streaming Fetch beside it), each one RPC through
//       raw stubs: p50/p99, interleaved in rounds with (a)
//   (c) small-op throughput with --threads client threads (ops/s), beside
//       bare unary throughput with the same threads
//   (d) upload and fetch of --sizes float32 bytes through the client library,
//       in GB/s, beside a bare gRPC stream of the same bytes in the same
//       chunk size and beside memcpy; on TCP also through shared memory
//       (upload_shm_*, fetch_shm_*), as ratios of the socket rows
//   (e) (b) and (d) over TCP loopback and over a unix-domain socket
//   (f) CPU matmul GFLOP/s through the service (rand on the device, matmul;
//       the RPC returns when the product is done) for --matmul-sizes, one
//       RPC per matmul (over TCP and over the unix socket) and many in one
//       Execute batch, beside the floor:
//       cblas_sgemm alone in a separate process (this program re-executed
//       with --blas_floor_child: no server, no gRPC thread alive in it),
//       with the kernel and thread count the daemon uses, interleaved in
//       rounds with the service measurements
//   (g) CPU kernel throughput through the service for a --kernel-elements
//       float32 tensor: exp, relu, add, sum, softmax over rows and a cast
//       to float16, each run many times in one Execute batch (about 64 MiB
//       of traffic per kernel per round: the round trip amortized), as GB/s of
//       bytes read and written, beside memcpy of the same bytes in this process
//       (the memory floor)
//
// Servers run in this process on real sockets (one tensord and one echo
// server per transport). Prints a table, then one JSON line. Ratios are what
// matter on a shared machine; absolute numbers only on a quiet one.
#include <cblas.h>
#include <grpcpp/grpcpp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "core/cpu/blas.h"
#include "server/byte_size.h"
#include "server/program_flags.h"
#include "server/server.h"
#include "tensord/channel.h"
#include "tensord/client.h"
#include "tensord/v1/tensord.grpc.pb.h"
#include "bench/echo_service.h"
#include "tensord_bench/echo.grpc.pb.h"

ABSL_FLAG(int, iterations, 10000, "round trips per latency measurement");
ABSL_FLAG(int, threads, 8, "client threads for the throughput measurement");
ABSL_FLAG(double, seconds, 3.0, "duration of each throughput measurement");
ABSL_FLAG(std::string, sizes, "1MiB,64MiB,1GiB", "upload/fetch sizes");
ABSL_FLAG(std::string, matmul_sizes, "256,512,1024,2048,4096",
          "square matmul sizes for (f)");
ABSL_FLAG(std::string, blas_floor_child, "",
          "internal: 'n,reps' — time reps n x n cblas_sgemm calls, print "
          "GFLOP/s and exit (the honest floor of (f), run in its own "
          "process)");
ABSL_FLAG(int64_t, kernel_elements, int64_t{1} << 22,
          "float32 elements of the tensor (g)'s kernels run on");
ABSL_FLAG(std::string, only, "",
          "run only these parts, comma-separated: small (a-c), bulk (d), "
          "matmul (f), kernels (g); default all");
ABSL_FLAG(bool, quick, false,
          "tiny sizes and counts: checks the benchmark runs (CI smoke test)");

namespace {

using Clock = std::chrono::steady_clock;
namespace bench = ::tensord_bench;
namespace v1 = ::tensord::v1;
using tensord::bench_support::EchoService;

constexpr uint32_t kChunkBytes = 1 << 20;  // as the client's Upload and Fetch

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

struct Transport {
  std::string name;  // "tcp" or "unix"
  std::unique_ptr<grpc::Server> echo_server;
  std::unique_ptr<tensord::server::Server> tensord;
  std::shared_ptr<grpc::Channel> echo_channel;
  std::shared_ptr<grpc::Channel> tensord_channel;
};

std::shared_ptr<grpc::Channel> Dial(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(),
                                   args);
}

std::unique_ptr<Transport> StartTransport(const std::string& name,
                                          const std::string& echo_listen,
                                          const std::string& tensord_listen,
                                          EchoService* echo) {
  auto t = std::make_unique<Transport>();
  t->name = name;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(echo_listen, grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.RegisterService(echo);
  t->echo_server = builder.BuildAndStart();
  if (!t->echo_server) return nullptr;
  const std::string echo_address =
      name == "tcp" ? "127.0.0.1:" + std::to_string(port) : echo_listen;
  tensord::server::ServerOptions options;
  options.listen = tensord_listen;
  auto server = tensord::server::Server::Start(std::move(options));
  if (!server.ok()) {
    std::fprintf(stderr, "tensord-bench: %s\n",
                 std::string(server.status().message()).c_str());
    return nullptr;
  }
  t->tensord = std::move(*server);
  t->echo_channel = Dial(echo_address);
  t->tensord_channel = Dial(t->tensord->address());
  return t;
}

struct Row {
  std::string group, name, transport, unit;
  double value = 0, p99 = -1, ratio = -1;  // ratio: value over its floor
  std::string ratio_of;
};

struct Latency {
  double p50 = 0, p99 = 0;
};

Latency Percentiles(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  const size_t n = us.size();
  return {us[n / 2], us[std::min(n - 1, n * 99 / 100)]};
}

// Times each body `iterations` times, in kRounds interleaved rounds (every
// body runs a slice of its calls in every round), so that a shared
// machine's drift over the run lands on every body alike and their ratios
// stay fair. Returns one Latency per body, in order.
std::vector<Latency> MeasureInterleaved(
    int iterations, const std::vector<std::function<void()>>& bodies) {
  constexpr int kRounds = 10;
  const int per_round = std::max(1, iterations / kRounds);
  for (const auto& body : bodies) {
    for (int i = 0; i < std::max(50, iterations / 20); ++i) body();
  }
  std::vector<std::vector<double>> us(bodies.size());
  for (int round = 0; round < kRounds; ++round) {
    for (size_t b = 0; b < bodies.size(); ++b) {
      for (int i = 0; i < per_round; ++i) {
        const auto t0 = Clock::now();
        bodies[b]();
        us[b].push_back(Seconds(Clock::now() - t0) * 1e6);
      }
    }
  }
  std::vector<Latency> out;
  for (auto& samples : us) out.push_back(Percentiles(std::move(samples)));
  return out;
}

// Runs `body` on `threads` threads for `seconds`; returns calls per second.
double MeasureThroughput(int threads, double seconds,
                         const std::function<void()>& body) {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> calls{0};
  std::vector<std::thread> workers;
  const auto t0 = Clock::now();
  for (int i = 0; i < threads; ++i) {
    workers.emplace_back([&] {
      uint64_t n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        body();
        ++n;
      }
      calls += n;
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& w : workers) w.join();
  return static_cast<double>(calls.load()) / Seconds(Clock::now() - t0);
}

void Check(const grpc::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "tensord-bench: %s failed: %s\n", what,
                 s.error_message().c_str());
    std::exit(1);
  }
}

// (a), (b), (c) on one transport.
void SmallOps(Transport& t, int iterations, int threads, double seconds,
              std::vector<Row>& rows) {
  auto echo = bench::Echo::NewStub(t.echo_channel);
  auto stub = v1::TensorService::NewStub(t.tensord_channel);
  v1::OpenSessionResponse session;
  {
    grpc::ClientContext ctx;
    Check(stub->OpenSession(&ctx, {}, &session), "OpenSession");
  }
  auto ping = [&] {
    grpc::ClientContext ctx;
    bench::Empty req, resp;
    Check(echo->Ping(&ctx, req, &resp), "Ping");
  };
  v1::CreateRequest create;
  create.set_session(session.session());
  create.set_dtype(v1::INT64);
  create.add_shape(3);
  const int64_t values[3] = {1, 2, 3};
  create.set_data(std::string(reinterpret_cast<const char*>(values), sizeof values));
  auto make = [&] {
    grpc::ClientContext ctx;
    v1::TensorResponse resp;
    Check(stub->Create(&ctx, create, &resp), "Create");
    return resp.tensor().handle();
  };
  const uint64_t x = make();
  const uint64_t y = make();
  std::vector<uint64_t> made;
  made.reserve(static_cast<size_t>(iterations) * 3);
  v1::BinaryRequest mul;
  mul.set_session(session.session());
  mul.set_op(v1::MUL);
  mul.set_lhs(x);
  mul.set_rhs(y);
  auto multiply = [&] {
    grpc::ClientContext ctx;
    v1::TensorResponse resp;
    Check(stub->Binary(&ctx, mul, &resp), "Binary");
    return resp.tensor().handle();
  };
  // What the client library sends to fetch a tensor of up to 1 MiB: one
  // unary Read. The streaming Fetch (larger tensors) is timed beside it.
  v1::ReadRequest read;
  read.set_session(session.session());
  read.set_handle(x);
  auto read3 = [&] {
    grpc::ClientContext ctx;
    v1::FetchChunk chunk;
    Check(stub->Read(&ctx, read, &chunk), "Read");
  };
  v1::FetchRequest fetch;
  fetch.set_session(session.session());
  fetch.set_handle(x);
  auto fetch3_stream = [&] {
    grpc::ClientContext ctx;
    auto reader = stub->Fetch(&ctx, fetch);
    v1::FetchChunk chunk;
    while (reader->Read(&chunk)) {
    }
    Check(reader->Finish(), "Fetch");
  };
  const std::vector<Latency> l = MeasureInterleaved(
      iterations, {ping, [&] { made.push_back(make()); },
                   [&] { made.push_back(multiply()); }, read3, fetch3_stream});
  const Latency& bare = l[0];
  rows.push_back({"latency", "bare_unary", t.name, "us", bare.p50, bare.p99, 1,
                  "bare_unary"});
  const char* names[] = {"create_3", "mul", "fetch_3", "fetch_3_stream"};
  for (size_t i = 1; i < l.size(); ++i) {
    rows.push_back({"latency", names[i - 1], t.name, "us", l[i].p50, l[i].p99,
                    l[i].p50 / bare.p50, "bare_unary"});
  }
  // The PyTorch-like loop through the client library: two creates, a mul,
  // a fetch, and the three releases its RAII handles make — pipelined on
  // the session's command stream (the default) and as one unary call each
  // (ClientOptions::pipeline off, the path before issue 17), interleaved
  // with a bare unary call.
  tensord::Client client(t.tensord_channel);
  tensord::ClientOptions unary_options;
  unary_options.pipeline = false;
  tensord::Client unary(t.tensord_channel, unary_options);
  auto create_mul_fetch = [](const tensord::Client& c) {
    auto a = c.tensor<int64_t>({1, 2, 3});
    auto b = c.tensor<int64_t>({5, 8, 1});
    if ((a * b).fetch<int64_t>()[1] != 16) std::abort();
  };
  // A 100-op dependent chain ending in one fetch; and the same chain in
  // one Execute (the server's own per-op cost, without the stream's).
  auto chain = [](const tensord::Client& c) {
    auto x = c.tensor<float>({1, 2, 3});
    auto one = c.ones({3});
    for (int i = 0; i < 100; ++i) x = x + one;
    if (x.fetch<float>()[0] != 101) std::abort();
  };
  auto chain_batched = [](const tensord::Client& c) {
    auto x = c.tensor<float>({1, 2, 3});
    auto one = c.ones({3});
    tensord::Batch batch = c.batch();
    tensord::Batch::Value v = batch.add(x, one);
    for (int i = 1; i < 100; ++i) v = batch.add(v, one);
    batch.keep(v);
    if (batch.run()[v].fetch<float>()[0] != 101) std::abort();
  };
  {
    const std::vector<Latency> e = MeasureInterleaved(
        iterations, {ping, [&] { create_mul_fetch(client); },
                     [&] { create_mul_fetch(unary); }});
    const std::vector<Latency> c = MeasureInterleaved(
        std::max(20, iterations / 50),
        {ping, [&] { chain(client); }, [&] { chain(unary); },
         [&] { chain_batched(unary); }, [&] { chain_batched(client); }});
    const char* names[] = {"client_create_mul_fetch",
                           "client_create_mul_fetch_unary",
                           "client_chain100_fetch",
                           "client_chain100_fetch_unary",
                           "client_chain100_fetch_batched",
                           "client_chain100_fetch_batched_pipelined"};
    const Latency* got[] = {&e[1], &e[2], &c[1], &c[2], &c[3], &c[4]};
    const Latency* floor[] = {&e[0], &e[0], &c[0], &c[0], &c[0], &c[0]};
    for (int i = 0; i < 6; ++i) {
      rows.push_back({"latency", names[i], t.name, "us", got[i]->p50,
                      got[i]->p99, got[i]->p50 / floor[i]->p50,
                      "bare_unary (same rounds)"});
    }
  }
  // Free what the latency loops made (one session close).
  {
    grpc::ClientContext ctx;
    v1::CloseSessionRequest close;
    close.set_session(session.session());
    v1::CloseSessionResponse resp;
    Check(stub->CloseSession(&ctx, close, &resp), "CloseSession");
  }

  // (c) Throughput: each thread multiplies in its own session and releases.
  const double bare_ops = MeasureThroughput(threads, seconds, ping);
  rows.push_back({"throughput", "bare_unary", t.name, "calls/s", bare_ops, -1,
                  1, "bare_unary"});
  const double mul_ops = MeasureThroughput(threads, seconds, [&] {
    thread_local std::unique_ptr<tensord::Client> c;
    thread_local std::unique_ptr<tensord::Tensor> a, b;
    if (!c) {
      c = std::make_unique<tensord::Client>(t.tensord_channel);
      a = std::make_unique<tensord::Tensor>(c->tensor<int64_t>({1, 2, 3}));
      b = std::make_unique<tensord::Tensor>(c->tensor<int64_t>({5, 8, 1}));
      c->synchronize();  // made, before the raw stub names them
    }
    grpc::ClientContext ctx;
    v1::BinaryRequest req;
    req.set_session(c->session());
    req.set_op(v1::MUL);
    req.set_lhs(a->handle());
    req.set_rhs(b->handle());
    v1::TensorResponse resp;
    Check(stub->Binary(&ctx, req, &resp), "Binary");
    grpc::ClientContext rctx;
    v1::ReleaseRequest rel;
    rel.set_session(c->session());
    rel.set_handle(resp.tensor().handle());
    v1::ReleaseResponse rresp;
    Check(stub->Release(&rctx, rel, &rresp), "Release");
  });
  // Each mul op is two RPCs (the op and its release): compare per RPC.
  rows.push_back({"throughput", "mul_plus_release", t.name, "ops/s", mul_ops,
                  -1, 2 * mul_ops / bare_ops, "bare_unary (per RPC)"});
}

// (d) Upload and fetch through the client library beside bare streams of
// the same bytes in the same chunks, memcpy and (TCP group only, same host
// either way) shared memory. On a shared machine a single timing says little:
// every measurement of one size runs once per round, interleaved with the
// others, and the row reports its median round.
//   bare_stream_up / bare_stream_down: the floor, protobuf chunks over a
//                    bare gRPC stream; the server's reader drops each chunk,
//                    the client's reader copies each into a warm, reused
//                    buffer (no page faults: the cheapest place bytes can
//                    land, so nothing is flattered by a slow floor)
//   upload / fetch:  FromBytes(std::string) / fetch_bytes() through the socket
//                    (fetch returns a fresh std::string: its pages are mapped
//                    within the timing, as a user's would be)
//   fetch_into:      fetch_into() a reused buffer through the socket
//   upload_shm:      FromBytes through the automatic shared-memory path:
//                    memcpy into the region + the server's one copy
//   upload_shm_zc:   bytes already in the region (written in place)
//   fetch_shm:       fetch_bytes() through the region into a fresh string
//   fetch_shm_into:  fetch_into() a reused buffer through the region
//   fetch_shm_zc:    fetch_shared(): the bytes stay in the region
void Bulk(Transport& t, const std::vector<uint64_t>& sizes, std::vector<Row>& rows) {
  auto echo = bench::Echo::NewStub(t.echo_channel);
  tensord::Client client(t.tensord_channel);
  // One client with the automatic shared-memory path and one zero-copy
  // region, both sized for the largest transfer.
  std::unique_ptr<tensord::Client> shm_client;
  std::shared_ptr<tensord::SharedMemoryRegion> region;
  if (t.name == "tcp" && !sizes.empty()) {
    const uint64_t largest = *std::max_element(sizes.begin(), sizes.end());
    shm_client = std::make_unique<tensord::Client>(t.tensord_channel);
    std::string why;
    if (shm_client->enable_shared_memory(largest, &why)) {
      region = shm_client->create_shared_memory(largest);
    } else {
      std::fprintf(stderr, "tensord-bench: no shared memory rows: %s\n",
                   why.c_str());
      shm_client.reset();
    }
  }
  for (uint64_t bytes : sizes) {
    const std::string label = bytes >= (1ull << 30)
                                  ? std::to_string(bytes >> 30) + "GiB"
                                  : std::to_string(bytes >> 20) + "MiB";
    const std::vector<int64_t> shape{static_cast<int64_t>(bytes / 4)};
    std::string host(bytes, '\0');
    for (uint64_t i = 0; i < bytes; i += 4096) host[i] = static_cast<char>(i);
    std::string dst(bytes, '\0');
    std::vector<std::byte> reused(bytes);
    std::string sink(bytes, '\0');  // bare_stream_down's warm buffer
    std::unique_ptr<tensord::Tensor> last, last_shm;
    // A large upload first waits for the release of the tensor before it
    // (tensors() waits for releases in flight), so the server's host pool
    // hands the warm block back: the rows measure the transfer, not the
    // allocator. Small blocks stay cached anyway; waiting would add a
    // round trip to every 1 MiB upload.
    auto upload_with = [&](tensord::Client& c, std::unique_ptr<tensord::Tensor>& slot,
                           const std::function<tensord::Tensor()>& make) {
      slot.reset();
      if (bytes >= (32ull << 20)) (void)c.tensors();
      slot = std::make_unique<tensord::Tensor>(make());
    };
    struct Measure {
      std::string name, ratio_of;
      std::function<void()> body;
      std::function<void()> prepare;  // untimed, before each timing
      std::vector<double> seconds;
    };
    std::vector<Measure> m;
    auto add = [&](std::string name, std::string of, std::function<void()> body,
                   std::function<void()> prepare = nullptr) {
      m.push_back(Measure{std::move(name), std::move(of), std::move(body),
                          std::move(prepare), {}});
    };
    add("bare_stream_up", "", [&] {
      grpc::ClientContext ctx;
      bench::Empty resp;
      auto writer = echo->Sink(&ctx, &resp);
      bench::Chunk chunk;
      for (uint64_t off = 0; off < bytes; off += kChunkBytes) {
        chunk.mutable_data()->assign(host.data() + off,
                                     std::min<uint64_t>(kChunkBytes, bytes - off));
        if (!writer->Write(chunk)) break;
      }
      writer->WritesDone();
      Check(writer->Finish(), "Sink");
    });
    add("upload", "bare_stream_up", [&] {
      upload_with(client, last, [&] {
        return client.FromBytes(tensord::DType::kFloat32, shape, host);
      });
    });
    add("bare_stream_down", "", [&] {
      grpc::ClientContext ctx;
      bench::SourceRequest req;
      req.set_total_bytes(bytes);
      req.set_chunk_bytes(kChunkBytes);
      auto reader = echo->Source(&ctx, req);
      bench::Chunk chunk;
      uint64_t at = 0;
      while (reader->Read(&chunk)) {
        const uint64_t n = std::min<uint64_t>(chunk.data().size(), bytes - at);
        std::memcpy(sink.data() + at, chunk.data().data(), n);
        at += n;
      }
      Check(reader->Finish(), "Source");
    });
    add("fetch", "bare_stream_down", [&] {
      if (last->fetch_bytes().size() != bytes) std::abort();
    });
    add("fetch_into", "bare_stream_down",
                 [&] { last->fetch_into(reused); });
    add("memcpy", "", [&] {
      std::memcpy(dst.data(), host.data(), bytes);
    });
    // The client's automatic path starts above 1 MiB.
    if (shm_client && bytes > (1u << 20)) {
      add("upload_shm", "upload", [&] {
        upload_with(*shm_client, last_shm, [&] {
          return shm_client->FromBytes(tensord::DType::kFloat32, shape, host);
        });
      });
      add("fetch_shm", "fetch", [&] {
        if (last_shm->fetch_bytes().size() != bytes) std::abort();
      });
      add("fetch_shm_into", "fetch",
                   [&] { last_shm->fetch_into(reused); });
      add("upload_shm_zc", "upload",
          [&] {
            upload_with(*shm_client, last_shm, [&] {
              return shm_client->upload_shared(*region, 0,
                                               tensord::DType::kFloat32, shape);
            });
          },
          [&] { std::memcpy(region->data(), host.data(), bytes); });
      add("fetch_shm_zc", "fetch",
                   [&] { last_shm->fetch_shared(*region, 0); });
    }
    const int rounds = bytes >= (256ull << 20) ? 3 : (bytes >= (32ull << 20) ? 5 : 11);
    const int reps = bytes >= (32ull << 20) ? 1 : 10;  // per timing
    for (int round = -1; round < rounds; ++round) {  // round -1 warms up
      for (Measure& x : m) {
        if (x.prepare) x.prepare();
        const auto t0 = Clock::now();
        for (int r = 0; r < reps; ++r) x.body();
        if (round >= 0) x.seconds.push_back(Seconds(Clock::now() - t0));
      }
    }
    if (std::memcmp(reused.data(), host.data(), bytes) != 0) std::abort();
    last.reset();
    last_shm.reset();
    auto rate_of = [&](const std::string& name) {
      for (Measure& x : m) {
        if (x.name != name) continue;
        std::sort(x.seconds.begin(), x.seconds.end());
        return static_cast<double>(bytes) * reps / x.seconds[x.seconds.size() / 2] / 1e9;
      }
      return -1.0;
    };
    for (const Measure& x : m) {
      const double value = rate_of(x.name);
      const double ratio = x.ratio_of.empty() ? (x.name == "memcpy" ? -1 : 1)
                                              : value / rate_of(x.ratio_of);
      const std::string of = x.ratio_of == "upload" || x.ratio_of == "fetch"
                                 ? x.ratio_of + " (socket)"
                                 : x.ratio_of;
      rows.push_back({"bulk", x.name + "_" + label, t.name, "GB/s", value, -1,
                      ratio, of});
    }
  }
}

// cblas_sgemm of n x n float32 matrices, `reps` back-to-back calls timed
// three times: the best GFLOP/s (a floor the service must reach, so the
// strictest). What the floor process runs (--blas_floor_child).
double TimeSgemm(int n, int reps) {
  std::vector<float> x(static_cast<size_t>(n) * n, 0.5f), y = x, z = x;
  auto once = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f,
                x.data(), n, y.data(), n, 0.0f, z.data(), n);
  };
  once();  // warm: threads started, pages touched
  double best = 0;
  for (int timing = 0; timing < 3; ++timing) {
    const auto t0 = Clock::now();
    for (int r = 0; r < reps; ++r) once();
    best = std::max(best,
                    2.0 * n * n * n * reps / Seconds(Clock::now() - t0) / 1e9);
  }
  return best;
}

// The floor: TimeSgemm in a fresh process of this program (same BLAS
// kernel and thread count, nothing else alive in it), started after a pause
// that lets this process's OpenBLAS workers stop spinning. -1 on failure.
double BlasFloor(int n, int reps) {
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // This program by its /proc/PID/exe link: nothing to quote, and it works
  // even if the file was replaced meanwhile (popen's shell would read
  // /proc/self/exe as its own).
  const std::string command = "/proc/" + std::to_string(::getpid()) +
                              "/exe --blas_floor_child=" + std::to_string(n) +
                              "," + std::to_string(reps);
  FILE* child = ::popen(command.c_str(), "r");
  if (child == nullptr) return -1;
  double gflops = -1;
  if (std::fscanf(child, "%lf", &gflops) != 1) gflops = -1;
  const int status = ::pclose(child);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return -1;
  }
  return gflops;
}

// Set when a floor could not be measured: the bench still prints what it
// has, then exits 1 (the CI smoke test notices).
bool floor_failed = false;

// (f) CPU matmul through the service beside the floor. Each timing repeats
// its multiply for about a fifth of a second; floor and service timings
// alternate over five rounds and each row reports its median round.
//   service:         one Tensor::matmul per multiply (an RPC, its wait and
//                    the result's release): round-trip bound for small n
//   service_batched: the same multiplies recorded in one Batch (one Execute
//                    RPC; each result is freed as the next one is made, the
//                    last is kept and released)
//   service_pipelined: the same multiplies as eager code on the pipelined
//                    client (queued on the session's command stream, one
//                    synchronize() at the end)
//   service (unix):  as `service`, over `local`'s unix-domain socket when
//                    given (a same-host client): beside the TCP row, what
//                    the wire's round trip costs one RPC per matmul (at
//                    n = 512 on the 2-core machine: nothing measurable, so
//                    the gap to the floor there is not the wire's)
//   call_n1_warm_nN (us): one Tensor::matmul of 1x1 matrices, as `service`
//                    times it, in a row of them (in N's rounds): what a
//                    call costs besides its multiply (the round trip, the
//                    op's planning and allocation, the release it carries)
//   call_n1_after_nN (us): the same call made right after an N x N multiply.
//                    Both run while OpenBLAS's worker still spins from the
//                    last multiply, as in the `service` loop; what differs
//                    is the caches, which the multiply's operands and
//                    packing buffers have taken from the call's own code and
//                    data (gRPC, the kernel's socket path). On the 2-core
//                    machine it costs 1.3-1.5x the warm call after n = 512
//                    and 2.6-3.5x after 1024. (A pointer chase over 256 KiB
//                    took 10x as long right after a 1024 sgemm as warm.)
//   rpc_bound:       what `service` would reach if each multiply cost the
//                    floor's time plus call_n1_after_nN: the ratio is
//                    floor / (floor + call after), the best one RPC per
//                    multiply can do with this daemon's per-call costs.
//                    `service` near it means the multiply adds nothing
//                    over the floor.
void Matmul(Transport& t, Transport* local, const std::vector<int>& sizes,
            std::vector<Row>& rows) {
  tensord::Client client(t.tensord_channel);
  // One unary call per multiply: the pipelined client would queue them.
  tensord::ClientOptions unary_options;
  unary_options.pipeline = false;
  tensord::Client unary(t.tensord_channel, unary_options);
  std::optional<tensord::Client> local_unary;
  if (local != nullptr) local_unary.emplace(local->tensord_channel, unary_options);
  auto a1 = unary.rand({1, 1}, "cpu", 1);
  auto b1 = unary.rand({1, 1}, "cpu", 2);
  for (int n : sizes) {
    const double flop = 2.0 * n * n * n;
    auto a = unary.rand({n, n}, "cpu", 1);
    auto b = unary.rand({n, n}, "cpu", 2);
    auto pa = client.rand({n, n}, "cpu", 1);
    auto pb = client.rand({n, n}, "cpu", 2);
    std::optional<tensord::Tensor> la, lb;
    if (local_unary) {
      la = local_unary->rand({n, n}, "cpu", 1);
      lb = local_unary->rand({n, n}, "cpu", 2);
    }
    auto service_once = [&] { (void)a.matmul(b); };
    auto call_once = [&] { (void)a1.matmul(b1); };
    auto local_once = [&] { (void)la->matmul(*lb); };
    // The same multiplies as eager code on the pipelined client: queued on
    // the command stream, waited for once.
    auto pipelined = [&](int count) {
      for (int r = 0; r < count; ++r) (void)pa.matmul(pb);
      client.synchronize();
    };
    auto batched = [&](int count) {
      auto batch = unary.batch();
      tensord::Batch::Value last = batch.matmul(a, b);
      for (int r = 1; r < count; ++r) last = batch.matmul(a, b);
      batch.keep(last);
      (void)batch.run();
    };
    // Repetitions per timing: about 0.2 s of service matmuls.
    service_once();  // warm
    auto t0 = Clock::now();
    service_once();
    const int reps = std::clamp(
        static_cast<int>(0.2 / std::max(1e-6, Seconds(Clock::now() - t0))), 1,
        1000);
    batched(reps);  // warm
    pipelined(reps);
    if (la) local_once();
    std::vector<double> floor, service, service_batched, service_pipelined,
        service_local, call_us, call_after_us;
    // Microseconds a call_once: `calls` of them in a row, or each right
    // after an untimed n x n multiply.
    auto per_call = [&](int calls, bool after_multiply) {
      double seconds = 0;
      for (int i = 0; i < calls; ++i) {
        if (after_multiply) service_once();
        const auto start = Clock::now();
        call_once();
        seconds += Seconds(Clock::now() - start);
      }
      return seconds * 1e6 / calls;
    };
    const int pairs = std::clamp(reps, 1, 100);
    for (int round = 0; round < 5; ++round) {
      floor.push_back(BlasFloor(n, reps));
      if (floor.back() <= 0) {
        std::fprintf(
            stderr, "tensord-bench: the BLAS floor process failed (n=%d)\n", n);
        floor_failed = true;
      }
      t0 = Clock::now();
      batched(reps);
      service_batched.push_back(flop * reps / Seconds(Clock::now() - t0) / 1e9);
      t0 = Clock::now();
      for (int r = 0; r < reps; ++r) service_once();
      service.push_back(flop * reps / Seconds(Clock::now() - t0) / 1e9);
      t0 = Clock::now();
      pipelined(reps);
      service_pipelined.push_back(flop * reps / Seconds(Clock::now() - t0) /
                                  1e9);
      if (la) {
        t0 = Clock::now();
        for (int r = 0; r < reps; ++r) local_once();
        service_local.push_back(flop * reps / Seconds(Clock::now() - t0) / 1e9);
      }
      call_us.push_back(per_call(300, false));
      call_after_us.push_back(per_call(pairs, true));
    }
    std::sort(floor.begin(), floor.end());
    std::sort(service.begin(), service.end());
    std::sort(service_batched.begin(), service_batched.end());
    std::sort(service_pipelined.begin(), service_pipelined.end());
    std::sort(service_local.begin(), service_local.end());
    std::sort(call_us.begin(), call_us.end());
    std::sort(call_after_us.begin(), call_after_us.end());
    const std::string size = std::to_string(n);
    rows.push_back({"matmul", "blas_own_process_n" + size, "own-process",
                    "GFLOP/s", floor[2], -1, 1, ""});
    rows.push_back({"matmul", "service_n" + size, t.name, "GFLOP/s", service[2],
                    -1, service[2] / floor[2], "blas_own_process"});
    rows.push_back({"matmul", "service_batched_n" + size, t.name, "GFLOP/s",
                    service_batched[2], -1, service_batched[2] / floor[2],
                    "blas_own_process"});
    rows.push_back({"matmul", "service_pipelined_n" + size, t.name, "GFLOP/s",
                    service_pipelined[2], -1, service_pipelined[2] / floor[2],
                    "blas_own_process"});
    if (la) {
      rows.push_back({"matmul", "service_n" + size, local->name, "GFLOP/s",
                      service_local[2], -1, service_local[2] / floor[2],
                      "blas_own_process"});
    }
    const double floor_s = flop / (floor[2] * 1e9);
    rows.push_back({"matmul", "call_n1_warm_n" + size, t.name, "us",
                    call_us[2], -1, -1, ""});
    rows.push_back({"matmul", "call_n1_after_n" + size, t.name, "us",
                    call_after_us[2], -1, call_after_us[2] / call_us[2],
                    "call_n1_warm"});
    const double bound = flop / (floor_s + call_after_us[2] * 1e-6) / 1e9;
    rows.push_back({"matmul", "rpc_bound_n" + size, t.name, "GFLOP/s", bound,
                    -1, bound / floor[2], "blas_own_process"});
  }
}

// (g): each kernel `reps` times on one input in one Execute (results not
// kept, so each is freed as the next runs), interleaved in rounds with
// memcpy of the bytes a kernel moves; the median round.
void Kernels(Transport& t, int64_t elements, std::vector<Row>& rows) {
  tensord::Client client(t.tensord_channel);
  const int64_t cols = std::min<int64_t>(elements, 1024);
  const int64_t rows_n = std::max<int64_t>(1, elements / cols);
  const int64_t n = rows_n * cols;
  auto a = client.rand({rows_n, cols}, "cpu", 1);
  auto b = client.rand({rows_n, cols}, "cpu", 2);
  const double f32 = 4.0 * static_cast<double>(n);
  struct Kernel {
    std::string name;
    double bytes;  // read + written per run
    std::function<void(tensord::Batch&)> record;
  };
  const std::vector<Kernel> kernels = {
      {"exp", 2 * f32,
       [&](tensord::Batch& x) { (void)x.unary(tensord::UnaryOp::kExp, a); }},
      {"relu", 2 * f32, [&](tensord::Batch& x) { (void)x.relu(a); }},
      {"add", 3 * f32, [&](tensord::Batch& x) { (void)x.add(a, b); }},
      {"sum_rows", f32, [&](tensord::Batch& x) { (void)x.sum(a, 1); }},
      {"softmax_rows", 2 * f32,
       [&](tensord::Batch& x) { (void)x.softmax(a, 1); }},
      {"cast_f16", 1.5 * f32,
       [&](tensord::Batch& x) { (void)x.to(a, tensord::DType::kFloat16); }},
  };
  // Repetitions: about 64 MiB of traffic per kernel per round.
  const int reps =
      static_cast<int>(std::clamp<double>((64 << 20) / (2 * f32), 1, 64));
  std::vector<char> src(static_cast<size_t>(2 * f32)), dst(src.size());
  auto run = [&](const Kernel& k) {
    auto batch = client.batch();
    for (int r = 0; r < reps; ++r) k.record(batch);
    (void)batch.run();
  };
  for (const Kernel& k : kernels) run(k);  // warm
  std::vector<std::vector<double>> gbs(kernels.size());
  std::vector<double> copy;
  for (int round = 0; round < 5; ++round) {
    auto t0 = Clock::now();
    for (int r = 0; r < reps; ++r) {
      std::memcpy(dst.data(), src.data(), src.size());
    }
    copy.push_back(2.0 * src.size() * reps / Seconds(Clock::now() - t0) / 1e9);
    for (size_t i = 0; i < kernels.size(); ++i) {
      t0 = Clock::now();
      run(kernels[i]);
      gbs[i].push_back(kernels[i].bytes * reps / Seconds(Clock::now() - t0) /
                       1e9);
    }
  }
  std::sort(copy.begin(), copy.end());
  const std::string size =
      "_" + std::to_string(rows_n) + "x" + std::to_string(cols);
  rows.push_back(
      {"kernels", "memcpy" + size, "in-process", "GB/s", copy[2], -1, 1, ""});
  for (size_t i = 0; i < kernels.size(); ++i) {
    std::sort(gbs[i].begin(), gbs[i].end());
    rows.push_back({"kernels", kernels[i].name + size, t.name, "GB/s",
                    gbs[i][2], -1, gbs[i][2] / copy[2], "memcpy"});
  }
}

std::vector<uint64_t> ParseSizes(const std::string& text) {
  std::vector<uint64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    auto bytes = tensord::server::ParseByteSize(std::string(part));
    if (!bytes.ok()) {
      std::fprintf(stderr, "tensord-bench: %s\n",
                   std::string(bytes.status().message()).c_str());
      std::exit(2);
    }
    out.push_back(*bytes / 4 * 4);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  // As the daemon does (server/main.cc): the best BLAS kernel for this CPU
  // and the OpenMP thread policy, a thread per usable CPU, no lock-order
  // graph on every absl::Mutex. Both matmul rows then use the same kernel:
  // the one the daemon would run.
  tensord::core::ReexecForHostCompute(argv);
  tensord::core::SetBlasThreads(tensord::core::UsableCpus());
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  tensord::server::ParseProgramFlags(
      argc, argv,
      {.name = "tensord-bench",
       .summary =
           "what a remote tensor costs, next to its floors, in one run: "
           "round-trip latency, small-op throughput, upload/fetch GB/s over "
           "TCP, a unix socket and shared memory, and CPU matmul GFLOP/s, "
           "each beside bare gRPC, memcpy or BLAS called directly. Servers "
           "run in this process. Prints a table, then one JSON line.",
       .example = "tensord-bench --only small,matmul --matmul-sizes 512,1024",
       .flag_files = {__FILE__}});
  if (const std::string floor = absl::GetFlag(FLAGS_blas_floor_child);
      !floor.empty()) {
    int n = 0, reps = 0;
    if (std::sscanf(floor.c_str(), "%d,%d", &n, &reps) != 2 || n <= 0 ||
        reps <= 0) {
      std::fprintf(stderr, "tensord-bench: --blas_floor_child: want n,reps\n");
      return 2;
    }
    std::printf("%.3f\n", TimeSgemm(n, reps));
    return 0;
  }
  const bool quick = absl::GetFlag(FLAGS_quick);
  const int iterations = quick ? 200 : std::max(10, absl::GetFlag(FLAGS_iterations));
  const int threads = std::max(1, absl::GetFlag(FLAGS_threads));
  const double seconds = quick ? 0.3 : absl::GetFlag(FLAGS_seconds);
  const std::vector<uint64_t> sizes =
      ParseSizes(quick ? "1MiB" : absl::GetFlag(FLAGS_sizes));
  std::vector<int> matmul_sizes;
  for (absl::string_view part : absl::StrSplit(
           quick ? "64,128" : absl::GetFlag(FLAGS_matmul_sizes), ',',
           absl::SkipEmpty())) {
    int n = 0;
    if (absl::SimpleAtoi(part, &n) && n > 0) matmul_sizes.push_back(n);
  }

  const int64_t kernel_elements =
      quick ? int64_t{1} << 14
            : std::max<int64_t>(1, absl::GetFlag(FLAGS_kernel_elements));
  bool run_small = true, run_bulk = true, run_matmul = true, run_kernels = true;
  if (const std::string only = absl::GetFlag(FLAGS_only); !only.empty()) {
    run_small = run_bulk = run_matmul = run_kernels = false;
    for (absl::string_view part : absl::StrSplit(only, ',', absl::SkipEmpty())) {
      if (part == "small") {
        run_small = true;
      } else if (part == "bulk") {
        run_bulk = true;
      } else if (part == "matmul") {
        run_matmul = true;
      } else if (part == "kernels") {
        run_kernels = true;
      } else {
        std::fprintf(stderr,
                     "tensord-bench: --only: unknown part '%s' "
                     "(small, bulk, matmul, kernels)\n",
                     std::string(part).c_str());
        return 2;
      }
    }
  }

  EchoService echo;
  const std::string dir = "/tmp/tensord-bench-" + std::to_string(::getpid());
  std::vector<std::unique_ptr<Transport>> transports;
  transports.push_back(StartTransport("tcp", "127.0.0.1:0", "127.0.0.1:0", &echo));
  transports.push_back(StartTransport("unix", "unix:" + dir + "-echo.sock",
                                      "unix:" + dir + "-tensord.sock", &echo));
  std::vector<Row> rows;
  for (auto& t : transports) {
    if (!t) return 1;
    if (run_small) SmallOps(*t, iterations, threads, seconds, rows);
    if (run_bulk) Bulk(*t, sizes, rows);
  }
  if (run_matmul) {
    Matmul(*transports[0], transports[1].get(), matmul_sizes, rows);
  }
  if (run_kernels) Kernels(*transports[0], kernel_elements, rows);

  const tensord::core::BlasInfo blas = tensord::core::CurrentBlas();
  const std::string replaced = tensord::core::ReplacedBlasCore();
  std::printf("BLAS kernel %s%s%s, %d threads\n", blas.core.c_str(),
              replaced.empty() ? "" : " (forced over the library's choice, ",
              replaced.empty() ? "" : (replaced + ")").c_str(), blas.threads);
  std::printf("%-11s %-28s %-10s %12s %10s %9s  %s\n", "group", "measurement",
              "transport", "value", "p99", "ratio", "unit / ratio of");
  for (const Row& r : rows) {
    std::printf("%-11s %-28s %-10s %12.2f %10s %9s  %s%s%s\n", r.group.c_str(),
                r.name.c_str(), r.transport.c_str(), r.value,
                r.p99 >= 0 ? std::to_string(r.p99).substr(0, 8).c_str() : "-",
                r.ratio >= 0 ? std::to_string(r.ratio).substr(0, 5).c_str() : "-",
                r.unit.c_str(), r.ratio_of.empty() ? "" : " / ",
                r.ratio_of.c_str());
  }
  std::printf("{\"benchmark\":\"tensord-bench\",\"iterations\":%d,\"threads\":%d,\"blas_kernel\":\"%s\",\"blas_threads\":%d,\"results\":[",
              iterations, threads, blas.core.c_str(), blas.threads);
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::printf("%s{\"group\":\"%s\",\"name\":\"%s\",\"transport\":\"%s\",\"unit\":\"%s\",\"value\":%.3f,\"p99\":%.3f,\"ratio\":%.4f,\"ratio_of\":\"%s\"}",
                i ? "," : "", r.group.c_str(), r.name.c_str(), r.transport.c_str(),
                r.unit.c_str(), r.value, r.p99, r.ratio, r.ratio_of.c_str());
  }
  std::printf("]}\n");
  for (auto& t : transports) {
    t->tensord.reset();
    t->echo_server->Shutdown();
  }
  ::unlink((dir + "-echo.sock").c_str());
  ::unlink((dir + "-tensord.sock").c_str());
  return floor_failed ? 1 : 0;
}
