#include "core/autograd/engine.h"
#include "core/runtime/runtime_impl.h"

namespace tensord::core {
namespace {

bool IsRandom(FillSpec::Kind kind) {
  return kind == FillSpec::Kind::kRand || kind == FillSpec::Kind::kRandn;
}

// Checks the parameters of a fill; for an arange with no dims, returns its
// 1-D length in `arange_length`.
absl::Status ValidateFill(const FillSpec& fill, bool shape_from_range,
                          double arange_end, int64_t* arange_length) {
  switch (fill.kind) {
    case FillSpec::Kind::kZeros:
    case FillSpec::Kind::kOnes:
    case FillSpec::Kind::kFull:
      return absl::OkStatus();
    case FillSpec::Kind::kArange: {
      if (!std::isfinite(fill.start) || !std::isfinite(fill.step)) {
        return absl::InvalidArgumentError(
            absl::StrCat("arange: start (", fill.start, ") and step (",
                         fill.step, ") must be finite"));
      }
      if (fill.step == 0) {
        return absl::InvalidArgumentError("arange: step must be nonzero");
      }
      if (!shape_from_range) return absl::OkStatus();
      if (!std::isfinite(arange_end)) {
        return absl::InvalidArgumentError(
            absl::StrCat("arange: end (", arange_end, ") must be finite"));
      }
      const double length = std::ceil((arange_end - fill.start) / fill.step);
      if (length < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "arange: upper bound and larger bound inconsistent with step sign "
            "(start ",
            fill.start, ", end ", arange_end, ", step ", fill.step, ")"));
      }
      if (!(length <= static_cast<double>(kMaxTensorBytes))) {
        return absl::InvalidArgumentError(absl::StrCat(
            "arange: ", length, " elements are too many for one tensor"));
      }
      *arange_length = static_cast<int64_t>(length);
      return absl::OkStatus();
    }
    case FillSpec::Kind::kRand:
      if (!std::isfinite(fill.low) || !std::isfinite(fill.high) ||
          fill.low > fill.high) {
        return absl::InvalidArgumentError(absl::StrCat(
            "rand expects a finite [low, high) range with low <= high, but "
            "found low=",
            fill.low, " and high=", fill.high));
      }
      return absl::OkStatus();
    case FillSpec::Kind::kRandn:
      if (!std::isfinite(fill.mean) || !std::isfinite(fill.stddev) ||
          fill.stddev < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "randn expects a finite mean and stddev >= 0, but found mean=",
            fill.mean, " and stddev=", fill.stddev));
      }
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("invalid fill kind ", static_cast<int>(fill.kind)));
}

}  // namespace

// --- Upload ------------------------------------------------------------------

// Copies through host memory (Upload::AppendFrom and Reader::ReadWith on a
// device whose memory is not host memory) go in pieces of this size: small
// enough that the extra pass stays in cache.
constexpr uint64_t kBounceBytes = uint64_t{1} << 20;

// What an open stream of a session holds (an upload's buffer, a reader's
// tensor), tied to the session (HandleTable::Bind): when the session ends
// the hold lets go of it at once, so a stalled stream keeps no memory past
// its session, and the stream's next use fails with the reason.
template <typename T>
class SessionHold final : public SessionBound {
 public:
  explicit SessionHold(std::shared_ptr<T> held) : held_(std::move(held)) {}

  void OnSessionEnded(const absl::Status& why) override {
    std::shared_ptr<T> dropped;  // freed after the lock
    absl::MutexLock lock(&mu_);
    ended_ = why;
    dropped = std::move(held_);
  }

  // Runs `use(T&)` under the hold's lock (the session cannot drop the
  // object meanwhile). The session's end status once it ended;
  // FAILED_PRECONDITION once taken.
  template <typename Use>
  absl::Status With(Use&& use) {
    absl::MutexLock lock(&mu_);
    if (!ended_.ok()) return ended_;
    if (held_ == nullptr) {
      return absl::FailedPreconditionError("the stream is already finished");
    }
    return use(*held_);
  }

  // OK while the session lives; its end status once it ended.
  absl::Status Alive() {
    absl::MutexLock lock(&mu_);
    return ended_;
  }

  // Takes the object out (the stream is done with the session).
  absl::StatusOr<std::shared_ptr<T>> Take() {
    absl::MutexLock lock(&mu_);
    if (!ended_.ok()) return ended_;
    if (held_ == nullptr) {
      return absl::FailedPreconditionError("the stream is already finished");
    }
    return std::move(held_);
  }

 private:
  absl::Mutex mu_;
  absl::Status ended_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<T> held_ ABSL_GUARDED_BY(mu_);
};

// Binds a new hold of `held` to the session.
template <typename T>
absl::StatusOr<std::shared_ptr<SessionHold<T>>> HoldFor(
    HandleTable& table, std::string_view session, std::shared_ptr<T> held) {
  auto hold = std::make_shared<SessionHold<T>>(std::move(held));
  RETURN_IF_ERROR(table.Bind(session, hold));
  return hold;
}

// Renews the session's lease for a message of a stream holding `hold`. Once
// the session has ended, the reason it ended (rather than "unknown
// session").
template <typename T>
absl::Status RenewFor(HandleTable& table, std::string_view session,
                      SessionHold<T>& hold) {
  RETURN_IF_ERROR(hold.Alive());
  absl::Status renewed = table.Renew(session).status();
  if (!renewed.ok()) {
    // Ended between the two lines: the session has dropped it from the
    // table and is about to tell the hold.
    RETURN_IF_ERROR(hold.Alive());
  }
  return renewed;
}

class Runtime::Impl::UploadImpl final : public Runtime::Upload {
 public:
  UploadImpl(Impl* runtime, std::string_view session, DeviceSlot* slot,
             DType dtype, Shape shape, uint64_t nbytes,
             std::shared_ptr<SessionHold<Buffer>> buffer, std::string_view tag)
      : runtime_(runtime),
        session_(session),
        slot_(slot),
        dtype_(dtype),
        shape_(std::move(shape)),
        nbytes_(nbytes),
        buffer_(std::move(buffer)),
        tag_(tag) {}

  absl::Status Append(std::span<const uint8_t> data) override {
    RETURN_IF_ERROR(CheckRoom(data.size()));
    return buffer_->With([&](Buffer& buffer) -> absl::Status {
      RETURN_IF_ERROR(CheckBoolBytes(data, received_));
      RETURN_IF_ERROR(slot_->device->CopyFromHost(data.data(), buffer,
                                                  received_, data.size()));
      received_ += data.size();
      return absl::OkStatus();
    });
  }

  absl::Status AppendFrom(uint64_t n, const Filler& fill) override {
    RETURN_IF_ERROR(CheckRoom(n));
    if (slot_->device->kind() == DeviceKind::kCpu) {
      return buffer_->With([&](Buffer& buffer) -> absl::Status {
        auto* at = static_cast<uint8_t*>(buffer.data()) + received_;
        const std::span<uint8_t> dst(at, static_cast<size_t>(n));
        RETURN_IF_ERROR(fill(dst, 0));
        // Checked where the bytes now lie: the source may still change.
        RETURN_IF_ERROR(CheckBoolBytes(dst, received_));
        received_ += n;
        return absl::OkStatus();
      });
    }
    // Piece by piece; a failed piece takes back the ones before it, so a
    // failed call appends nothing on every device (as on the CPU).
    const uint64_t start = received_;
    std::vector<uint8_t> bounce(std::min<uint64_t>(n, kBounceBytes));
    for (uint64_t done = 0; done < n; done += bounce.size()) {
      const size_t k =
          static_cast<size_t>(std::min<uint64_t>(bounce.size(), n - done));
      absl::Status status = fill({bounce.data(), k}, done);
      if (status.ok()) status = Append({bounce.data(), k});
      if (!status.ok()) {
        received_ = start;
        return status;
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<TensorMeta> Finish() override {
    RETURN_IF_ERROR(Renew());
    if (received_ != nbytes_) {
      return absl::InvalidArgumentError(
          absl::StrCat("upload incomplete: received ", received_, " of ",
                       nbytes_, " bytes for shape ", shape_.ToString(),
                       " of dtype ", ToAbsl(DTypeName(dtype_))));
    }
    ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer, buffer_->Take());
    return runtime_->Register(session_, *slot_, dtype_, shape_, nbytes_,
                              std::move(buffer), tag_);
  }

  uint64_t expected_bytes() const override { return nbytes_; }
  uint64_t received_bytes() const override { return received_; }

 private:
  // Each piece of the upload renews the session's lease.
  absl::Status Renew() {
    return RenewFor(runtime_->table(), session_, *buffer_);
  }

  // OK when `n` more bytes fit (renewing the lease); the errors of Append
  // otherwise.
  absl::Status CheckRoom(uint64_t n) {
    RETURN_IF_ERROR(Renew());
    if (n > nbytes_ - received_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "upload overflows the tensor: ", n, " more bytes after ", received_,
          " of ", nbytes_, " (shape ", shape_.ToString(), " of dtype ",
          ToAbsl(DTypeName(dtype_)), ")"));
    }
    return absl::OkStatus();
  }

  // BOOL elements are one byte, 0 or 1 (tensord.proto); `at` is the bytes'
  // offset in the tensor.
  absl::Status CheckBoolBytes(std::span<const uint8_t> bytes,
                              uint64_t at) const {
    if (dtype_ != DType::kBool) return absl::OkStatus();
    return CheckBoolData(bytes, at);
  }

  Impl* const runtime_;  // borrowed: the Runtime outlives its uploads
  const std::string session_;
  DeviceSlot* const slot_;
  const DType dtype_;
  const Shape shape_;
  const uint64_t nbytes_;
  const std::shared_ptr<SessionHold<Buffer>> buffer_;
  const std::string tag_;
  uint64_t received_ = 0;
};

// --- Reader ------------------------------------------------------------------

class Runtime::Impl::ReaderImpl final : public Runtime::Reader {
 public:
  ReaderImpl(Impl* runtime, std::string_view session, TensorMeta meta,
             std::shared_ptr<SessionHold<const StoredTensor>> tensor,
             uint64_t nbytes, bool renews)
      : runtime_(runtime),
        session_(session),
        meta_(std::move(meta)),
        tensor_(std::move(tensor)),
        nbytes_(nbytes),
        renews_(renews) {}

  const TensorMeta& meta() const override { return meta_; }

  absl::Status Read(uint64_t offset, std::span<uint8_t> dst) override {
    RETURN_IF_ERROR(Begin(offset, dst.size()));
    if (dst.empty()) return absl::OkStatus();
    return tensor_->With([&](const StoredTensor& t) {
      return t.device->CopyToHost(*t.buffer, offset, dst.data(), dst.size());
    });
  }

  absl::Status ReadWith(uint64_t offset, uint64_t n,
                        const Consumer& consume) override {
    RETURN_IF_ERROR(Begin(offset, n));
    bool on_host = false;
    RETURN_IF_ERROR(tensor_->With([&](const StoredTensor& t) -> absl::Status {
      on_host = t.device->kind() == DeviceKind::kCpu;
      if (!on_host) return absl::OkStatus();
      const auto* at = static_cast<const uint8_t*>(t.buffer->data()) + offset;
      return consume({at, static_cast<size_t>(n)}, 0);
    }));
    if (on_host) return absl::OkStatus();
    std::vector<uint8_t> bounce(std::min<uint64_t>(n, kBounceBytes));
    for (uint64_t done = 0; done < n; done += bounce.size()) {
      const size_t k =
          static_cast<size_t>(std::min<uint64_t>(bounce.size(), n - done));
      RETURN_IF_ERROR(Read(offset + done, {bounce.data(), k}));
      RETURN_IF_ERROR(consume({bounce.data(), k}, done));
    }
    return absl::OkStatus();
  }

 private:
  // Renews the session's lease (each read is a message of the stream) and
  // checks that [offset, offset + n) lies in the tensor (OUT_OF_RANGE).
  absl::Status Begin(uint64_t offset, uint64_t n) {
    if (renews_)
      RETURN_IF_ERROR(RenewFor(runtime_->table(), session_, *tensor_));
    if (offset > nbytes_ || n > nbytes_ - offset) {
      return absl::OutOfRangeError(
          absl::StrCat("read of ", n, " bytes at offset ", offset,
                       " is past the end of tensor ", meta_.handle, " (",
                       nbytes_, " bytes)"));
    }
    return absl::OkStatus();
  }

  Impl* const runtime_;  // borrowed: the Runtime outlives its readers
  const std::string session_;
  const TensorMeta meta_;
  // Keeps the memory alive after a release of the handle, until the
  // session ends.
  const std::shared_ptr<SessionHold<const StoredTensor>> tensor_;
  const uint64_t nbytes_;
  const bool renews_;  // a stream's reader: each read renews the lease
};

absl::StatusOr<TensorMeta> Runtime::CreateFromData(
    std::string_view session, std::string_view device, DType dtype,
    std::span<const int64_t> dims, std::span<const uint8_t> data,
    std::string_view tag) {
  RETURN_IF_ERROR(impl_->table().CheckSession(session));
  RETURN_IF_ERROR(CheckTag(tag));
  ASSIGN_OR_RETURN(DeviceSlot * slot, impl_->FindSlot(device));
  RETURN_IF_ERROR(ValidateDType(dtype));
  ASSIGN_OR_RETURN(Shape shape, Shape::Make(dims));
  ASSIGN_OR_RETURN(uint64_t nbytes, shape.ByteSize(dtype));
  if (data.size() != nbytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data is ", data.size(), " bytes but shape ", shape.ToString(),
        " of dtype ", ToAbsl(DTypeName(dtype)), " needs ", nbytes, " bytes"));
  }
  if (dtype == DType::kBool) RETURN_IF_ERROR(CheckBoolData(data, 0));
  AdmissionScope scope(session);
  ASSIGN_OR_RETURN(Admission admission, impl_->Admit(*slot, nbytes));
  ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer,
                   impl_->Allocate(std::move(admission)));
  RETURN_IF_ERROR(slot->device->CopyFromHost(data.data(), *buffer, 0, nbytes));
  return impl_->Register(session, *slot, dtype, std::move(shape), nbytes,
                         std::move(buffer), tag);
}

absl::StatusOr<uint64_t> Runtime::RegisterSharedMemory(
    std::string_view session, std::string_view name, uint64_t size,
    std::string_view cookie) {
  RETURN_IF_ERROR(impl_->table().CheckSession(session));
  ASSIGN_OR_RETURN(
      std::shared_ptr<SharedMemoryMapping> mapping,
      SharedMemoryMapping::Open(name, size, cookie, &impl_->shm_regions));
  return impl_->table().AddRegion(session, std::move(mapping));
}

absl::Status Runtime::UnregisterSharedMemory(std::string_view session,
                                             uint64_t region) {
  return impl_->table().RemoveRegion(session, region);
}

absl::StatusOr<TensorMeta> Runtime::CreateFromSharedMemory(
    std::string_view session, uint64_t region, uint64_t offset,
    std::string_view device, DType dtype, std::span<const int64_t> dims,
    std::string_view tag) {
  // The mapping stays alive for the copy even if unregistered meanwhile.
  ASSIGN_OR_RETURN(std::shared_ptr<SharedMemoryMapping> mapping,
                   impl_->table().FindRegion(session, region));
  RETURN_IF_ERROR(ValidateDType(dtype));
  ASSIGN_OR_RETURN(Shape shape, Shape::Make(dims));
  ASSIGN_OR_RETURN(uint64_t nbytes, shape.ByteSize(dtype));
  // The copy out of the client's mapping must be guarded
  // (core/runtime/shared_memory.h): straight into the tensor on the CPU device, into
  // a cache-sized buffer then onto the device elsewhere (a device copy
  // cannot be guarded).
  RETURN_IF_ERROR(mapping->CheckRange(offset, nbytes));
  ASSIGN_OR_RETURN(std::unique_ptr<Upload> upload,
                   BeginUpload(session, device, dtype, dims, tag));
  RETURN_IF_ERROR(
      upload->AppendFrom(nbytes, [&](std::span<uint8_t> dst, uint64_t at) {
        return mapping->CopyOut(offset + at, dst);
      }));
  ASSIGN_OR_RETURN(TensorMeta meta, upload->Finish());
  impl_->shm_uploads.fetch_add(1);
  return meta;
}

absl::StatusOr<TensorMeta> Runtime::FetchToSharedMemory(
    std::string_view session, uint64_t handle, uint64_t region,
    uint64_t offset) {
  ASSIGN_OR_RETURN(std::shared_ptr<SharedMemoryMapping> mapping,
                   impl_->table().FindRegion(session, region));
  ASSIGN_OR_RETURN(std::unique_ptr<Reader> reader,
                   OpenReader(session, handle, ReaderUse::kCall));
  const uint64_t nbytes = reader->meta().nbytes;
  RETURN_IF_ERROR(mapping->CheckRange(offset, nbytes));
  RETURN_IF_ERROR(reader->ReadWith(
      0, nbytes, [&](std::span<const uint8_t> src, uint64_t at) {
        return mapping->CopyIn(offset + at, src);
      }));
  impl_->shm_fetches.fetch_add(1);
  return reader->meta();
}

Runtime::SharedMemoryStats Runtime::shared_memory_stats() const {
  SharedMemoryStats stats;
  stats.regions =
      static_cast<uint64_t>(std::max<int64_t>(0, impl_->shm_regions.load()));
  stats.uploads = impl_->shm_uploads.load();
  stats.fetches = impl_->shm_fetches.load();
  return stats;
}

absl::StatusOr<TensorMeta> Runtime::CreateFilled(
    std::string_view session, std::string_view device, DType dtype,
    std::span<const int64_t> dims, const FillSpec& fill, double arange_end,
    std::string_view tag) {
  RETURN_IF_ERROR(impl_->table().CheckSession(session));
  RETURN_IF_ERROR(CheckTag(tag));
  ASSIGN_OR_RETURN(DeviceSlot * slot, impl_->FindSlot(device));
  RETURN_IF_ERROR(ValidateDType(dtype));
  const bool shape_from_range =
      fill.kind == FillSpec::Kind::kArange && dims.empty();
  int64_t arange_length = 0;
  RETURN_IF_ERROR(
      ValidateFill(fill, shape_from_range, arange_end, &arange_length));
  const int64_t range_dims[] = {arange_length};
  ASSIGN_OR_RETURN(
      Shape shape,
      Shape::Make(shape_from_range ? std::span<const int64_t>(range_dims)
                                   : dims));
  RETURN_IF_ERROR(slot->device->Supports(
      IsRandom(fill.kind) ? OpKind::kRandomFill : OpKind::kFill, dtype));
  AdmissionScope scope(session);
  ASSIGN_OR_RETURN(Impl::Output out,
                   impl_->AllocateOutput(*slot, dtype, std::move(shape)));
  RETURN_IF_ERROR(slot->device->Launch({fill, {}, out.ref()}));
  return impl_->Register(session, *slot, dtype, std::move(out.shape),
                         out.nbytes, std::move(out.buffer), tag);
}

absl::StatusOr<std::unique_ptr<Runtime::Upload>> Runtime::BeginUpload(
    std::string_view session, std::string_view device, DType dtype,
    std::span<const int64_t> dims, std::string_view tag) {
  RETURN_IF_ERROR(impl_->table().CheckSession(session));
  RETURN_IF_ERROR(CheckTag(tag));
  ASSIGN_OR_RETURN(DeviceSlot * slot, impl_->FindSlot(device));
  RETURN_IF_ERROR(ValidateDType(dtype));
  ASSIGN_OR_RETURN(Shape shape, Shape::Make(dims));
  AdmissionScope scope(session);
  ASSIGN_OR_RETURN(Impl::Output out,
                   impl_->AllocateOutput(*slot, dtype, std::move(shape)));
  ASSIGN_OR_RETURN(auto buffer,
                   HoldFor(impl_->table(), session, std::move(out.buffer)));
  return std::make_unique<Impl::UploadImpl>(impl_.get(), session, slot, dtype,
                                            std::move(out.shape), out.nbytes,
                                            std::move(buffer), tag);
}

absl::StatusOr<TensorMeta> Runtime::To(std::string_view session,
                                       uint64_t handle, std::string_view device,
                                       bool copy) {
  ASSIGN_OR_RETURN(HandleEntry src, impl_->table().Lookup(session, handle));
  if (device.empty()) {
    return absl::InvalidArgumentError(
        "To needs a target device ('cpu', 'cpu:<index>', 'cuda' or "
        "'cuda:<index>'); an empty name names none");
  }
  ASSIGN_OR_RETURN(DeviceSlot * dst_slot, impl_->FindSlot(device));
  const StoredTensor& t = *src.tensor;
  if (dst_slot->device.get() == t.device && !copy) return MetaOf(src);
  AdmissionScope scope(session);
  ASSIGN_OR_RETURN(Admission admission, impl_->Admit(*dst_slot, t.nbytes));
  ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer,
                   impl_->Allocate(std::move(admission)));
  RETURN_IF_ERROR(dst_slot->device->CopyFromDevice(*t.device, *t.buffer,
                                                   *buffer, t.nbytes));
  auto moved = NewStoredTensor();
  moved->device = dst_slot->device.get();
  moved->dtype = t.dtype;
  moved->shape = t.shape;
  moved->nbytes = t.nbytes;
  moved->buffer = std::move(buffer);
  // Gradients flow back across the move (PyTorch's ToCopyBackward0).
  OpSpec move;
  move.kind = OpSpec::Kind::kMoveTo;
  const Impl::Value in[] = {Impl::Value{src.tensor, src}};
  impl_->executor().autograd().RecordGrad(move, in, moved, nullptr, {});
  return impl_->Register(session, std::move(moved), src.tag);
}

absl::StatusOr<std::unique_ptr<Runtime::Reader>> Runtime::OpenReader(
    std::string_view session, uint64_t handle, ReaderUse use) {
  ASSIGN_OR_RETURN(HandleEntry entry, impl_->table().Lookup(session, handle));
  TensorMeta meta = MetaOf(entry);
  const uint64_t nbytes = entry.tensor->nbytes;
  const bool stream = use == ReaderUse::kStream;
  std::shared_ptr<SessionHold<const StoredTensor>> tensor;
  if (stream) {
    ASSIGN_OR_RETURN(tensor,
                     HoldFor(impl_->table(), session, std::move(entry.tensor)));
  } else {
    tensor = std::make_shared<SessionHold<const StoredTensor>>(
        std::move(entry.tensor));
  }
  return std::make_unique<Impl::ReaderImpl>(impl_.get(), session,
                                            std::move(meta), std::move(tensor),
                                            nbytes, /*renews=*/stream);
}

}  // namespace tensord::core
