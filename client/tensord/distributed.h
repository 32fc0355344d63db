// tensord::ProcessGroup: collectives over devices of one server, named as
// torch.distributed's functions, with one tensor per member device (the
// server runs every rank: Gloo for host devices). Part of the client
// library (tensord/client.h includes every part).
//
//   tensord::Client client;                        // tensord --host-devices 2
//   auto group = client.new_group({"cpu:0", "cpu:1"});
//   auto g0 = client.tensor<float>({1, 2}, "cpu:0");
//   auto g1 = client.tensor<float>({3, 4}, "cpu:1");
//   group.all_reduce({g0, g1});                    // both are [4, 6] now
//   group.all_reduce({g0, g1}, tensord::ReduceOp::kAvg);
//   group.broadcast({g0, g1}, /*root=*/0);         // cpu:0's to every member
//   auto all = group.all_gather({g0, g1});         // [4] on each device
//
// Tensors may come in any order, one on each member device: two on one
// device, none on another, or one on a device outside the group is
// FAILED_PRECONDITION naming them; tensors of different dtypes or shapes
// are INVALID_ARGUMENT. all_reduce and broadcast write in place (as
// torch.distributed's do) and are not recorded by autograd. Each call is a
// sync point of the client's pipelined ops (it follows them in order).
// Throws Error; docs/many-nodes.md#collectives has the codes.
//
// Thread-safety: a ProcessGroup may be used from one thread at a time;
// copies share the group, which the last copy destroys on the server.
#ifndef TENSORD_CLIENT_TENSORD_DISTRIBUTED_H_
#define TENSORD_CLIENT_TENSORD_DISTRIBUTED_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensord/tensor.h"

namespace tensord::client {

namespace internal {
struct GroupState;
}  // namespace internal

// torch.distributed.ReduceOp. kAvg: floating dtypes only.
enum class DistReduceOp { kSum, kAvg, kProduct, kMin, kMax };

class ProcessGroup {
 public:
  // The server's id of the group, its member devices in rank order, and the
  // engine running it ("gloo 0.5.0, tcp on 127.0.0.1").
  uint64_t id() const;
  const std::vector<std::string>& devices() const;
  int size() const { return static_cast<int>(devices().size()); }
  const std::string& engine() const;

  // In place: every tensor becomes the reduction of all of them.
  void all_reduce(const std::vector<Tensor>& tensors,
                  DistReduceOp op = DistReduceOp::kSum);
  // In place: every tensor becomes the one on member `root` (a rank).
  void broadcast(const std::vector<Tensor>& tensors, int root = 0);
  // New tensors, one per input on its device, in the inputs' order: all
  // members' tensors concatenated along dim 0 in rank order
  // (torch.distributed.all_gather_into_tensor; 0-d inputs give 1-D).
  std::vector<Tensor> all_gather(const std::vector<Tensor>& tensors);
  // New tensors, one per input on its device: that member's slice along
  // dim 0 of the reduction (torch.distributed.reduce_scatter_tensor; dim
  // 0 must divide by size()).
  std::vector<Tensor> reduce_scatter(const std::vector<Tensor>& tensors,
                                     DistReduceOp op = DistReduceOp::kSum);
  // Returns once every member has arrived.
  void barrier();

 private:
  friend class Client;
  explicit ProcessGroup(std::shared_ptr<internal::GroupState> state)
      : state_(std::move(state)) {}
  std::vector<Tensor> Run(int kind, const std::vector<Tensor>& tensors,
                          DistReduceOp op, int root);
  std::shared_ptr<internal::GroupState> state_;
};

}  // namespace tensord::client

#endif  // TENSORD_CLIENT_TENSORD_DISTRIBUTED_H_
