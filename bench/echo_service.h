// The benchmarks' floor: a gRPC service with nothing behind its calls
// (Ping; Sink reads and drops a stream of chunks; Source writes `total_bytes`
// in chunks), for tensord's figures to be read as ratios of it.
// Thread-safety: a gRPC callback service; one instance serves any calls.
#ifndef TENSORD_BENCH_ECHO_SERVICE_H_
#define TENSORD_BENCH_ECHO_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdint>

#include "tensord_bench/echo.grpc.pb.h"

namespace tensord::bench_support {

namespace bench = ::tensord_bench;

inline constexpr uint32_t kEchoChunkBytes = 1 << 20;  // as Upload and Fetch

class EchoService final : public bench::Echo::CallbackService {
  grpc::ServerUnaryReactor* Ping(grpc::CallbackServerContext* ctx,
                                 const bench::Empty*, bench::Empty*) override {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerReadReactor<bench::Chunk>* Sink(grpc::CallbackServerContext*,
                                              bench::Empty*) override {
    class Reader : public grpc::ServerReadReactor<bench::Chunk> {
     public:
      Reader() { StartRead(&chunk_); }
      void OnReadDone(bool ok) override {
        if (!ok) {
          Finish(grpc::Status::OK);
          return;
        }
        StartRead(&chunk_);
      }
      void OnDone() override { delete this; }

     private:
      bench::Chunk chunk_;
    };
    return new Reader();
  }

  grpc::ServerWriteReactor<bench::Chunk>* Source(
      grpc::CallbackServerContext*, const bench::SourceRequest* req) override {
    class Writer : public grpc::ServerWriteReactor<bench::Chunk> {
     public:
      Writer(uint64_t total, uint32_t chunk) : left_(total) {
        chunk_.mutable_data()->assign(chunk, '\x5a');
        Next();
      }
      void OnWriteDone(bool ok) override {
        if (!ok) {
          Finish(grpc::Status::CANCELLED);
          return;
        }
        Next();
      }
      void OnDone() override { delete this; }

     private:
      void Next() {
        if (left_ == 0) {
          Finish(grpc::Status::OK);
          return;
        }
        const uint64_t n = std::min<uint64_t>(left_, chunk_.data().size());
        chunk_.mutable_data()->resize(n);
        left_ -= n;
        StartWrite(&chunk_);
      }
      uint64_t left_;
      bench::Chunk chunk_;
    };
    return new Writer(req->total_bytes(),
                      req->chunk_bytes() ? req->chunk_bytes() : kEchoChunkBytes);
  }
};

}  // namespace tensord::bench_support

#endif  // TENSORD_BENCH_ECHO_SERVICE_H_
