// Moving a tensor between two tensord nodes (issue 13): server to server
// (x.to("tensord-1/cpu"): the destination pulls from the source) beside the
// client hop (fetch to the client, then upload to the other node) and the
// floor, a bare gRPC stream of the same bytes from another process (a
// forked child serving bench/echo_service.h's Source, no tensord in it),
// interleaved, as ratios. Both daemons run in this process on loopback TCP.
//
//   build/bench/node_move_bench [--sizes_mib 64,1024] [--repeats 3]
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/echo_service.h"
#include "server/program_flags.h"
#include "server/server.h"
#include "tensord/cluster.h"

ABSL_FLAG(std::string, sizes_mib, "64,1024", "tensor sizes, MiB");
ABSL_FLAG(int, repeats, 3, "interleaved rounds (the best of each counts)");

namespace {

using Clock = std::chrono::steady_clock;
namespace bench = ::tensord_bench;

// The child: serves the Echo floor on loopback until killed; writes its
// port to `fd` first. Runs before the parent starts any gRPC thread.
[[noreturn]] void ServeFloor(int fd) {
  tensord::bench_support::EchoService echo;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&echo);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (write(fd, &port, sizeof(port)) != sizeof(port)) _exit(1);
  close(fd);
  server->Wait();
  _exit(0);
}

std::unique_ptr<tensord::server::Server> StartNode(
    int i, const std::string& tokens, const std::string& peers) {
  tensord::server::ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.runtime.node_name = "tensord-" + std::to_string(i);
  options.node_token_file = tokens;
  options.peers = peers;
  auto server = tensord::server::Server::Start(std::move(options));
  if (!server.ok()) {
    std::fprintf(stderr, "node_move_bench: %s\n",
                 std::string(server.status().message()).c_str());
    std::exit(1);
  }
  return std::move(*server);
}

}  // namespace

int main(int argc, char** argv) {
  int fds[2];
  if (pipe(fds) != 0) return 1;
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    ServeFloor(fds[1]);
  }
  close(fds[1]);
  int floor_port = 0;
  if (read(fds[0], &floor_port, sizeof(floor_port)) != sizeof(floor_port)) {
    std::fprintf(stderr, "node_move_bench: the floor process did not start\n");
    return 1;
  }
  close(fds[0]);

  tensord::server::ParseProgramFlags(
      argc, argv,
      {.name = "node_move_bench",
       .summary = "moving a tensor between two tensord nodes: server to "
                  "server, the client hop, and a bare gRPC stream from "
                  "another process, interleaved. Prints a table and one "
                  "JSON line.",
       .example = "node_move_bench --sizes_mib 64,1024 --repeats 3",
       .flag_files = {__FILE__}});
  std::vector<uint64_t> sizes;
  for (absl::string_view s :
       absl::StrSplit(absl::GetFlag(FLAGS_sizes_mib), ',')) {
    uint64_t mib = 0;
    if (absl::SimpleAtoi(s, &mib) && mib > 0) sizes.push_back(mib << 20);
  }
  const int repeats = std::max(1, absl::GetFlag(FLAGS_repeats));

  const std::filesystem::path tokens =
      std::filesystem::temp_directory_path() /
      ("tensord-move-bench-" + std::to_string(getpid()));
  std::ofstream(tokens) << "tensord-0 bench-node-zero-token-0123\n"
                           "tensord-1 bench-node-one-token-01234\n";
  auto source = StartNode(0, tokens.string(), "");
  auto destination =
      StartNode(1, tokens.string(), "tensord-0=" + source->address());
  tensord::Cluster cluster({source->address(), destination->address()});
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  auto echo = bench::Echo::NewStub(grpc::CreateCustomChannel(
      "127.0.0.1:" + std::to_string(floor_port),
      grpc::InsecureChannelCredentials(), args));

  std::printf("%-14s %10s %12s %12s  %s\n", "measurement", "MiB", "GB/s",
              "ratio", "of");
  std::string json = "{\"bench\":\"node_move_bench\",\"rows\":[";
  for (const uint64_t bytes : sizes) {
    std::string data(bytes, '\0');
    std::mt19937_64 random(7);
    for (size_t i = 0; i + 8 <= data.size(); i += 8) {
      const uint64_t v = random();
      std::memcpy(data.data() + i, &v, 8);
    }
    const std::vector<int64_t> shape = {static_cast<int64_t>(bytes / 4)};
    tensord::Tensor x = cluster.FromBytes(tensord::DType::kFloat32, shape, data,
                                          "tensord-0/cpu");
    data.clear();
    data.shrink_to_fit();
    std::string sink(bytes, '\0');
    struct Row {
      const char* name;
      std::function<void()> run;
      double best = 1e30;
    };
    std::vector<Row> rows = {
        {"server_to_server",
         [&] { tensord::Tensor y = x.to("tensord-1/cpu"); (void)y.shape(); }},
        {"client_hop",
         [&] {
           const std::string host = x.fetch_bytes();
           tensord::Tensor y = cluster.FromBytes(tensord::DType::kFloat32,
                                                 shape, host, "tensord-1/cpu");
           cluster.node("tensord-1").synchronize();
         }},
        {"bare_stream",
         [&] {
           grpc::ClientContext ctx;
           bench::SourceRequest req;
           req.set_total_bytes(bytes);
           req.set_chunk_bytes(tensord::bench_support::kEchoChunkBytes);
           auto reader = echo->Source(&ctx, req);
           bench::Chunk chunk;
           uint64_t at = 0;
           while (reader->Read(&chunk)) {
             const uint64_t n =
                 std::min<uint64_t>(chunk.data().size(), bytes - at);
             std::memcpy(sink.data() + at, chunk.data().data(), n);
             at += n;
           }
           if (!reader->Finish().ok()) std::exit(1);
         }},
    };
    for (int r = 0; r < repeats; ++r) {
      for (Row& row : rows) {
        const auto start = Clock::now();
        row.run();
        row.best = std::min(
            row.best, std::chrono::duration<double>(Clock::now() - start).count());
      }
    }
    const double bare = rows[2].best;
    const double hop = rows[1].best;
    for (const Row& row : rows) {
      const double gbs = bytes / row.best / 1e9;
      const char* of = row.name == std::string("bare_stream") ? "" : "bare_stream";
      std::printf("%-16s %8llu %12.2f %12.3f  %s\n", row.name,
                  static_cast<unsigned long long>(bytes >> 20), gbs,
                  bare / row.best, of);
      json += std::string(json.back() == '[' ? "" : ",") + "{\"row\":\"" +
              row.name + "\",\"mib\":" + std::to_string(bytes >> 20) +
              ",\"gbps\":" + std::to_string(gbs) + "}";
    }
    std::printf("%-16s %8llu %12s %12.3f  %s\n", "server_to_server",
                static_cast<unsigned long long>(bytes >> 20), "",
                hop / rows[0].best, "client_hop");
  }
  std::printf("%s]}\n", json.c_str());
  kill(child, SIGTERM);
  waitpid(child, nullptr, 0);
  std::filesystem::remove(tokens);
  return 0;
}
