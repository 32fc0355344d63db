// A TCP proxy on loopback whose connections can be cut at will, and that
// counts the bytes it carries: for tests of dropped connections (the
// command stream, moves between nodes) and of who sends how much.
// Thread-safety: Cut() and bytes() may be called from any thread.
#ifndef TENSORD_TESTS_CLIENT_CUTTABLE_PROXY_H_
#define TENSORD_TESTS_CLIENT_CUTTABLE_PROXY_H_

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tensord {

// A TCP proxy whose connections can be cut at will.
class CuttableProxy {
 public:
  explicit CuttableProxy(int target_port) : target_port_(target_port) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&addr),
                     sizeof(addr)),
              0);
    EXPECT_EQ(::listen(listener_, 16), 0);
    socklen_t len = sizeof(addr);
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~CuttableProxy() {
    stop_ = true;
    ::shutdown(listener_, SHUT_RDWR);
    Cut();
    acceptor_.join();
    ::close(listener_);
    for (std::thread& t : pumps_) t.join();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // Connections accepted so far.
  size_t connections() {
    std::lock_guard<std::mutex> lock(mu_);
    return open_.size() / 2;
  }
  // Bytes pumped either way through every connection so far.
  uint64_t bytes() const { return bytes_->load(); }
  // Closes every connection open now; new ones are accepted as before.
  void Cut() {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : open_) ::shutdown(fd, SHUT_RDWR);
    ++cuts_;
  }

 private:
  void Accept() {
    while (!stop_) {
      const int client = ::accept(listener_, nullptr, nullptr);
      if (client < 0) return;
      const int server = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(static_cast<uint16_t>(target_port_));
      if (::connect(server, reinterpret_cast<sockaddr*>(&addr),
                    sizeof(addr)) != 0) {
        ::close(client);
        ::close(server);
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      open_.push_back(client);
      open_.push_back(server);
      pumps_.emplace_back(
          [client, server, bytes = bytes_] { Pump(client, server, *bytes); });
    }
  }
  static void Pump(int a, int b, std::atomic<uint64_t>& bytes) {
    pollfd fds[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    char buf[1 << 16];
    for (;;) {
      if (::poll(fds, 2, 200) < 0) break;
      bool done = false;
      for (int i = 0; i < 2 && !done; ++i) {
        if (fds[i].revents == 0) continue;
        const ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
        if (n <= 0) {
          done = true;
          break;
        }
        ssize_t at = 0;
        while (at < n) {
          const ssize_t w =
              ::send(fds[1 - i].fd, buf + at, n - at, MSG_NOSIGNAL);
          if (w <= 0) {
            done = true;
            break;
          }
          at += w;
          bytes += static_cast<uint64_t>(w);
        }
      }
      if (done) break;
    }
    ::shutdown(a, SHUT_RDWR);
    ::shutdown(b, SHUT_RDWR);
    ::close(a);
    ::close(b);
  }

  const int target_port_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<int> open_;
  std::vector<std::thread> pumps_;
  int cuts_ = 0;
  std::shared_ptr<std::atomic<uint64_t>> bytes_ =
      std::make_shared<std::atomic<uint64_t>>(0);
  std::thread acceptor_;
};

}  // namespace tensord

#endif  // TENSORD_TESTS_CLIENT_CUTTABLE_PROXY_H_
