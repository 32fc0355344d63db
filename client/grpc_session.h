// Internal: the client's session state and its RPC plumbing.
//
// A Session is shared (std::shared_ptr) by the Client that opened it and by
// every TensorState it made, so the remote session outlives whichever of
// them goes last. All RPCs of the client library go through this file:
// Call() for unary RPCs, Upload() and Fetch() for the streams, and
// ThrowStatus() is the one place where a failed grpc::Status becomes a
// tensord::Error.
//
// Not part of the public API: only the library's .cc files include it (it
// pulls in the generated protobuf headers that client.h keeps out).
// Leases: while a Session lives, a background thread sends KeepAlive every
// third of the lease (and the releases no request carried, see
// ReleaseQuietly); the destructor stops and joins it before closing the
// session. Every reply's `tensord-instance` metadata is compared with the
// one the session first saw: a change means the server restarted, and the
// call throws FAILED_PRECONDITION "server restarted ...".
// Exactly-once: Call() gives each mutating request a request id (metadata
// `tensord-request-id`) and retries it, and idempotent reads, on
// UNAVAILABLE a bounded number of times with backoff.
// Thread-safety: a Session's identity is fixed after Open()/Attach(), its
// stub is thread-safe and its mutable state is atomic or locked, so every
// method may be called concurrently.
#ifndef TENSORD_CLIENT_GRPC_SESSION_H_
#define TENSORD_CLIENT_GRPC_SESSION_H_

#include <grpcpp/client_context.h>
#include <grpcpp/impl/codegen/rpc_method.h>
#include <grpcpp/support/status.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "client/command_stream.h"
#include "core/base/device.h"
#include "tensord/client.h"
#include "tensord/v1/tensord.grpc.pb.h"
#include "tensord/v1/tensord.pb.h"

namespace tensord::client::internal {

namespace v1 = ::tensord::v1;

// Throws the Error that carries `status`'s code and message, for a call
// made with `context`: unanswered() when no tensord server answered it (its
// trailers lack `tensord-instance`, which every server reply carries).
// `status` must not be OK.
[[noreturn]] void ThrowStatus(const grpc::Status& status,
                              const grpc::ClientContext& context);

class Session : public std::enable_shared_from_this<Session> {
 public:
  // Opens a session on `channel` (options.session empty), or attaches to
  // the existing session options.session (NOT_FOUND when it is unknown or
  // its lease ran out). Throws Error (UNAVAILABLE when the server cannot be
  // reached).
  static std::shared_ptr<Session> Open(std::shared_ptr<grpc::Channel> channel,
                                       const ClientOptions& options = {});

  // Stops the keepalive thread, then closes the remote session (freeing
  // whatever it still holds); a failure is ignored since there is nobody
  // left to tell.
  ~Session();

  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const std::string& id() const { return id_; }
  // The lease the server granted (0 = never expires).
  std::chrono::milliseconds ttl() const { return ttl_; }
  // The server instance id this session belongs to.
  const std::string& instance() const { return instance_; }
  // "node/" when the session names its devices by the server's node
  // (ClientOptions::qualify_devices), else "": prefixed to every device
  // name the server replies with.
  const std::string& node_prefix() const { return node_prefix_; }
  // The session of another node of the same tensord::Cluster, by node name
  // (null when there is none): how to() moves a tensor between nodes. Set
  // once by the Cluster, before the session is shared.
  using NodeLookup =
      std::function<std::shared_ptr<const Session>(std::string_view node)>;
  void set_node_lookup(NodeLookup lookup) { node_lookup_ = std::move(lookup); }
  bool has_node_lookup() const { return node_lookup_ != nullptr; }
  std::shared_ptr<const Session> PeerSession(std::string_view node) const {
    return node_lookup_ ? node_lookup_(node) : nullptr;
  }

  // Performs the unary RPC `method` with `request`, filling in the session
  // id when the request has one. Mutating requests carry a fresh request
  // id; those and reads are retried on UNAVAILABLE (not on "server is
  // shutting down"). Returns the response; throws Error.
  template <typename Request, typename Response>
  Response Call(grpc::Status (v1::TensorService::Stub::*method)(
                    grpc::ClientContext*, const Request&, Response*),
                Request request) const {
    if constexpr (requires { request.set_session(id_); }) {
      request.set_session(id_);
    }
    constexpr bool kMutating =
        std::is_same_v<Request, v1::CreateRequest> ||
        std::is_same_v<Request, v1::ToRequest> ||
        std::is_same_v<Request, v1::BinaryRequest> ||
        std::is_same_v<Request, v1::MatMulRequest> ||
        std::is_same_v<Request, v1::RunRequest> ||
        std::is_same_v<Request, v1::ExecuteRequest> ||
        std::is_same_v<Request, v1::RegisterProgramRequest> ||
        std::is_same_v<Request, v1::RunProgramRequest> ||
        std::is_same_v<Request, v1::ReleaseProgramRequest> ||
        std::is_same_v<Request, v1::CreateGroupRequest> ||
        std::is_same_v<Request, v1::CollectiveRequest> ||
        std::is_same_v<Request, v1::DestroyGroupRequest> ||
        std::is_same_v<Request, v1::ReleaseRequest> ||
        std::is_same_v<Request, v1::RegisterSharedMemoryRequest> ||
        std::is_same_v<Request, v1::UnregisterSharedMemoryRequest> ||
        std::is_same_v<Request, v1::UploadFromSharedMemoryRequest> ||
        std::is_same_v<Request, v1::GrantTransferRequest> ||
        std::is_same_v<Request, v1::ImportRequest>;
    constexpr bool kRetryable =
        !std::is_same_v<Request, v1::OpenSessionRequest> &&
        !std::is_same_v<Request, v1::CloseSessionRequest>;
    // What a listing shows must not include tensors this client already
    // let go of: views wait for the releases in flight.
    constexpr bool kView = std::is_same_v<Request, v1::ListTensorsRequest> ||
                           std::is_same_v<Request, v1::ListDevicesRequest> ||
                           std::is_same_v<Request, v1::GetStatsRequest> ||
                           std::is_same_v<Request, v1::ListSessionsRequest> ||
                           std::is_same_v<Request, v1::ListAllTensorsRequest>;
    if constexpr (kView) WaitForReleases();
    // Tensors dropped since the last request ride this one (see
    // ReleaseQuietly); if it fails they wait for the next (the server
    // ignores a handle it already released). Taken before the drain below,
    // so every streamed command that used them has run when they go.
    DroppedHandles carried(*this);
    if constexpr (requires { request.mutable_release(); }) {
      carried.TakeInto(request.mutable_release());
    }
    // A unary call sees everything the stream was given before it (and
    // is a sync point: a failure of a streamed command is thrown here).
    if constexpr (!std::is_same_v<Request, v1::OpenSessionRequest> &&
                  !std::is_same_v<Request, v1::CloseSessionRequest>) {
      DrainStream();
    }
    const std::string request_id = kMutating ? NextRequestId() : "";
    bool waited_for_releases = false;
    for (int attempt = 0;; ++attempt) {
      grpc::ClientContext context;
      if (kMutating) context.AddMetadata(kRequestIdKey, request_id);
      Response response;
      grpc::Status status =
          (stub_.get()->*method)(&context, request, &response);
      CheckInstance(context);
      if (status.ok()) {
        carried.Sent();
        return response;
      }
      // Out of memory while releases of this client are still in flight:
      // the memory they free may be what this call needs. Wait, try again.
      // (What this request carried goes again with the others; the server
      // skips any it released already.)
      if (kMutating && !waited_for_releases &&
          status.error_code() == StatusCode::RESOURCE_EXHAUSTED) {
        carried.GiveBack();
        if (WaitForReleases()) {
          waited_for_releases = true;
          continue;
        }
      }
      if (!kRetryable || !ShouldRetry(status, attempt)) {
        ThrowStatus(status, context);
      }
    }
  }

  // Throws FAILED_PRECONDITION "server restarted (instance X → Y): ..." when
  // `context`'s reply came from another server instance than the session's.
  void CheckInstance(const grpc::ClientContext& context) const;
  // True (after sleeping the backoff) when a call that failed with
  // `status` on attempt `attempt` (0-based) should be tried again.
  static bool ShouldRetry(const grpc::Status& status, int attempt);
  // A request id unique to this Session object.
  std::string NextRequestId() const;
  static constexpr char kRequestIdKey[] = "tensord-request-id";
  static constexpr char kInstanceKey[] = "tensord-instance";
  // Trailing metadata naming torch's exception class of a failed call.
  static constexpr char kErrorKindKey[] = "tensord-error-kind";

  // Makes a tensor from `bytes`: inline in Create up to kInlineCreateBytes,
  // else streamed through Upload in chunks of kUploadChunkBytes (Upload's
  // data skips protobuf's copies on both ends; Create's does not, which
  // costs more than the stream's extra frames from about 64 KiB on).
  // Returns the new tensor's metadata; throws Error.
  static constexpr size_t kInlineCreateBytes = size_t{64} << 10;
  static constexpr size_t kUploadChunkBytes = size_t{1} << 20;
  v1::TensorInfo CreateFromBytes(v1::DType dtype,
                                 const std::vector<int64_t>& shape,
                                 std::string_view bytes,
                                 const std::string& device) const;

  // All bytes of tensor `handle`. Tensors of at most kUploadChunkBytes
  // (`nbytes` as the caller knows it) come in one unary Read; larger ones
  // are streamed by Fetch. Each chunk's offset
  // must continue the bytes so far and its CRC-32 must match, and the total
  // must equal the tensor's size: DATA_LOSS otherwise. A stream broken by
  // UNAVAILABLE is resumed from the last good offset a few times.
  std::string Fetch(uint64_t handle, uint64_t nbytes) const;
  // The streamed path of Fetch: hands the `nbytes` bytes of tensor `handle`
  // to `append` in order, piece by piece as they lie in the received
  // slices (one copy: the caller's), resuming a broken stream a few times.
  void StreamBytes(
      uint64_t handle, uint64_t nbytes,
      const std::function<void(const uint8_t*, size_t)>& append) const;
  // A small fetch (at most kUploadChunkBytes) as a read on the command
  // stream, in order with what was sent before it: nullopt when there is
  // no stream or the tensor is larger (then drain and fetch unary).
  std::optional<std::string> ReadOnStream(uint64_t handle,
                                          uint64_t nbytes) const;
  // A Batch's list (at most kUploadChunkBytes encoded) as one execute
  // command on the stream, in order with what was sent before it (so
  // nothing is drained first), waiting for its reply: one round trip.
  // nullopt when there is no stream or the list is larger (then the unary
  // Execute). Throws the list's error as the stream throws a failure.
  std::optional<v1::ExecuteResponse> ExecuteOnStream(
      const v1::ExecuteRequest& request) const;
  // A Read's bytes once their size and CRC-32 check out (DATA_LOSS
  // otherwise).
  static std::string CheckedData(uint64_t handle, v1::FetchChunk chunk);
  // Fetch into `dst` (exactly `nbytes` long): through the automatic region
  // when it applies, else streamed straight into `dst`.
  void FetchInto(uint64_t handle, uint64_t nbytes,
                 std::span<std::byte> dst) const;

  // --- Shared memory (client/shared_memory.cc) ---
  // Creates a POSIX shared-memory object with `data_bytes` of data area,
  // writes the cookie and registers it. Throws Error (the server's code
  // when it refuses: NOT_FOUND from a remote server).
  std::shared_ptr<SharedMemoryRegion> CreateRegion(size_t data_bytes) const;
  // UploadFromSharedMemory / FetchToSharedMemory with `region` (which must
  // be this session's: INVALID_ARGUMENT otherwise).
  v1::TensorInfo UploadShared(const SharedMemoryRegion& region,
                              uint64_t offset, v1::DType dtype,
                              const std::vector<int64_t>& shape,
                              const std::string& device) const;
  void FetchShared(uint64_t handle, const SharedMemoryRegion& region,
                   uint64_t offset) const;
  // The automatic path's region (nullptr: disabled). Transfers of more
  // than kSharedMemoryMinBytes that fit it use it, one at a time.
  void SetAutoRegion(std::shared_ptr<SharedMemoryRegion> region) const;
  bool HasAutoRegion() const;
  static constexpr size_t kSharedMemoryMinBytes = kUploadChunkBytes;

  // Releases `handle` without waiting (destructors should not pay a round
  // trip); failures are ignored. With a server that takes release lists
  // (Limits.max_release_handles > 0) the handle rides the session's next
  // Create, To, Run or Execute, or goes in a Release of its own after
  // kReleaseFlushDelay, whichever comes first; with an older server it goes
  // at once in its own Release. Later listings and an out-of-memory retry
  // send what is left and wait for the releases in flight.
  void ReleaseQuietly(uint64_t handle) const noexcept;
  static constexpr std::chrono::milliseconds kReleaseFlushDelay{2};
  // Sends every dropped handle not yet sent, then blocks until every
  // release sent so far has been answered. Returns true if there was one
  // to send or wait for.
  bool WaitForReleases() const;

  // The handles one request carries (Call): taken from the dropped list and
  // counted as a release in flight until Sent() (the server has released
  // them) or the destructor (the request failed: they go back to the list
  // for the next one).
  class DroppedHandles {
   public:
    explicit DroppedHandles(const Session& session) : session_(session) {}
    ~DroppedHandles() { session_.EndCarry(&taken_, /*sent=*/false); }
    DroppedHandles(const DroppedHandles&) = delete;
    DroppedHandles& operator=(const DroppedHandles&) = delete;
    template <typename Repeated>
    void TakeInto(Repeated* release) {
      session_.TakeDropped(&taken_);
      release->Add(taken_.begin(), taken_.end());
    }
    void Sent() { session_.EndCarry(&taken_, /*sent=*/true); }
    void GiveBack() { session_.EndCarry(&taken_, /*sent=*/false); }

   private:
    const Session& session_;
    std::vector<uint64_t> taken_;
  };

  // Wraps the metadata of a tensor this session just made in shared state
  // whose destruction releases it. Throws Error(INTERNAL) for a dtype this
  // client does not know (after releasing the tensor).
  std::shared_ptr<const TensorState> Adopt(const v1::TensorInfo& info) const;

  // --- The pipelined path (issue 17; client/command_stream.h) ---
  // Ops, creates, moves, small reads and releases go on the session's
  // command stream without waiting; their results' metadata is planned
  // here with the server's own planner (core/planner/op_plan.h) and each device's
  // capability table, so PyTorch's errors are thrown by the call that
  // causes them. Each *OnStream method returns false when the call is not
  // for the stream (pipelining off or unsupported by the server, a device
  // name or an argument the server should judge, an operand this client
  // has no metadata for): the caller then makes the unary call, whose
  // answer — error included — is the server's own.
  bool pipelined() const { return pipelined_; }
  // `op` on the stream. `*result`: the new tensor, or nullptr for an
  // in-place op (the result is its target).
  bool RunOnStream(const v1::Op& op,
                   std::shared_ptr<const TensorState>* result) const;
  // A Batch's list on the stream without waiting for its reply, when this
  // client plans every op of it: no op gives back its operand or depends
  // on autograd state (the table's returns_input, autograd_state), every
  // operand's metadata is known, every op plans, each op is kept at most
  // once and the list is at most kUploadChunkBytes encoded. `*kept`: the
  // kept results' new tensors, in the order of `keep`, under handles this
  // client chose (ExecuteRequest.results). False otherwise (a plan's error
  // included): the caller sends the list and waits, and the server's
  // answer is the list's.
  // `*request` is moved into the command when it is sent.
  bool ExecuteOnStreamPlanned(
      v1::ExecuteRequest* request,
      std::vector<std::shared_ptr<const TensorState>>* kept) const;
  // A fill (not arange) or inline data on the stream.
  bool CreateOnStream(v1::CreateRequest request,
                      std::shared_ptr<const TensorState>* result) const;
  // x.to(device, copy) on the stream; `*result` is null when x is already
  // there and no copy is asked for (x itself is the result).
  bool ToOnStream(const TensorState& x, const std::string& device, bool copy,
                  std::shared_ptr<const TensorState>* result) const;
  // Waits until every streamed command has run; throws the first failure
  // not yet reported. A no-op without a stream.
  void DrainStream() const;

  // The metadata of live tensors by handle (TensorState registers itself).
  void Register(const TensorState* state) const;
  void Unregister(uint64_t handle) const;

  // Call() for an RPC that makes a tensor, then Adopt() of the result.
  template <typename Request>
  std::shared_ptr<const TensorState> MakeTensor(
      grpc::Status (v1::TensorService::Stub::*method)(grpc::ClientContext*,
                                                      const Request&,
                                                      v1::TensorResponse*),
      Request request) const {
    return Adopt(Call(method, std::move(request)).tensor());
  }

 private:
  Session(std::shared_ptr<grpc::ChannelInterface> channel, std::string id,
          std::chrono::milliseconds ttl, bool keepalive, std::string instance,
          uint32_t max_release_handles);
  // What the pipelined path knows of each device (from ListDevices).
  struct DeviceEntry {
    std::string name;  // canonical
    std::string kind;  // "cpu", "cuda"
    core::Capabilities caps;
  };
  // Turns pipelining on when the server reports capability tables (a
  // server with the command stream).
  void LoadDevices();
  // The device `device` names, or nullptr when the server should judge the
  // name (malformed, unknown).
  const DeviceEntry* FindDevice(const std::string& device) const;
  // The command stream, started on first use. Null when it cannot start.
  CommandStream* Stream() const;
  // Sends `cmd` on the stream, with the dropped handles riding in the
  // `release` list of the request inside it.
  uint64_t SendCommand(v1::Command cmd, bool want_reply = false) const;
  // A registered TensorState for a streamed result.
  std::shared_ptr<const TensorState> NewState(uint64_t handle,
                                              const DeviceEntry& device,
                                              DType dtype,
                                              std::vector<int64_t> shape) const;
  // Throws why tensor `handle` does not exist, if the stream says so.
  void CheckAlive(uint64_t handle) const;
  // The background thread's body: KeepAlive every third of the lease (when
  // asked for), and the dropped handles no request carried within
  // kReleaseFlushDelay.
  void BackgroundLoop(bool keepalive);
  // Sends one KeepAlive. False when there is nothing left to keep alive
  // (the session is gone or the server restarted).
  bool SendKeepAlive();
  // Moves up to max_release_handles_ dropped handles into `out` (empty:
  // none are waiting) and, if it took any, counts one release in flight.
  void TakeDropped(std::vector<uint64_t>* out) const;
  // Ends what TakeDropped began for `taken` (nothing when it is empty): the
  // release in flight is over; unless `sent`, the handles go back to the
  // front of the list. Leaves `taken` empty.
  void EndCarry(std::vector<uint64_t>* taken, bool sent) const noexcept;
  // Sends every dropped handle: on the command stream once it is started
  // (without waiting), else in Release calls that it waits for (its callers
  // are the background thread and WaitForReleases). True if there was any.
  bool FlushDropped() const noexcept;
  // An asynchronous Release of `handle`, for a server that takes no release
  // lists (ReleaseQuietly); the caller has counted it in pending_releases_,
  // and its answer uncounts it.
  void SendRelease(uint64_t handle) const;
  // A Release of `listed` that returns when it is answered or failed
  // (ignored), at most a KeepAlive period later; nothing once the session
  // is stopping (its close frees them).
  void ReleaseNow(const std::vector<uint64_t>& listed) const;
  // Sets the background thread's flush timer, unless it is set already.
  void ArmFlush() const;

  const std::shared_ptr<grpc::ChannelInterface> channel_;
  std::unique_ptr<v1::TensorService::Stub> stub_;
  // Upload and Fetch called raw (ByteBuffer messages in the generated
  // stub's place), so bulk data skips protobuf's copies (proto/wire/bulk.h).
  const grpc::internal::RpcMethod upload_method_;
  const grpc::internal::RpcMethod fetch_method_;
  const std::string id_;
  const std::chrono::milliseconds ttl_;
  const std::string instance_;
  const std::string request_id_prefix_;
  mutable std::atomic<uint64_t> next_request_id_{0};

  // Guards auto_region_ and is held for the whole of each transfer through
  // it (one region, one transfer at a time).
  mutable std::mutex shm_mu_;
  mutable std::shared_ptr<SharedMemoryRegion> auto_region_;

  // Handles one request may list (the server's Limits, capped at
  // kMaxCarriedReleases); 0: the server takes no lists.
  static constexpr uint32_t kMaxCarriedReleases = 1024;
  const uint32_t max_release_handles_;
  mutable std::mutex release_mu_;
  mutable std::condition_variable release_cv_;
  mutable int pending_releases_ = 0;      // guarded by release_mu_
  mutable std::vector<uint64_t> dropped_;  // guarded by release_mu_

  std::string node_prefix_;           // set once, in Open
  NodeLookup node_lookup_;            // set once, by a Cluster
  bool pipelined_ = false;            // set once, by LoadDevices
  std::vector<DeviceEntry> devices_;  // set once, by LoadDevices
  mutable std::once_flag stream_once_;
  mutable std::unique_ptr<CommandStream> stream_;  // set once, in Stream()
  mutable std::atomic<CommandStream*> started_{nullptr};  // stream_, once set
  mutable std::mutex registry_mu_;
  mutable std::unordered_map<uint64_t, const TensorState*> registry_;

  mutable std::mutex background_mu_;
  mutable std::condition_variable background_cv_;
  bool stopping_ = false;  // guarded by background_mu_
  // When the background thread sends the dropped handles; guarded by
  // background_mu_.
  mutable std::optional<std::chrono::steady_clock::time_point> flush_at_;
  grpc::ClientContext* keepalive_call_ = nullptr;  // guarded by background_mu_
  // A ReleaseNow in flight (one of them), for ~Session to cancel; guarded
  // by background_mu_.
  mutable grpc::ClientContext* release_call_ = nullptr;
  std::thread background_;  // last: started once the rest is set
};

// What a Tensor (and all its copies) share: the session that owns the
// remote tensor, and the tensor's metadata, fixed at creation.
struct TensorState {
  ~TensorState();  // releases the remote tensor

  std::shared_ptr<const Session> session;
  uint64_t handle = 0;
  Device device = "cpu";
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  uint64_t nbytes = 0;
};

// Wire enum <-> client enum. DTypeFromProto throws Error(INTERNAL) for a
// value this client does not know (a newer server).
v1::DType DTypeToProto(DType dtype);
DType DTypeFromProto(v1::DType dtype);

}  // namespace tensord::client::internal

#endif  // TENSORD_CLIENT_GRPC_SESSION_H_
