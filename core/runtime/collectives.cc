// The Runtime's process groups and collectives (core/collectives/): groups
// of this node's host devices, kept per session (core/runtime/group_table.h),
// and each collective's checks — one tensor on each member device, one
// dtype and shape, the reduction defined for the dtype — before its
// communicator runs it on the tensors' memory.
#include <cstring>
#include <utility>

#include "core/collectives/reduce_kernels.h"
#include "core/runtime/runtime_impl.h"

namespace tensord::core {
namespace {

Runtime::GroupMeta MetaOfGroup(uint64_t id, const Group& g) {
  Runtime::GroupMeta meta;
  meta.id = id;
  for (const DeviceSlot* slot : g.members) {
    meta.devices.push_back(slot->device->name());
  }
  meta.engine = g.communicator->engine();
  meta.tag = g.tag;
  meta.collectives = g.collectives.load(std::memory_order_relaxed);
  return meta;
}

std::string MemberNames(const Group& g) {
  std::vector<std::string> names;
  for (const DeviceSlot* slot : g.members) {
    names.push_back(slot->device->name());
  }
  return absl::StrJoin(names, ", ");
}

// "two on cpu:0", "none on cpu:1", "one on cpu:2, which is not in the
// group": what the handles put where they should not.
absl::Status CheckOnePerMember(std::string_view name, const Group& g,
                               std::span<const HandleEntry> entries,
                               std::vector<size_t>& rank_of) {
  const size_t world = g.members.size();
  std::vector<size_t> count(world, 0);
  std::vector<std::string> outside;
  rank_of.assign(entries.size(), 0);
  for (size_t i = 0; i < entries.size(); ++i) {
    const Device* device = entries[i].tensor->device;
    size_t r = 0;
    while (r < world && g.members[r]->device.get() != device) ++r;
    if (r == world) {
      outside.push_back(device->name());
      continue;
    }
    rank_of[i] = r;
    ++count[r];
  }
  std::vector<std::string> found;
  for (size_t r = 0; r < world; ++r) {
    const std::string& device = g.members[r]->device->name();
    if (count[r] == 0) found.push_back(absl::StrCat("none on ", device));
    if (count[r] == 2) found.push_back(absl::StrCat("two on ", device));
    if (count[r] > 2) {
      found.push_back(absl::StrCat(count[r], " on ", device));
    }
  }
  for (const std::string& device : outside) {
    found.push_back(
        absl::StrCat("one on ", device, ", which is not in the group"));
  }
  if (found.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      ToAbsl(name), ": expected one tensor on each of ", MemberNames(g),
      ", but found ", absl::StrJoin(found, " and ")));
}

std::string Describe(const StoredTensor& t) {
  return absl::StrCat(ToAbsl(DTypeName(t.dtype)), " ", t.shape.ToString());
}

}  // namespace

absl::StatusOr<Runtime::GroupMeta> Runtime::CreateGroup(
    std::string_view session, std::span<const std::string> devices,
    std::string_view tag) {
  ASSIGN_OR_RETURN(std::unique_ptr<HandleTable::SessionPin> pin,
                   impl_->table().Pin(session));
  RETURN_IF_ERROR(CheckTag(tag));
  if (devices.empty() || devices.size() > kMaxGroupDevices) {
    return absl::InvalidArgumentError(
        absl::StrCat("a group has 1 to ", kMaxGroupDevices,
                     " devices, not ", devices.size()));
  }
  auto group = std::make_shared<Group>();
  group->tag = std::string(tag);
  for (size_t i = 0; i < devices.size(); ++i) {
    absl::StatusOr<DeviceSlot*> slot = impl_->FindSlot(devices[i]);
    if (!slot.ok()) {
      return Rewrapped(slot.status(), slot.status().code(),
                       absl::StrCat("devices #", i, ": ",
                                    slot.status().message()));
    }
    const Device& device = *(*slot)->device;
    for (size_t j = 0; j < group->members.size(); ++j) {
      if (group->members[j] == *slot) {
        return absl::InvalidArgumentError(
            absl::StrCat("device ", device.name(), " is named twice (devices #",
                         j, " and #", i, "): a group has one rank per device"));
      }
    }
    if (device.kind() != DeviceKind::kCpu) {
      return absl::FailedPreconditionError(absl::StrCat(
          device.name(), ": collectives on CUDA devices run on NCCL, which "
          "tensord does not drive yet; a group is of host devices (cpu:<i>) "
          "for now"));
    }
    group->members.push_back(*slot);
  }
  ASSIGN_OR_RETURN(group->communicator,
                   ConnectHostCommunicator(static_cast<int>(devices.size()),
                                           impl_->collective_timeout()));
  ASSIGN_OR_RETURN(
      const uint64_t id,
      impl_->groups().Add(session, group,
                          [&](std::weak_ptr<SessionBound> bound) {
                            return impl_->table().Bind(session,
                                                       std::move(bound));
                          }));
  return MetaOfGroup(id, *group);
}

absl::StatusOr<std::vector<TensorMeta>> Runtime::Collective(
    std::string_view session, uint64_t id, const CollectiveArgs& args,
    std::span<const uint64_t> handles) {
  ASSIGN_OR_RETURN(std::unique_ptr<HandleTable::SessionPin> pin,
                   impl_->table().Pin(session));
  ASSIGN_OR_RETURN(std::shared_ptr<Group> group,
                   impl_->groups().Find(session, id));
  const std::string_view name = CollectiveName(args.kind);
  HostCommunicator& comm = *group->communicator;
  const size_t world = group->members.size();
  if (args.kind == CollectiveKind::kBarrier) {
    if (!handles.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "barrier takes no tensors, got ", handles.size()));
    }
    RETURN_IF_ERROR(comm.Barrier());
    group->collectives.fetch_add(1, std::memory_order_relaxed);
    return std::vector<TensorMeta>{};
  }
  std::vector<HandleEntry> entries;
  entries.reserve(handles.size());
  for (uint64_t handle : handles) {
    ASSIGN_OR_RETURN(HandleEntry entry, impl_->table().Lookup(session, handle));
    entries.push_back(std::move(entry));
  }
  std::vector<size_t> rank_of;
  RETURN_IF_ERROR(CheckOnePerMember(name, *group, entries, rank_of));
  // By rank from here.
  std::vector<const StoredTensor*> in(world);
  for (size_t i = 0; i < entries.size(); ++i) {
    in[rank_of[i]] = entries[i].tensor.get();
  }
  const StoredTensor& first = *in[0];
  for (size_t r = 1; r < world; ++r) {
    if (in[r]->dtype != first.dtype || in[r]->shape != first.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          ToAbsl(name), ": the tensor on ", in[r]->device->name(), " is ",
          Describe(*in[r]), " but the one on ", first.device->name(), " is ",
          Describe(first), ": a collective's tensors have one dtype and "
          "shape"));
    }
  }
  const bool reduces = args.kind == CollectiveKind::kAllReduce ||
                       args.kind == CollectiveKind::kReduceScatter;
  if (reduces) RETURN_IF_ERROR(CheckReduceOp(name, args.op, first.dtype));
  if (args.kind == CollectiveKind::kBroadcast && args.root >= world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "broadcast: root is rank ", args.root, ", but the group has ", world,
        " devices (ranks 0 to ", world - 1, ")"));
  }
  const uint64_t numel = first.shape.NumElements();
  const size_t element = DTypeSize(first.dtype);
  std::vector<void*> data(world);
  for (size_t r = 0; r < world; ++r) data[r] = in[r]->buffer->data();

  std::vector<TensorMeta> out;
  out.reserve(entries.size());
  if (args.kind == CollectiveKind::kAllReduce ||
      args.kind == CollectiveKind::kBroadcast) {
    if (numel > 0) {
      RETURN_IF_ERROR(args.kind == CollectiveKind::kAllReduce
                          ? comm.AllReduce(data, numel, first.dtype, args.op)
                          : comm.Broadcast(data, numel * element,
                                           static_cast<int>(args.root)));
    }
    for (const StoredTensor* t : in) t->buffer->BumpVersion();
    for (const HandleEntry& e : entries) out.push_back(MetaOf(e));
    group->collectives.fetch_add(1, std::memory_order_relaxed);
    return out;
  }

  // all_gather and reduce_scatter make new tensors, admitted for the
  // session, and reduce_scatter a temporary per rank.
  Shape out_shape;
  if (args.kind == CollectiveKind::kAllGather) {
    std::vector<int64_t> dims(first.shape.dims().begin(),
                              first.shape.dims().end());
    if (dims.empty()) {
      dims.push_back(static_cast<int64_t>(world));
    } else {
      dims[0] *= static_cast<int64_t>(world);
    }
    ASSIGN_OR_RETURN(out_shape, Shape::Make(dims));
  } else {
    std::vector<int64_t> dims(first.shape.dims().begin(),
                              first.shape.dims().end());
    if (dims.empty() || dims[0] % static_cast<int64_t>(world) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reduce_scatter: the tensors' first dimension must divide by the "
          "group's ", world, " devices, but they are ",
          first.shape.ToString()));
    }
    dims[0] /= static_cast<int64_t>(world);
    ASSIGN_OR_RETURN(out_shape, Shape::Make(dims));
  }
  AdmissionScope scope(session);
  std::vector<Impl::Output> results(world);
  for (size_t r = 0; r < world; ++r) {
    ASSIGN_OR_RETURN(results[r],
                     impl_->AllocateOutput(*group->members[r], first.dtype,
                                           out_shape));
  }
  std::vector<void*> result_data(world);
  for (size_t r = 0; r < world; ++r) {
    result_data[r] = results[r].buffer->data();
  }
  const uint64_t in_bytes = numel * element;
  if (args.kind == CollectiveKind::kAllGather) {
    std::vector<const void*> sources(data.begin(), data.end());
    if (in_bytes > 0) {
      RETURN_IF_ERROR(comm.AllGather(sources, result_data, in_bytes));
    }
  } else if (in_bytes > 0) {
    // Gloo's reduce-scatter is the old typed API: an all-reduce of a copy,
    // then each rank keeps its slice (as PyTorch's Gloo group does).
    std::vector<Impl::Output> temps(world);
    std::vector<void*> temp_data(world);
    for (size_t r = 0; r < world; ++r) {
      ASSIGN_OR_RETURN(temps[r],
                       impl_->AllocateOutput(*group->members[r], first.dtype,
                                             first.shape));
      temp_data[r] = temps[r].buffer->data();
      std::memcpy(temp_data[r], data[r], in_bytes);
    }
    RETURN_IF_ERROR(comm.AllReduce(temp_data, numel, first.dtype, args.op));
    const uint64_t slice = in_bytes / world;
    for (size_t r = 0; r < world; ++r) {
      std::memcpy(result_data[r],
                  static_cast<const uint8_t*>(temp_data[r]) + r * slice,
                  slice);
    }
  }
  std::vector<TensorMeta> by_rank(world);
  for (size_t r = 0; r < world; ++r) {
    auto made = NewStoredTensor();
    made->device = group->members[r]->device.get();
    made->dtype = first.dtype;
    made->shape = out_shape;
    made->nbytes = results[r].nbytes;
    made->buffer = std::move(results[r].buffer);
    ASSIGN_OR_RETURN(by_rank[r], impl_->Register(session, std::move(made), ""));
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    out.push_back(by_rank[rank_of[i]]);
  }
  group->collectives.fetch_add(1, std::memory_order_relaxed);
  return out;
}

absl::StatusOr<std::vector<Runtime::GroupMeta>> Runtime::ListGroups(
    std::string_view session) {
  ASSIGN_OR_RETURN(std::unique_ptr<HandleTable::SessionPin> pin,
                   impl_->table().Pin(session));
  std::vector<GroupMeta> out;
  for (const auto& [id, group] : impl_->groups().List(session)) {
    out.push_back(MetaOfGroup(id, *group));
  }
  return out;
}

absl::Status Runtime::DestroyGroup(std::string_view session, uint64_t id) {
  ASSIGN_OR_RETURN(std::unique_ptr<HandleTable::SessionPin> pin,
                   impl_->table().Pin(session));
  return impl_->groups().Remove(session, id);
}

}  // namespace tensord::core
