// Faults: clients killed with SIGKILL mid-upload, mid-fetch and mid-batch
// (Execute). Each victim is a separate process (fault_client) talking to
// this test's server over loopback; it prints its session id and a
// progress line, and is killed right after. Meanwhile a healthy client keeps
// computing and checking results; it must never fail.
//
// What is reclaimed when:
//   at once   the dead client's in-flight memory: the partial upload's
//             buffer, the tensor only a cancelled fetch still held, a
//             batch's temporaries. cpu:0 (where only victims allocate) falls
//             back to exactly what the dead sessions' tensors hold.
//   lease     the dead sessions' completed tensors, when their leases run
//             out (RuntimeOptions::session_ttl, detected at compile time);
//             cpu:0 falls to zero. Without leases in the build, that part
//             is skipped with "needs session leases".
// Prints "faults: injected=N ... bytes_leaked=B".
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "server/server.h"
#include "tensord/client.h"

extern char** environ;

namespace tensord::server {
namespace {

using namespace std::chrono_literals;

constexpr auto kLeaseTtl = 3s;


struct Victim {
  pid_t pid = -1;
  int out = -1;  // read end of its stdout
  std::string session;
  std::string buffered;
};

// fault_client beside this test binary (the build tree keeps them in one
// directory, and so does a bundle's bin/), else where the build put it.
std::string FaultClientPath() {
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    const auto sibling = self.parent_path() / "fault_client";
    if (std::filesystem::exists(sibling, error)) return sibling.string();
  }
  return TENSORD_FAULT_CLIENT;
}

Victim Spawn(const std::string& address, const std::string& mode) {
  int fds[2];
  if (pipe(fds) != 0) ADD_FAILURE() << "pipe";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  std::string path = FaultClientPath();
  char* argv[] = {path.data(), const_cast<char*>(address.c_str()),
                  const_cast<char*>(mode.c_str()), nullptr};
  Victim v;
  if (posix_spawn(&v.pid, path.c_str(), &actions, nullptr, argv, environ) !=
      0) {
    ADD_FAILURE() << "cannot spawn " << path;
  }
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  v.out = fds[0];
  return v;
}

// The victim's next output line, or "" after `timeout`.
std::string ReadLine(Victim& v, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const size_t nl = v.buffered.find('\n');
    if (nl != std::string::npos) {
      std::string line = v.buffered.substr(0, nl);
      v.buffered.erase(0, nl + 1);
      return line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return "";
    pollfd p{v.out, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[256];
    const ssize_t n = read(v.out, buf, sizeof(buf));
    if (n <= 0) return "";
    v.buffered.append(buf, static_cast<size_t>(n));
  }
}

void Kill(Victim& v) {
  kill(v.pid, SIGKILL);
  int status = 0;
  waitpid(v.pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  close(v.out);
}

class FaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    spdlog::set_level(spdlog::level::warn);
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.runtime.host_devices = 2;
    options.runtime.host_memory_budget = uint64_t{512} << 20;
    // A short lease, so the dead clients' sessions end within the test.
    options.runtime.session_ttl =
        std::chrono::duration_cast<decltype(options.runtime.session_ttl)>(kLeaseTtl);
    auto server = Server::Start(std::move(options));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    healthy_ = std::thread([this] { Healthy(); });
  }

  void TearDown() override {
    stop_ = true;
    if (healthy_.joinable()) healthy_.join();
  }

  // A well-behaved client on cpu:1: create, add, fetch, check, forever.
  void Healthy() {
    try {
      tensord::Client client(server_->address());
      for (int64_t i = 0; !stop_.load(); ++i) {
        auto a = client.tensor<int64_t>({i, 1, 2}, "cpu:1");
        auto b = (a + a).fetch<int64_t>();
        if (b != std::vector<int64_t>{2 * i, 2, 4}) ++healthy_failures_;
        ++healthy_ops_;
      }
    } catch (const std::exception& e) {
      ++healthy_failures_;
      std::fprintf(stderr, "healthy client: %s\n", e.what());
    }
  }

  uint64_t Held(const std::string& device) {
    for (const core::DeviceStatus& d : server_->runtime().ListDevices()) {
      if (d.name == device) return d.held_bytes;
    }
    ADD_FAILURE() << "no device " << device;
    return 0;
  }

  // Bytes held by the tensors of the (possibly dead) victim sessions.
  uint64_t SessionBytes() {
    uint64_t bytes = 0;
    for (const core::SessionInfo& s : server_->runtime().ListSessions()) {
      for (const std::string& id : dead_sessions_) {
        if (id.compare(0, s.id_prefix.size(), s.id_prefix) == 0)
          bytes += s.bytes;
      }
    }
    return bytes;
  }

  // Polls until cpu:0 holds exactly what the dead sessions' tensors hold.
  bool InFlightFreed(std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    do {
      if (Held("cpu:0") == SessionBytes()) return true;
      std::this_thread::sleep_for(20ms);
    } while (std::chrono::steady_clock::now() < deadline);
    return false;
  }

  // Runs one victim in `mode` and kills it after its progress line.
  void KillMidway(const std::string& mode) {
    const uint64_t ops_before = healthy_ops_.load();
    Victim v = Spawn(server_->address(), mode);
    const std::string first = ReadLine(v, 30s);
    ASSERT_EQ(first.rfind("session ", 0), 0u) << "victim said: " << first;
    dead_sessions_.push_back(first.substr(8));
    ASSERT_EQ(ReadLine(v, 30s), "progress " + mode);
    if (mode == "upload" || mode == "fetch") {
      // The in-flight memory is there before the kill: the chunks received
      // so far (at least 1 MiB), or the 32 MiB tensor only the fetch holds.
      const uint64_t in_flight = mode == "upload" ? 1 << 20 : 32 << 20;
      const auto deadline = std::chrono::steady_clock::now() + 10s;
      while (Held("cpu:0") < SessionBytes() + in_flight &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(5ms);
      }
      EXPECT_GE(Held("cpu:0"), SessionBytes() + in_flight) << mode;
    } else {
      std::this_thread::sleep_for(300ms);  // into the batch
    }
    Kill(v);
    ++faults_;
    EXPECT_TRUE(InFlightFreed(60s))
        << mode << ": cpu:0 holds " << Held("cpu:0")
        << " bytes, the dead sessions' tensors " << SessionBytes();
    // The others were served meanwhile.
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (healthy_ops_.load() == ops_before &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(10ms);
    }
    EXPECT_GT(healthy_ops_.load(), ops_before) << mode;
    EXPECT_EQ(healthy_failures_.load(), 0) << mode;
  }

  std::unique_ptr<Server> server_;
  std::thread healthy_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> healthy_ops_{0};
  std::atomic<int> healthy_failures_{0};
  std::vector<std::string> dead_sessions_;
  int faults_ = 0;
};

TEST_F(FaultTest, KilledClientsAreReclaimed) {
  for (int round = 0; round < 2; ++round) {
    for (const char* mode : {"upload", "fetch", "execute"}) {
      SCOPED_TRACE(mode);
      KillMidway(mode);
      if (HasFatalFailure()) return;
    }
  }
  const uint64_t held_by_dead = SessionBytes();
  EXPECT_GT(held_by_dead, 0u);  // each victim kept a completed tensor
  const auto deadline = std::chrono::steady_clock::now() + kLeaseTtl + 10s;
  while (Held("cpu:0") != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
  }
  const uint64_t leaked = Held("cpu:0");
  EXPECT_EQ(leaked, 0u) << "the dead sessions' leases ended";
  EXPECT_EQ(SessionBytes(), 0u);
  std::printf(
      "faults: injected=%d (SIGKILL mid-upload, mid-fetch, mid-execute) "
      "healthy_iterations=%llu healthy_failures=%d held_by_dead_sessions=%llu "
      "bytes_leaked=%llu\n",
      faults_, static_cast<unsigned long long>(healthy_ops_.load()),
      healthy_failures_.load(), static_cast<unsigned long long>(held_by_dead),
      static_cast<unsigned long long>(leaked));
}

}  // namespace
}  // namespace tensord::server
