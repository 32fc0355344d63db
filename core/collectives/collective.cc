#include "core/collectives/collective.h"

namespace tensord::core {

std::string_view CollectiveName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return "all_reduce";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kBarrier:
      return "barrier";
  }
  return "collective";
}

std::string_view ReductionName(Reduction op) {
  switch (op) {
    case Reduction::kSum:
      return "sum";
    case Reduction::kAvg:
      return "avg";
    case Reduction::kProduct:
      return "product";
    case Reduction::kMin:
      return "min";
    case Reduction::kMax:
      return "max";
  }
  return "sum";
}

}  // namespace tensord::core
