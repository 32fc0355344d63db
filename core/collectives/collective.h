// What a collective is, device-independently: its kind and, for the
// reducing ones, its reduction. Names are torch.distributed's
// ("all_reduce", torch.distributed.ReduceOp.SUM spelled "sum").
#ifndef TENSORD_CORE_COLLECTIVES_COLLECTIVE_H_
#define TENSORD_CORE_COLLECTIVES_COLLECTIVE_H_

#include <string_view>

namespace tensord::core {

enum class CollectiveKind {
  kAllReduce,      // every member's tensor becomes the reduction of all
  kBroadcast,      // every member's tensor becomes the root member's
  kAllGather,      // each member gets all members' tensors, concatenated
  kReduceScatter,  // each member gets its slice of the reduction
  kBarrier,        // no tensors: returns once every member has arrived
};
std::string_view CollectiveName(CollectiveKind kind);  // "all_reduce", ...

// torch.distributed.Reduction's SUM, AVG, PRODUCT, MIN, MAX.
enum class Reduction { kSum, kAvg, kProduct, kMin, kMax };
std::string_view ReductionName(Reduction op);  // "sum", "avg", ...

}  // namespace tensord::core

#endif  // TENSORD_CORE_COLLECTIVES_COLLECTIVE_H_
