// Runtime: the one entry point the server calls.
//
// Owns the devices, their memory budgets and the session-scoped handle
// table. Every method validates its input completely (device names, dtypes,
// shapes, byte sizes with overflow-checked arithmetic, the same-device rule,
// budgets) before any device work, and reports failures as absl::Status with
// the code DESIGN.md assigns:
//   INVALID_ARGUMENT     bad dtype/shape/size/device name, shape mismatch
//   NOT_FOUND            unknown session, unknown or foreign handle, absent
//                        device (message lists the available devices)
//   FAILED_PRECONDITION  operands on different devices (PyTorch's message),
//                        op not defined for the dtype on the device
//   RESOURCE_EXHAUSTED   device budget exceeded (requested / held / left),
//                        a session quota or the session limit exceeded
//   CANCELLED            Execute's caller cancelled
//   INTERNAL             a bug
// A failed call leaves no tensor and no memory behind.
//
// Thread-safety: all methods are safe to call concurrently. Calls on
// different sessions do not serialize on one another except briefly on the
// session map.
#ifndef TENSORD_CORE_RUNTIME_RUNTIME_H_
#define TENSORD_CORE_RUNTIME_RUNTIME_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/base/device.h"
#include "core/base/dtype.h"
#include "core/base/ops.h"
#include "core/runtime/session_bound.h"
#include "core/base/shape.h"
#include "core/collectives/collective.h"

namespace tensord::core {

// Bounds on the strings a client sends (tensord.proto documents them; a
// longer one is INVALID_ARGUMENT naming the field, its length and the
// bound). Messages and logs quote at most 64 bytes of any of them.
inline constexpr size_t kMaxDeviceNameBytes = 128;
// A node name (RuntimeOptions::node_name): 1 to 63 bytes of letters,
// digits, '-', '_' and '.', as a host or pod name is.
inline constexpr size_t kMaxNodeNameBytes = 63;
inline constexpr size_t kMaxTagBytes = 256;
inline constexpr size_t kMaxClientNameBytes = 256;
// Devices in one process group.
inline constexpr size_t kMaxGroupDevices = 64;

// Metadata of a live tensor as clients see it.
struct TensorMeta {
  uint64_t handle = 0;
  std::string device;  // canonical device name
  DType dtype = DType::kFloat32;
  Shape shape;
  uint64_t nbytes = 0;
  std::string tag;
  int64_t age_ms = 0;   // since creation
  int64_t idle_ms = 0;  // since last use
  // Autograd (core/autograd/autograd.h): a leaf that requires grad, or the result of
  // a recorded op, whose node PyTorch's way is named ("AddBackward0").
  bool requires_grad = false;
  std::string grad_fn;  // "" for a leaf or an untracked tensor
};

// A device with its accounting, for ListDevices.
struct DeviceStatus {
  std::string name;
  DeviceKind kind = DeviceKind::kCpu;
  DeviceProperties properties;
  uint64_t held_bytes = 0;    // by live tensors (and in-flight temporaries)
  uint64_t budget_bytes = 0;  // most tensord may hold
  uint64_t live_tensors = 0;
  // Allocations refused by the budget or by the device, since start.
  uint64_t allocation_failures = 0;
  Capabilities capabilities;  // what it computes (the planner's table)
};

// An open session, for operators (tensorctl sessions). The id is shortened:
// a full session id is that session's credential.
struct SessionInfo {
  std::string id_prefix;
  std::string client_name;
  uint64_t serial = 0;  // opening order, from 1: a stable key for paging
  uint64_t tensors = 0;
  uint64_t bytes = 0;
  int64_t age_ms = 0;
};

struct SessionCloseStats {
  uint64_t released_tensors = 0;
  uint64_t released_bytes = 0;
};

// A session closed because its lease ran out, for the log.
struct ExpiredSessionInfo {
  std::string id_prefix;
  std::string client_name;
  uint64_t released_tensors = 0;
  uint64_t released_bytes = 0;
};

// OK if `name` may be a node name (kMaxNodeNameBytes); INVALID_ARGUMENT
// saying why otherwise.
absl::Status CheckNodeName(std::string_view name);

struct RuntimeOptions {
  // Number of host devices: 1 gives "cpu"; N > 1 gives "cpu:0".."cpu:N-1".
  int host_devices = 1;
  // The host devices run conv2d on a library (oneDNN, when built with it:
  // core/cpu/library_kernels.h) and pooling on their direct kernel
  // (core/cpu/pool_kernels.h); false: both composed (--kernel-libraries;
  // CpuDeviceOptions::kernel_libraries).
  bool kernel_libraries = true;
  // Budget of each host device in bytes; 0 = default: 80% of the machine's
  // RAM divided among the host devices.
  uint64_t host_memory_budget = 0;
  // Extra devices (e.g. CUDA), created by the caller; the Runtime takes
  // ownership. Their budget is `accelerator_memory_budget`, or when that is
  // 0 the device's total memory less a reserve of 5% (at least 256 MiB).
  std::vector<std::unique_ptr<Device>> extra_devices;
  uint64_t accelerator_memory_budget = 0;

  // Leases. A session's TTL is what OpenSession asks for, clamped to
  // [min_session_ttl, max_session_ttl], or `session_ttl` when it asks for
  // nothing; a TTL of 0 means the session never expires. Expired sessions
  // are closed by a reaper thread that wakes every `reap_interval`.
  std::chrono::milliseconds session_ttl{0};
  std::chrono::milliseconds min_session_ttl{100};
  std::chrono::milliseconds max_session_ttl = std::chrono::hours(24);
  std::chrono::milliseconds reap_interval{100};
  // Called (on the reaper thread) for each session closed by its lease.
  std::function<void(const ExpiredSessionInfo&)> on_session_expired;

  // This server's name among many (tensord --node-name; a host or pod
  // name, checked as kMaxNodeNameBytes says). A device name may be
  // qualified by it ("tensord-0/cuda:0" is "cuda:0" here); one qualified
  // by another node is NOT_FOUND naming both. Empty: no name, and every
  // qualified device name is NOT_FOUND.
  std::string node_name;

  // Limits; 0 = unlimited (max_tensor_bytes: the format's own limit).
  size_t max_sessions = 0;
  uint64_t session_max_bytes = 0;
  uint64_t session_max_tensors = 0;
  uint64_t max_tensor_bytes = 0;

  // Collectives (core/collectives/host_communicator.h): process groups a
  // session may hold at once, and how long one collective waits for every
  // member before it fails UNAVAILABLE (and breaks its group).
  size_t session_max_groups = 16;
  std::chrono::milliseconds collective_timeout = std::chrono::seconds(30);
};

// The limits the Runtime enforces, for clients to discover (GetLimits).
struct RuntimeLimits {
  std::chrono::milliseconds default_session_ttl{0};  // 0 = never expires
  std::chrono::milliseconds min_session_ttl{0};
  std::chrono::milliseconds max_session_ttl{0};
  uint64_t max_sessions = 0;         // 0 = unlimited
  uint64_t session_max_bytes = 0;    // 0 = unlimited
  uint64_t session_max_tensors = 0;  // 0 = unlimited
  uint64_t max_tensor_bytes = 0;     // 0 = only the device budget
  uint64_t session_max_regions = 0;  // shared-memory regions per session
  uint64_t session_max_programs = 0;  // programs per session (then LRU)
  uint64_t session_max_groups = 0;    // process groups per session
  std::chrono::milliseconds collective_timeout{0};
  uint64_t max_request_id_bytes = 0;
};

// An opened session: its id and effective lease (0 = never expires).
struct SessionLease {
  std::string id;
  std::chrono::milliseconds ttl{0};
};

class Runtime {
 public:
  // INVALID_ARGUMENT for inconsistent options (host_devices < 1 or > 64).
  static absl::StatusOr<std::unique_ptr<Runtime>> Create(RuntimeOptions options);

  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;
  ~Runtime();  // frees every session's tensors

  RuntimeLimits limits() const;

  // --- Devices --------------------------------------------------------------
  std::vector<DeviceStatus> ListDevices() const;
  // Resolves "cpu", "cpu:1", "cuda", "cuda:0" ("" = "cpu") to a device,
  // each also qualified by this server's node name ("tensord-0/cuda:0").
  // Names: with one host device it is "cpu"; with N > 1, "cpu:0".."cpu:N-1";
  // "cpu" is always accepted and means "cpu:0" ("cuda": "cuda:0"); replies
  // carry the canonical name. INVALID_ARGUMENT for a malformed name
  // ("expected 'cpu', 'cpu:<i>', 'cuda' or 'cuda:<i>'") or one longer than
  // kMaxDeviceNameBytes; NOT_FOUND naming the available devices for a
  // well-formed name this server lacks, or one qualified by another node.
  absl::StatusOr<Device*> FindDevice(std::string_view name) const;
  // RuntimeOptions::node_name.
  const std::string& node_name() const;

  // --- Sessions -------------------------------------------------------------
  // Returns a new unguessable session id (128 random bits, hex), leased for
  // the default TTL. RESOURCE_EXHAUSTED when max_sessions are open.
  absl::StatusOr<std::string> OpenSession(std::string_view client_name);
  // As above with a requested TTL (0 = the default), clamped to the bounds.
  // INVALID_ARGUMENT for a negative TTL or a client name longer than
  // kMaxClientNameBytes.
  absl::StatusOr<SessionLease> OpenSession(std::string_view client_name,
                                           std::chrono::milliseconds ttl);
  // Renews the session's lease (as any call naming the session does) and
  // returns its TTL. NOT_FOUND for an unknown or expired session.
  absl::StatusOr<std::chrono::milliseconds> KeepAlive(std::string_view session);
  // A call in progress on the session (the server opens one for each unary
  // RPC naming a session): while it lives the session's lease cannot run
  // out, and the lease is renewed when the call begins and when it ends.
  // Streams are not calls: each of their messages renews the lease instead
  // (Upload::Append, Reader::Read), so a stalled stream lets it run out.
  // NOT_FOUND for an unknown session.
  class CallScope {
   public:
    virtual ~CallScope() = default;
  };
  absl::StatusOr<std::unique_ptr<CallScope>> BeginCall(
      std::string_view session);
  // Ties `bound` to the session: its OnSessionEnded runs when the session
  // ends (closed, its lease ran out, shutdown) if `bound` is still alive.
  // NOT_FOUND for an unknown session.
  absl::Status BindToSession(std::string_view session,
                             std::weak_ptr<SessionBound> bound);
  // Closes every session whose lease has run out now (the reaper does this
  // periodically); returns how many.
  size_t ReapExpiredSessions();

  // Exactly-once requests (see HandleTable::BeginRequest): the remembered
  // response of request `id` in the session, or nullopt when the caller is
  // to run it and then call EndRequest with its response (nullptr when it
  // failed). UNAVAILABLE while a call with that id is still running.
  absl::StatusOr<std::optional<std::string>> BeginRequest(
      std::string_view session, std::string_view id);
  void EndRequest(std::string_view session, std::string_view id,
                  const std::string* response);
  // Frees every tensor of the session. NOT_FOUND for an unknown session.
  absl::StatusOr<SessionCloseStats> CloseSession(std::string_view session);
  size_t session_count() const;
  // Every open session, oldest first.
  std::vector<SessionInfo> ListSessions() const;
  // Every live tensor of every session (operators' leak hunting), each with
  // its session's id prefix, ordered by handle.
  std::vector<std::pair<std::string, TensorMeta>> ListAllTensors() const;

  // --- Creating tensors -----------------------------------------------------
  // From host bytes; data.size() must equal numel x dtype size.
  absl::StatusOr<TensorMeta> CreateFromData(std::string_view session,
                                            std::string_view device,
                                            DType dtype,
                                            std::span<const int64_t> dims,
                                            std::span<const uint8_t> data,
                                            std::string_view tag);
  // From a fill. For kArange, `dims` may be empty, giving 1-D
  // ceil((end - start) / step) elements; `arange_end` is used only then.
  absl::StatusOr<TensorMeta> CreateFilled(std::string_view session,
                                          std::string_view device, DType dtype,
                                          std::span<const int64_t> dims,
                                          const FillSpec& fill,
                                          double arange_end,
                                          std::string_view tag);

  // A tensor written in pieces (streamed upload). The device memory is
  // allocated (and admitted against the budget) by BeginUpload; destroying
  // the Upload without a successful Finish frees it. Every Append,
  // AppendFrom and Finish renews the session's lease. When the session ends
  // (closed, its lease ran out, shutdown) the memory is freed at once and
  // every later call fails with NOT_FOUND saying why (UNAVAILABLE at
  // shutdown). BOOL bytes other than 0 and 1 are INVALID_ARGUMENT, checked
  // after they are copied (the source may still change).
  class Upload {
   public:
    virtual ~Upload() = default;
    // Appends bytes at the current end. INVALID_ARGUMENT past the size. A
    // failed Append or AppendFrom appends nothing: the upload may go on
    // from where it was.
    virtual absl::Status Append(std::span<const uint8_t> data) = 0;
    // Appends `n` bytes that `fill(dst, at)` writes (`at`: offset of `dst`
    // within the n): straight into the tensor's memory when the device's
    // memory is host memory (one call), else into a cache-sized buffer
    // copied onto the device piece by piece. For sources that must be
    // copied by a particular routine (shared memory's guarded copy).
    using Filler =
        std::function<absl::Status(std::span<uint8_t> dst, uint64_t at)>;
    virtual absl::Status AppendFrom(uint64_t n, const Filler& fill) = 0;
    // INVALID_ARGUMENT if fewer bytes than the size arrived; registers the
    // tensor in the session otherwise.
    virtual absl::StatusOr<TensorMeta> Finish() = 0;
    virtual uint64_t expected_bytes() const = 0;
    virtual uint64_t received_bytes() const = 0;
  };
  absl::StatusOr<std::unique_ptr<Upload>> BeginUpload(
      std::string_view session, std::string_view device, DType dtype,
      std::span<const int64_t> dims, std::string_view tag);

  // --- Moving ---------------------------------------------------------------
  // Same handle when already on `device` and !copy; else a new tensor.
  // `device` must be named: "" is INVALID_ARGUMENT (Create's "" means "cpu";
  // a move has no default target).
  absl::StatusOr<TensorMeta> To(std::string_view session, uint64_t handle,
                                std::string_view device, bool copy);

  // --- Compute --------------------------------------------------------------
  absl::StatusOr<TensorMeta> Binary(std::string_view session, BinaryOp op,
                                    uint64_t lhs, uint64_t rhs);
  absl::StatusOr<TensorMeta> MatMul(std::string_view session, uint64_t lhs,
                                    uint64_t rhs);

  // Runs one op (see OpSpec) on tensors of the session and returns the new
  // tensor, or for an in-place op the updated input (same handle). Operands
  // must be handles (a result_of operand is INVALID_ARGUMENT). Codes as
  // above; shapes, dtypes and devices are checked before any kernel runs.
  absl::StatusOr<TensorMeta> Run(std::string_view session, const OpSpec& op);

  // Runs `ops` in order. An operand is a handle of the session or the
  // result of an earlier op of the list. Returns, in the order of `keep`,
  // the tensors of the ops whose indices `keep` names (each once registered
  // under a handle; an in-place op's result keeps its handle). Every other
  // result is freed as soon as no later op reads it, and at the latest when
  // the call returns. On failure the list stops at the failing op and the
  // status (the op's own code) says "op #<i> (<name>; operands: ...): ...";
  // nothing it made is kept, so the memory held returns to what it was
  // (in-place updates by ops before the failing one stay applied). An index
  // in `keep` past the list is INVALID_ARGUMENT before anything runs.
  // `cancelled`, if given, is polled between ops: once it returns true the
  // list stops with CANCELLED and nothing is kept.
  absl::StatusOr<std::vector<TensorMeta>> Execute(
      std::string_view session, std::span<const OpSpec> ops,
      std::span<const uint32_t> keep,
      const std::function<bool()>& cancelled = nullptr);

  // --- Programs (core/runtime/program.h) -----------------------------------
  // An op list planned once for typed inputs (tensord.proto's
  // RegisterProgram): operands are the inputs (Operand::Input), the
  // session's tensors by handle (the program's bound tensors, looked up at
  // each run), or earlier results. `inputs`' handles are unused (0); their
  // dtype, shape and device are the placeholders'.
  struct ProgramMeta {
    uint64_t id = 0;
    std::string tag;
    std::vector<TensorMeta> inputs;   // the placeholders (handle 0)
    std::vector<TensorMeta> results;  // the kept results as planned
    size_t ops = 0;
    std::vector<uint64_t> bound;  // the session handles it reads
    uint64_t runs = 0;            // runs that succeeded
  };
  struct ProgramInput {
    DType dtype = DType::kFloat32;
    std::vector<int64_t> dims;
    std::string device;  // "" = "cpu"
  };
  // Plans the program and adds it to the session (past the session's
  // bound, the least recently used program is dropped). Codes as
  // Program::Compile, FindDevice for a placeholder's device, and
  // INVALID_ARGUMENT for its dtype or shape, or a tag over kMaxTagBytes.
  // Nothing runs.
  absl::StatusOr<ProgramMeta> RegisterProgram(
      std::string_view session, std::span<const ProgramInput> inputs,
      std::vector<OpSpec> ops, std::vector<uint32_t> keep,
      std::string_view tag);
  // One input of a run: a tensor of the session, or `data` (exactly the
  // placeholder's bytes) made into a tensor for this run only.
  struct ProgramArg {
    bool is_data = false;
    uint64_t handle = 0;
    std::span<const uint8_t> data;
  };
  // Runs the program on `args` (one per input) as Execute runs a list, on
  // the plans made at registration; returns its kept results, each
  // registered as Execute's are. NOT_FOUND for an unknown program;
  // INVALID_ARGUMENT for a wrong number of inputs or one that is not its
  // placeholder's dtype, shape and device (Program::CheckInput), or data
  // of another size; FAILED_PRECONDITION for a bound tensor released or
  // replaced (Program::CheckBound); an op's failure as Execute's.
  // This run's arguments of optimizer step `op` of the program (its
  // hyperparameters are the run's, so a scheduler needs no new program):
  // step 0 and unset values keep the registered ones. SGD's momentum may
  // not cross zero (the step's operands hold a momentum buffer per
  // parameter or none).
  struct ProgramStepArgs {
    uint32_t op = 0;
    int64_t step = 0;
    std::optional<double> lr;
    std::optional<double> momentum;
    std::optional<double> weight_decay;
  };
  // `steps`: at most one per optimizer step of the program; one naming
  // another op, an op twice, or arguments the step refuses
  // (CheckOptimizerArgs) is INVALID_ARGUMENT before anything runs.
  // `seed_offset` is added (mod 2^64) to the seed of each seeded random op
  // (dropout) for this run, so replays draw new masks reproducibly.
  absl::StatusOr<std::vector<TensorMeta>> RunProgram(
      std::string_view session, uint64_t program,
      std::span<const ProgramArg> args,
      std::span<const ProgramStepArgs> steps = {},
      const std::function<bool()>& cancelled = nullptr,
      uint64_t seed_offset = 0);
  // The session's programs by id.
  absl::StatusOr<std::vector<ProgramMeta>> ListPrograms(
      std::string_view session);
  // NOT_FOUND for an unknown program (or session).
  absl::Status ReleaseProgram(std::string_view session, uint64_t program);

  // --- Collectives (core/collectives/) ---------------------------------------
  // A process group: devices of this node, one rank each in the order
  // given, connected once by the engine (Gloo for host devices) and held by
  // the session until DestroyGroup or the session's end.
  struct GroupMeta {
    uint64_t id = 0;
    std::vector<std::string> devices;  // canonical names, in rank order
    std::string engine;                // "gloo 0.5.0, tcp on 127.0.0.1"
    std::string tag;
    uint64_t collectives = 0;  // that succeeded
  };
  // INVALID_ARGUMENT for no devices, a device named twice, more than
  // kMaxGroupDevices or a tag over kMaxTagBytes; FindDevice's codes for a
  // name; FAILED_PRECONDITION for a device with no engine (a CUDA device:
  // NCCL is not wired yet) or a build without Gloo; RESOURCE_EXHAUSTED
  // past the session's groups; UNAVAILABLE when the ranks cannot connect.
  absl::StatusOr<GroupMeta> CreateGroup(std::string_view session,
                                        std::span<const std::string> devices,
                                        std::string_view tag);
  // One collective on group `group` (torch.distributed's, one tensor per
  // member device, in any order): `handles` name exactly one tensor on each
  // member device (FAILED_PRECONDITION naming the devices otherwise, as
  // the same-device rule would), all of one dtype and shape
  // (INVALID_ARGUMENT naming both devices and shapes otherwise); a barrier
  // names none. all_reduce and broadcast write the tensors in place (their
  // memory's version moves on, so a tensor saved for backward is then
  // refused by backward, as PyTorch's in-place ops are) and return them;
  // all_gather returns, per input, a new tensor on its device of the
  // inputs concatenated along dim 0 in rank order (0-d inputs: 1-D);
  // reduce_scatter returns, per input, a new tensor on its device holding
  // that rank's slice along dim 0 of the reduction (dim 0 must divide by
  // the member count: INVALID_ARGUMENT). Results come in the order of
  // `handles`; collectives are not recorded by autograd (as
  // torch.distributed's are not). `root` (broadcast) is a rank. New
  // tensors and temporaries are admitted against the session's quotas.
  // NOT_FOUND for an unknown group or handle; FAILED_PRECONDITION for
  // CheckReduceOp's refusals and a broken group; UNAVAILABLE when a member
  // fails or times out (the group is then broken).
  struct CollectiveArgs {
    CollectiveKind kind = CollectiveKind::kAllReduce;
    Reduction op = Reduction::kSum;
    uint32_t root = 0;
  };
  absl::StatusOr<std::vector<TensorMeta>> Collective(
      std::string_view session, uint64_t group, const CollectiveArgs& args,
      std::span<const uint64_t> handles);
  absl::StatusOr<std::vector<GroupMeta>> ListGroups(std::string_view session);
  // NOT_FOUND for an unknown group (or session).
  absl::Status DestroyGroup(std::string_view session, uint64_t group);

  // --- Handles --------------------------------------------------------------
  absl::StatusOr<TensorMeta> GetTensor(std::string_view session,
                                       uint64_t handle);
  absl::StatusOr<std::vector<TensorMeta>> ListTensors(std::string_view session);
  // The memory the session holds without a handle, counted toward its
  // quotas: tensors saved for backward (tag "saved by MulBackward0") and
  // leaves' grads no handle names ("grad of tensor 17"). handle = 0.
  absl::StatusOr<std::vector<TensorMeta>> ListHeld(std::string_view session);
  absl::Status Release(std::string_view session, uint64_t handle);
  // Gives tensor `from` the client-chosen handle `to` (see
  // HandleTable::Rename for the rules and codes).
  absl::Status RenameHandle(std::string_view session, uint64_t from,
                            uint64_t to);
  // Releases each of `handles` that `session` still has; the others
  // (already released, never its own) are skipped, since a client lists
  // tensors it let go of and may list one twice when it retries. Returns
  // how many were released (0 as well for an unknown session).
  size_t ReleaseIfPresent(std::string_view session,
                          std::span<const uint64_t> handles);

  // --- Reading back ---------------------------------------------------------
  // A snapshot of one tensor for fetching: it keeps the tensor's memory alive
  // even if the handle is released meanwhile, until the session ends. Every
  // Read and ReadWith renews the session's lease; once the session has
  // ended (closed, its lease ran out, shutdown) they fail with NOT_FOUND
  // saying why (UNAVAILABLE at shutdown) and the memory is let go.
  class Reader {
   public:
    virtual ~Reader() = default;
    virtual const TensorMeta& meta() const = 0;
    // Copies dst.size() bytes starting at `offset` to host memory.
    // OUT_OF_RANGE if offset + dst.size() > nbytes.
    virtual absl::Status Read(uint64_t offset, std::span<uint8_t> dst) = 0;
    // Hands the `n` bytes at `offset` to `consume(src, at)` (`at`: offset of
    // `src` within the n): the tensor's own memory when it is host memory
    // (one call), else a cache-sized copy piece by piece. The mirror of
    // Upload::AppendFrom.
    using Consumer =
        std::function<absl::Status(std::span<const uint8_t> src, uint64_t at)>;
    virtual absl::Status ReadWith(uint64_t offset, uint64_t n,
                                  const Consumer& consume) = 0;
  };
  // kStream: the reader serves a stream (Fetch) and is tied to the session
  // as above. kCall: it serves one call that holds a CallScope (Read,
  // FetchToSharedMemory), which already keeps the session: no renewals, no
  // tie, so a small read costs no more than it must.
  enum class ReaderUse { kStream, kCall };
  absl::StatusOr<std::unique_ptr<Reader>> OpenReader(
      std::string_view session, uint64_t handle,
      ReaderUse use = ReaderUse::kStream);

  // --- Same-host shared memory (core/runtime/shared_memory.h) -----------------------
  // Maps the client's POSIX shared-memory object `name` (at least `size`
  // bytes, header included, whose header starts with `cookie`) into the
  // session and returns its region id. Codes as SharedMemoryMapping::Open;
  // RESOURCE_EXHAUSTED past the per-session region limit. The mapping goes
  // with UnregisterSharedMemory, the session's close or lease expiry, or the
  // Runtime.
  absl::StatusOr<uint64_t> RegisterSharedMemory(std::string_view session,
                                                std::string_view name,
                                                uint64_t size,
                                                std::string_view cookie);
  // NOT_FOUND for an unknown region (or session).
  absl::Status UnregisterSharedMemory(std::string_view session,
                                      uint64_t region);
  // CreateFromData from the region's data area at `offset` (numel x dtype
  // size bytes): admitted and allocated like every create, then one copy
  // from the mapping. OUT_OF_RANGE when the bytes run past the region.
  absl::StatusOr<TensorMeta> CreateFromSharedMemory(
      std::string_view session, uint64_t region, uint64_t offset,
      std::string_view device, DType dtype, std::span<const int64_t> dims,
      std::string_view tag);
  // Copies all bytes of tensor `handle` into the region's data area at
  // `offset` and returns its metadata. OUT_OF_RANGE when they do not fit.
  absl::StatusOr<TensorMeta> FetchToSharedMemory(std::string_view session,
                                                 uint64_t handle,
                                                 uint64_t region,
                                                 uint64_t offset);
  struct SharedMemoryStats {
    uint64_t regions = 0;  // mappings alive now, all sessions
    uint64_t uploads = 0;  // CreateFromSharedMemory successes since start
    uint64_t fetches = 0;  // FetchToSharedMemory successes since start
  };
  SharedMemoryStats shared_memory_stats() const;

 private:
  class Impl;
  // One run of an op list, Execute's or a program's (runtime_impl.h), and
  // the loop both run it with (executor.cc).
  struct OpList;
  absl::StatusOr<std::vector<TensorMeta>> RunList(std::string_view session,
                                                  const OpList& list);
  explicit Runtime(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tensord::core

#endif  // TENSORD_CORE_RUNTIME_RUNTIME_H_
