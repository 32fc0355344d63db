// A client that gets killed: the fault test (fault_test.cc) spawns it, waits
// for the progress line it prints, and kills it with SIGKILL mid-way.
//
//   fault_client ADDRESS upload|fetch|execute
//
// Every mode first makes one completed 1 MiB tensor on cpu:0 that the
// session keeps (freed only when the session's lease ends), prints
// "session <id>", then:
//   upload   streams a 64 MiB tensor to cpu:0 in 1 MiB chunks; after 4
//            chunks prints "progress upload" and goes on slowly, never
//            finishing;
//   fetch    makes a 32 MiB tensor on cpu:0, starts fetching it in 64 KiB
//            chunks, reads one, releases the handle (so only the fetch
//            holds the memory), prints "progress fetch" and stops reading;
//   execute  prints "progress execute" and runs a batch of 100 chained
//            512x512 matmuls on cpu:0 (seconds of work), keeping the last.
// All output goes to stdout, one line each, flushed at once.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "tensord/client.h"
#include "tensord/v1/tensord.grpc.pb.h"

namespace {

void Say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

[[noreturn]] void Hang() {
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s ADDRESS upload|fetch|execute\n", argv[0]);
    return 2;
  }
  const std::string address = argv[1], mode = argv[2];
  namespace v1 = tensord::v1;
  try {
    tensord::Client client(address);
    tensord::Tensor kept =
        client.ones({256 * 1024}, tensord::client::DType::kFloat32, "cpu:0");
    client.synchronize();  // made, before the raw stub below names it
    Say("session " + client.session());
    auto stub = v1::TensorService::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));

    if (mode == "upload") {
      constexpr int kChunk = 1 << 20, kChunks = 64;
      grpc::ClientContext ctx;
      v1::TensorResponse resp;
      auto writer = stub->Upload(&ctx, &resp);
      v1::UploadRequest msg;
      msg.mutable_header()->set_session(client.session());
      msg.mutable_header()->set_device("cpu:0");
      msg.mutable_header()->set_dtype(v1::FLOAT32);
      msg.mutable_header()->add_shape(int64_t{kChunk} * kChunks / 4);
      msg.set_data(std::string(kChunk, '\1'));
      for (int i = 0; i < kChunks - 1; ++i) {
        if (!writer->Write(msg)) break;
        msg.clear_header();
        if (i == 3) Say("progress upload");
        if (i >= 3) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      Hang();  // never sends the last chunk
    }

    if (mode == "fetch") {
      tensord::Tensor big =
          client.ones({8 << 20}, tensord::client::DType::kFloat32, "cpu:0");
      client.synchronize();
      grpc::ClientContext ctx;
      v1::FetchRequest req;
      req.set_session(client.session());
      req.set_handle(big.handle());
      req.set_chunk_bytes(64 << 10);
      auto reader = stub->Fetch(&ctx, req);
      v1::FetchChunk chunk;
      if (!reader->Read(&chunk)) {
        std::fprintf(stderr, "fetch: no first chunk\n");
        return 1;
      }
      big = kept;  // the last copy of the big tensor goes: released remotely
      Say("progress fetch");
      Hang();  // never reads on: the server's stream waits on flow control
    }

    if (mode == "execute") {
      tensord::Tensor x = client.full(
          {512, 512}, 0.001, tensord::client::DType::kFloat32, "cpu:0");
      tensord::Batch batch = client.batch();
      tensord::Batch::Value v = batch.matmul(x, x);
      for (int i = 0; i < 99; ++i) v = batch.matmul(v, x);
      batch.keep(v);
      Say("progress execute");
      (void)batch.run();
      Say("execute finished (too early: the test should have killed us)");
      Hang();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fault_client: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "unknown mode '%s'\n", mode.c_str());
  return 2;
}
