#include "server/config.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/flags/flag.h"

// Stand-ins for the daemon's flags (defined in main.cc, not linked here).
ABSL_FLAG(std::string, listen, "127.0.0.1:50051", "");
ABSL_FLAG(int, host_devices, 1, "");
ABSL_FLAG(std::string, memory_limit, "", "");
ABSL_FLAG(std::string, gpu_memory_limit, "", "");
ABSL_FLAG(std::string, log_level, "info", "");
ABSL_FLAG(std::string, metrics_listen, "", "");
ABSL_FLAG(int, shutdown_grace_ms, 5000, "");
ABSL_FLAG(std::string, port_file, "", "");

namespace tensord::server {
namespace {

using ::testing::HasSubstr;

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path =
      (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path) << text;
  return path;
}

TEST(ConfigTest, ReadsKnownKeys) {
  const std::string path = WriteFile("tensord_ok.toml",
                                     "# comment\n"
                                     "listen = \"0.0.0.0:6000\"\n"
                                     "host_devices = 3\n"
                                     "memory_limit = \"2GiB\"\n");
  auto values = ReadConfigFile(path);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(values->at("listen"), "0.0.0.0:6000");
  EXPECT_EQ(values->at("host_devices"), "3");
  ASSERT_TRUE(ApplyToFlags(*values, path).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_listen), "0.0.0.0:6000");
  EXPECT_EQ(absl::GetFlag(FLAGS_host_devices), 3);
}

TEST(ConfigTest, UnknownKeyNamesLine) {
  const std::string path =
      WriteFile("tensord_unknown.toml", "listen = \"x:1\"\n\nlistn = 4\n");
  auto values = ReadConfigFile(path);
  ASSERT_FALSE(values.ok());
  EXPECT_EQ(values.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(values.status().message()),
              HasSubstr(path + ":3:1: unknown key 'listn'"));
}

TEST(ConfigTest, SyntaxErrorNamesLine) {
  const std::string path =
      WriteFile("tensord_syntax.toml", "listen = \"a\"\nhost_devices = = 2\n");
  auto values = ReadConfigFile(path);
  ASSERT_FALSE(values.ok());
  EXPECT_THAT(std::string(values.status().message()), HasSubstr(path + ":2:"));
}

TEST(ConfigTest, BadValueNamesFlag) {
  absl::Status s = ApplyToFlags({{"host_devices", "many"}}, "environment");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("environment"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("host_devices"));
}

TEST(ConfigTest, EnvironmentVariables) {
  setenv("TENSORD_LOG_LEVEL", "debug", 1);
  setenv("TENSORD_HOST_DEVICES", "2", 1);
  auto env = ReadEnvironment();
  unsetenv("TENSORD_LOG_LEVEL");
  unsetenv("TENSORD_HOST_DEVICES");
  EXPECT_EQ(env.at("log_level"), "debug");
  EXPECT_EQ(env.at("host_devices"), "2");
}

TEST(ConfigTest, FlagSpellingAndConfigPath) {
  std::string a0 = "tensord", a1 = "--host-devices=2", a2 = "--config",
              a3 = "/x-y.toml", a4 = "--memory-limit";
  char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data(), a4.data()};
  auto out = NormalizeFlagSpelling(5, argv);
  EXPECT_EQ(out[1], "--host_devices=2");
  EXPECT_EQ(out[3], "/x-y.toml");  // values untouched
  EXPECT_EQ(out[4], "--memory_limit");
  EXPECT_EQ(FindConfigPath(5, argv, ""), "/x-y.toml");
  char* none[] = {a0.data()};
  EXPECT_EQ(FindConfigPath(1, none, "/nonexistent/tensord.toml"), "");
}

}  // namespace
}  // namespace tensord::server
