// What the client-library suites share: a tensord started in the test's
// process with two host devices ("cpu:0", "cpu:1"), a Client on its
// in-process channel, a scratch directory removed afterwards, and the
// bytes the devices hold.
#ifndef TENSORD_TESTS_CLIENT_IN_PROCESS_FIXTURE_H_
#define TENSORD_TESTS_CLIENT_IN_PROCESS_FIXTURE_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "server/server.h"
#include "tensord/client.h"

namespace tensord {

class InProcessClientTest : public ::testing::Test {
 protected:
  // `scratch`: the scratch directory's name prefix ("tensord-ops-").
  explicit InProcessClientTest(std::string scratch)
      : scratch_(std::move(scratch)) {}
  void SetUp() override {
    server::ServerOptions options;
    options.listen = "";
    options.runtime.host_devices = 2;
    server_ = std::move(server::Server::Start(std::move(options))).value();
    client_.emplace(server_->InProcessChannel());
    dir_ = std::filesystem::temp_directory_path() /
           (scratch_ + client_->session().substr(0, 8));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    std::filesystem::remove_all(dir_);
  }
  uint64_t Held() {
    uint64_t held = 0;
    for (const DeviceInfo& d : client_->devices()) held += d.held_memory;
    return held;
  }

  const std::string scratch_;
  std::unique_ptr<server::Server> server_;
  std::optional<Client> client_;
  std::filesystem::path dir_;
};

}  // namespace tensord

#endif  // TENSORD_TESTS_CLIENT_IN_PROCESS_FIXTURE_H_
