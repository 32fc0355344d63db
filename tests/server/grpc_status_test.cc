#include "server/grpc_status.h"

#include <gtest/gtest.h>

#include <string>

namespace tensord::server {
namespace {

TEST(GrpcStatusTest, MapsEveryDesignCode) {
  EXPECT_EQ(ToGrpcCode(absl::StatusCode::kOk), grpc::StatusCode::OK);
  EXPECT_EQ(ToGrpcCode(absl::StatusCode::kInvalidArgument),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ToGrpcCode(absl::StatusCode::kNotFound), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(ToGrpcCode(absl::StatusCode::kFailedPrecondition),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(ToGrpcCode(absl::StatusCode::kResourceExhausted),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(ToGrpcCode(absl::StatusCode::kUnauthenticated),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(ToGrpcCode(absl::StatusCode::kUnavailable),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(ToGrpcCode(absl::StatusCode::kInternal), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(ToGrpcCode(absl::StatusCode::kOutOfRange),
            grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_EQ(ToGrpcCode(absl::StatusCode::kDataLoss), grpc::StatusCode::DATA_LOSS);
}

TEST(GrpcStatusTest, UnknownCodeBecomesInternal) {
  EXPECT_EQ(ToGrpcCode(static_cast<absl::StatusCode>(99)),
            grpc::StatusCode::INTERNAL);
}

TEST(GrpcStatusTest, FinishKeepsMessage) {
  grpc::Status s = FinishRpc("Test", 7, absl::NotFoundError("unknown tensor 3"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "unknown tensor 3");
  EXPECT_TRUE(FinishRpc("Test", 8, absl::OkStatus()).ok());
}

TEST(GrpcStatusTest, InternalCarriesRequestId) {
  grpc::Status s = FinishRpc("Test", 42, absl::InternalError("bug"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(s.error_message(), "bug (request id 42)");
}

TEST(GrpcStatusTest, LongMessagesAreCutToFitAReplysMetadata) {
  const std::string long_message(100000, 'x');
  grpc::Status s =
      FinishRpc("Test", 9, absl::InvalidArgumentError(long_message));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_LE(s.error_message().size(), kMaxStatusMessageBytes + 32);
  EXPECT_NE(s.error_message().find("... (100000 bytes)"), std::string::npos)
      << s.error_message();
}

}  // namespace
}  // namespace tensord::server
