// Writes the fuzzers' seed corpus: a handful of valid requests per RPC, in
// the input layout of fuzz_common.h (structured mode, so session fields are
// left empty, handles are slot numbers 0..10 that the fuzzer maps to its
// live tensors and grants are one-byte slot numbers (GrantSlot) it maps to
// its live grants; a few raw-mode copies too).
//
//   make_corpus OUT_DIR     writes OUT_DIR/<Rpc>/seed-<n>
// The committed corpus (tests/fuzz/corpus) is this program's output:
// `make fuzz-corpus` regenerates it.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "tensord/v1/tensord.pb.h"
#include "tests/fuzz/fuzz_common.h"

namespace tensord::fuzz {
namespace {

std::map<std::string, std::vector<std::string>> seeds;

void Add(const std::string& rpc, const google::protobuf::Message& m) {
  seeds[rpc].push_back(std::string(1, '\0') + m.SerializeAsString());
}
void AddRaw(const std::string& rpc, const google::protobuf::Message& m) {
  seeds[rpc].push_back(std::string(1, '\1') + m.SerializeAsString());
}
// NodeService.PullChunk as `caller` (fuzz_common.h's Caller).
void AddAs(const std::string& rpc, const google::protobuf::Message& m,
           Caller caller, bool raw = false) {
  seeds[rpc].push_back(std::string(1, ModeByte(raw, caller)) +
                       m.SerializeAsString());
}
// A `grant` field naming live grant `slot`.
std::string G(GrantSlot slot) {
  return std::string(1, static_cast<char>(slot));
}
template <typename Message>
void AddStream(const std::string& rpc, std::initializer_list<Message> ms,
               bool raw) {
  std::vector<std::string> parts;
  for (const auto& m : ms) parts.push_back(m.SerializeAsString());
  seeds[rpc].push_back(std::string(1, raw ? '\1' : '\0') + JoinStream(parts));
}

v1::Operand H(uint64_t slot) {
  v1::Operand o;
  o.set_handle(slot);
  return o;
}
v1::Operand R(uint32_t index) {
  v1::Operand o;
  o.set_result_of(index);
  return o;
}

// The session's command stream: creates under client handles, an op on
// them, a read, a release, a sync, a failure and its clear_error, a
// program's run and a collective.
void AddCommandStream() {
  constexpr uint64_t kMine = uint64_t{1} << 63;
  v1::StreamRequest first;
  first.mutable_open()->set_stream(1);
  auto command = [](v1::StreamRequest& m, uint64_t seq, uint64_t result) {
    v1::Command* c = m.add_commands();
    c->set_seq(seq);
    c->set_result(result);
    return c;
  };
  v1::CreateRequest* a = command(first, 1, kMine + 1)->mutable_create();
  a->set_dtype(v1::FLOAT32);
  a->add_shape(3);
  a->mutable_fill()->set_kind(v1::Fill::ONES);
  v1::BinaryArgs* add =
      command(first, 2, kMine + 2)->mutable_run()->mutable_op()->mutable_binary();
  add->set_op(v1::ADD);
  add->mutable_lhs()->set_handle(kMine + 1);
  add->mutable_rhs()->set_handle(0);  // a live tensor's slot
  command(first, 3, 0)->mutable_read()->set_handle(kMine + 2);
  v1::StreamRequest second;
  second.set_received_through(3);
  command(second, 4, 0)->mutable_release()->add_release(kMine + 1);
  command(second, 5, 0)->mutable_sync();
  v1::CreateRequest* huge = command(second, 6, kMine + 6)->mutable_create();
  huge->set_dtype(v1::FLOAT64);
  huge->add_shape(1 << 30);
  huge->mutable_fill()->set_kind(v1::Fill::ZEROS);
  command(second, 7, 0)->mutable_clear_error()->set_seq(6);
  // A program's run (program 1: none registered, or a fuzzed one).
  v1::RunProgramRequest* run = command(second, 8, 0)->mutable_run_program();
  run->set_program(1);
  run->add_inputs()->set_data(std::string(12, '\0'));
  run->add_inputs()->set_handle(kMine + 1);
  run->set_seed_offset(3);
  v1::ProgramStepArgs* step = run->add_steps();
  step->set_op(0);
  step->set_momentum(0.5);
  step->set_weight_decay(0.01);
  // A collective on the stream (group 1: the harness's preset group, or
  // none): the command's result and a live tensor's slot.
  v1::CollectiveRequest* all = command(second, 9, 0)->mutable_collective();
  all->set_group(1);
  all->set_kind(v1::ALL_REDUCE);
  all->add_tensors(kMine + 2);
  all->add_tensors(0);
  AddStream("Stream", {first, second}, false);
  AddStream("Stream", {first, second}, true);
  AddStream("Stream", {second}, false);
  // A seq gap ends the stream with a message still unread behind it (the
  // server once failed to deliver its status then, over gRPC's in-process
  // transport).
  v1::StreamRequest gap = first;
  gap.mutable_commands(0)->set_seq(113);
  AddStream("Stream", {gap, second}, false);
}

// Moves between nodes: grants of live tensors (to the peer, another node,
// this node, a name with no token, a malformed one; ttls in and out of
// range), imports of the peer's live grants (each slot; bad device, source
// and grant), pulls of the fuzzed server's live grants (chunks, offsets
// past the end, the max_bytes cap, finish; every caller).
void AddMovesBetweenNodes() {
  {
    v1::GrantTransferRequest r;
    r.set_handle(0);
    r.set_destination_node(kPeerNode);
    Add("GrantTransfer", r);
    AddRaw("GrantTransfer", r);
    r.set_handle(2);  // cpu:1
    r.set_destination_node(kOtherNode);
    r.set_ttl_ms(50);
    Add("GrantTransfer", r);
    r.set_handle(9);
    r.set_ttl_ms(600000);  // the longest
    Add("GrantTransfer", r);
    r.set_ttl_ms(600001);
    Add("GrantTransfer", r);
    r.set_ttl_ms(-1);
    Add("GrantTransfer", r);
    r.set_ttl_ms(0);
    r.set_handle(0);
    r.set_destination_node(kSelfNode);  // move within a node with To
    Add("GrantTransfer", r);
    r.set_destination_node("fuzz-z");  // a node with no token here
    r.set_ttl_ms(1000);
    Add("GrantTransfer", r);
    r.set_destination_node("evil/host");
    Add("GrantTransfer", r);
    r.set_destination_node(kPeerNode);
    r.set_handle(10);  // the foreign session's tensor
    Add("GrantTransfer", r);
    r.set_handle(12345678);
    Add("GrantTransfer", r);
  }
  {
    v1::ImportRequest r;
    r.set_source_node(kPeerNode);
    r.set_grant(G(kGrantFloat32));
    r.set_device("cpu:0");
    Add("Import", r);
    AddRaw("Import", r);
    r.set_grant(G(kGrantInt64Cpu1));
    r.set_device("cpu:1");
    r.set_tag("moved");
    Add("Import", r);
    r.clear_tag();
    r.set_device("cpu:0");
    for (GrantSlot slot : {kGrantFloat16, kGrantLarge, kGrantEmpty,
                           kGrantOtherNode, kGrantSessionEnded}) {
      r.set_grant(G(slot));
      Add("Import", r);
    }
    r.set_grant(G(kGrantFloat32));
    r.set_device("cuda:3");  // not on this server: the grant stays
    Add("Import", r);
    r.set_device("fuzz-a/cpu:1");  // qualified by this node
    Add("Import", r);
    r.set_device("cpu:0");
    r.set_source_node(kSelfNode);  // not its own peer
    Add("Import", r);
    r.set_source_node("evil/host");
    Add("Import", r);
    r.set_source_node(kPeerNode);
    r.set_grant("0123456789abcdef0123456789abcdef");  // never issued
    Add("Import", r);
    r.set_grant(std::string(65, 'f'));
    Add("Import", r);
  }
  {
    v1::PullChunkRequest r;
    r.set_grant(G(kGrantFloat32));
    Add("PullChunk", r);
    AddRaw("PullChunk", r);
    r.set_offset(4);
    r.set_max_bytes(5);
    Add("PullChunk", r);
    r.set_offset(1000);  // past the end
    Add("PullChunk", r);
    r.set_grant(G(kGrantLarge));
    r.set_offset(1 << 20);
    r.set_max_bytes(1 << 22);  // over the cap
    Add("PullChunk", r);
    r.set_offset(0);
    r.set_max_bytes(0);  // 1 MiB
    Add("PullChunk", r);
    for (GrantSlot slot : {kGrantInt64Cpu1, kGrantFloat16, kGrantEmpty,
                           kGrantOtherNode, kGrantSessionEnded}) {
      r.set_grant(G(slot));
      Add("PullChunk", r);
    }
    r.set_grant(G(kGrantOtherNode));
    AddAs("PullChunk", r, Caller::kOtherNode);
    r.set_grant(G(kGrantFloat32));
    r.set_finish(true);
    Add("PullChunk", r);
    AddAs("PullChunk", r, Caller::kOtherNode);
    r.set_finish(false);
    AddAs("PullChunk", r, Caller::kNoToken);
    AddAs("PullChunk", r, Caller::kUnknownToken);
    AddAs("PullChunk", r, Caller::kNotBearer);
    r.set_grant("0123456789abcdef0123456789abcdef");  // never issued
    Add("PullChunk", r);
  }
}

// Programs: registrations valid and not (an input past the placeholders, a
// bound handle slot, a keep past the list, a bad placeholder), runs of the
// harness's preset programs (slot 0: x [2, 3] + a preset; slot 1: a [2, 3]
// @ b [3, 2], summed) by handle and inline, with optimizer-step arguments
// that name no step, listings and releases.
v1::Operand In(uint32_t i) {
  v1::Operand o;
  o.set_input(i);
  return o;
}

void AddPrograms() {
  v1::RegisterProgramRequest r;
  v1::ProgramInput* x = r.add_inputs();
  x->set_dtype(v1::FLOAT32);
  x->add_shape(2);
  x->add_shape(3);
  x->set_device("cpu:0");
  v1::Op add;
  add.mutable_binary()->set_op(v1::ADD);
  *add.mutable_binary()->mutable_lhs() = In(0);
  *add.mutable_binary()->mutable_rhs() = H(0);
  *r.add_ops() = add;
  v1::Op n;
  n.mutable_reduce()->set_op(v1::NORM);
  *n.mutable_reduce()->mutable_x() = R(0);
  *r.add_ops() = n;
  r.add_keep(1);
  r.set_tag("fuzz");
  Add("RegisterProgram", r);
  AddRaw("RegisterProgram", r);
  v1::RegisterProgramRequest past = r;
  *past.mutable_ops(0)->mutable_binary()->mutable_lhs() = In(3);
  Add("RegisterProgram", past);
  v1::RegisterProgramRequest keep = r;
  keep.add_keep(9);
  Add("RegisterProgram", keep);
  v1::RegisterProgramRequest cross = r;  // preset 2 lives on cpu:1
  *cross.mutable_ops(0)->mutable_binary()->mutable_rhs() = H(2);
  Add("RegisterProgram", cross);
  v1::RegisterProgramRequest placeholder = r;
  placeholder.mutable_inputs(0)->add_shape(-1);
  placeholder.mutable_inputs(0)->set_dtype(static_cast<v1::DType>(77));
  Add("RegisterProgram", placeholder);

  v1::RunProgramRequest run;
  run.set_program(0);
  run.add_inputs()->set_handle(0);
  Add("RunProgram", run);
  AddRaw("RunProgram", run);
  v1::RunProgramRequest inline_run;
  inline_run.set_program(0);
  inline_run.add_inputs()->set_data(std::string(24, '\1'));
  Add("RunProgram", inline_run);
  inline_run.mutable_inputs(0)->set_data(std::string(5, '\1'));  // short
  Add("RunProgram", inline_run);
  v1::RunProgramRequest two;
  two.set_program(1);
  two.add_inputs()->set_handle(0);
  two.add_inputs()->set_handle(1);
  Add("RunProgram", two);
  v1::ProgramStepArgs* step = two.add_steps();
  step->set_op(0);
  step->set_step(2);
  step->set_lr(-1);
  Add("RunProgram", two);
  v1::RunProgramRequest none;
  none.set_program(1);
  Add("RunProgram", none);

  Add("ListPrograms", v1::ListProgramsRequest());
  v1::ReleaseProgramRequest release;
  release.set_program(1);
  Add("ReleaseProgram", release);
  release.set_program(2);  // the unknown one
  Add("ReleaseProgram", release);
}

// Collectives: the preset group (cpu:0, cpu:1) on presets 0 (cpu:0) and 2
// (cpu:1), both float32 [2, 3]; and each refusal's shape.
void AddCollectives() {
  v1::CreateGroupRequest create;
  create.add_devices("cpu:0");
  create.add_devices("cpu:1");
  Add("CreateGroup", create);
  AddRaw("CreateGroup", create);
  create.add_devices("cpu:0");  // twice
  Add("CreateGroup", create);
  v1::CreateGroupRequest cuda;
  cuda.add_devices("cuda:0");
  cuda.set_tag("t");
  Add("CreateGroup", cuda);

  v1::CollectiveRequest all;
  all.set_group(0);
  all.set_kind(v1::ALL_REDUCE);
  all.add_tensors(0);
  all.add_tensors(2);
  Add("Collective", all);
  AddRaw("Collective", all);
  all.set_op(v1::REDUCE_AVG);
  Add("Collective", all);
  v1::CollectiveRequest gather = all;
  gather.set_kind(v1::ALL_GATHER);
  Add("Collective", gather);
  v1::CollectiveRequest scatter = all;
  scatter.set_kind(v1::REDUCE_SCATTER);
  scatter.set_op(v1::REDUCE_MAX);
  Add("Collective", scatter);
  v1::CollectiveRequest bcast = all;
  bcast.set_kind(v1::BROADCAST);
  bcast.set_root(1);
  Add("Collective", bcast);
  bcast.set_root(9);
  Add("Collective", bcast);
  v1::CollectiveRequest barrier;
  barrier.set_kind(v1::BARRIER);
  Add("Collective", barrier);
  v1::CollectiveRequest mixed = all;  // preset 3 is int64 [3] on cpu:0
  mixed.set_tensors(0, 3);
  Add("Collective", mixed);
  mixed.add_tensors(1);  // two on cpu:0
  Add("Collective", mixed);

  Add("ListGroups", v1::ListGroupsRequest());
  v1::DestroyGroupRequest destroy;
  destroy.set_group(0);
  Add("DestroyGroup", destroy);
  destroy.set_group(1000);  // unknown: past the rewritten slots
  Add("DestroyGroup", destroy);
}

void Build() {
  AddCommandStream();
  Add("ListDevices", v1::ListDevicesRequest());
  Add("ListSessions", v1::ListSessionsRequest());
  Add("ListAllTensors", v1::ListAllTensorsRequest());
  Add("GetStats", v1::GetStatsRequest());
  Add("GetLimits", v1::GetLimitsRequest());
  {
    v1::OpenSessionRequest r;
    Add("OpenSession", r);
    r.set_client_name("fuzz-client");
    Add("OpenSession", r);
  }
  {
    v1::CloseSessionRequest r;
    Add("CloseSession", r);
    r.set_session("0123456789abcdef0123456789abcdef");
    Add("CloseSession", r);
  }
  {
    v1::CreateRequest r;
    r.set_device("cpu:0");
    r.set_dtype(v1::FLOAT32);
    r.add_shape(2);
    r.add_shape(2);
    r.set_data(std::string(16, '\0'));
    Add("Create", r);
    AddRaw("Create", r);
    r.set_device("cpu:1");
    r.set_dtype(v1::INT64);
    r.clear_shape();
    r.add_shape(3);
    r.mutable_fill()->set_kind(v1::Fill::ARANGE);
    r.mutable_fill()->set_start(0);
    r.mutable_fill()->set_end(3);
    Add("Create", r);
    r.set_dtype(v1::FLOAT32);
    r.mutable_fill()->set_kind(v1::Fill::RANDN);
    r.mutable_fill()->set_seed(7);
    r.set_tag("t");
    Add("Create", r);
    r.set_device("cuda:3");
    Add("Create", r);
  }
  {
    v1::UploadRequest head;
    head.mutable_header()->set_device("cpu:0");
    head.mutable_header()->set_dtype(v1::INT32);
    head.mutable_header()->add_shape(4);
    head.set_data(std::string(8, '\1'));
    v1::UploadRequest tail;
    tail.set_data(std::string(8, '\2'));
    AddStream("Upload", {head, tail}, false);
    AddStream("Upload", {head, tail}, true);
    AddStream("Upload", {head}, false);  // too few bytes
    head.mutable_header()->set_dtype(v1::BOOL);
    head.set_data(std::string(4, '\1'));
    AddStream("Upload", {head}, false);
  }
  {
    v1::ToRequest r;
    r.set_handle(0);
    r.set_device("cpu:1");
    Add("To", r);
    r.set_handle(2);
    r.set_copy(true);
    Add("To", r);
    r.set_device("cpu:0");
    r.set_handle(9);
    Add("To", r);
  }
  {
    v1::BinaryRequest r;
    r.set_op(v1::ADD);
    r.set_lhs(0);
    r.set_rhs(0);
    Add("Binary", r);
    r.set_op(v1::MUL);
    r.set_rhs(2);  // cross-device
    Add("Binary", r);
    r.set_op(v1::POW);
    r.set_lhs(3);
    r.mutable_scalar()->set_int_value(3);
    Add("Binary", r);
    r.set_op(v1::DIV);
    r.set_lhs(6);
    r.set_rhs(0);
    r.clear_scalar();
    Add("Binary", r);
  }
  {
    v1::MatMulRequest r;
    r.set_lhs(0);
    r.set_rhs(1);
    Add("MatMul", r);
    r.set_rhs(0);  // bad shapes
    Add("MatMul", r);
    r.set_lhs(6);
    r.set_rhs(1);
    Add("MatMul", r);
  }
  v1::Op add, matmul, sum, reshape, cat, inplace, unary, linear, softmax, clamp,
      where, sum_dims;
  {
    *add.mutable_binary()->mutable_lhs() = H(0);
    *add.mutable_binary()->mutable_rhs() = H(0);
    add.mutable_binary()->set_op(v1::ADD);
    *matmul.mutable_matmul()->mutable_lhs() = H(0);
    *matmul.mutable_matmul()->mutable_rhs() = H(1);
    *sum.mutable_reduce()->mutable_x() = H(0);
    sum.mutable_reduce()->set_op(v1::SUM);
    sum.mutable_reduce()->set_dim(1);
    *reshape.mutable_reshape()->mutable_x() = H(0);
    reshape.mutable_reshape()->add_shape(-1);
    reshape.mutable_reshape()->add_shape(2);
    *cat.mutable_cat()->add_xs() = H(0);
    *cat.mutable_cat()->add_xs() = H(0);
    cat.mutable_cat()->set_dim(1);
    inplace.mutable_in_place()->set_op(v1::ADD_);
    *inplace.mutable_in_place()->mutable_target() = H(0);
    inplace.mutable_in_place()->mutable_scalar()->set_float_value(1.5);
    unary.mutable_unary()->set_op(v1::SIGMOID);
    *unary.mutable_unary()->mutable_x() = H(3);
    *linear.mutable_linear()->mutable_x() = H(0);
    *linear.mutable_linear()->mutable_weight() = H(0);
    *softmax.mutable_softmax()->mutable_x() = H(0);
    softmax.mutable_softmax()->set_dim(-1);
    softmax.mutable_softmax()->set_log(true);
    *clamp.mutable_clamp()->mutable_x() = H(0);
    *clamp.mutable_clamp()->mutable_min() = H(1);
    clamp.mutable_clamp()->mutable_max_scalar()->set_float_value(0.5);
    *where.mutable_where()->mutable_condition() = H(0);
    *where.mutable_where()->mutable_input() = H(1);
    where.mutable_where()->mutable_other_scalar()->set_int_value(0);
    *sum_dims.mutable_reduce()->mutable_x() = H(0);
    sum_dims.mutable_reduce()->set_op(v1::MEAN);
    sum_dims.mutable_reduce()->add_dims(0);
    sum_dims.mutable_reduce()->add_dims(-1);
  }
  for (const v1::Op& op : {add, matmul, sum, reshape, cat, inplace, unary,
                           linear, softmax, clamp, where, sum_dims}) {
    v1::RunRequest r;
    *r.mutable_op() = op;
    Add("Run", r);
  }
  {
    v1::ExecuteRequest r;
    *r.add_ops() = matmul;
    v1::Op n;
    *n.mutable_reduce()->mutable_x() = R(0);
    n.mutable_reduce()->set_op(v1::NORM);
    *r.add_ops() = n;
    r.add_keep(1);
    Add("Execute", r);
    AddRaw("Execute", r);
    *r.add_ops() = add;
    *r.add_ops() = inplace;
    *r.add_ops() = cat;
    r.add_keep(4);
    Add("Execute", r);
    r.add_keep(99);  // past the list
    Add("Execute", r);
    v1::ExecuteRequest bad;
    v1::Op fwd;  // refers to a later op
    *fwd.mutable_unary()->mutable_x() = R(3);
    fwd.mutable_unary()->set_op(v1::EXP);
    *bad.add_ops() = fwd;
    bad.add_keep(0);
    Add("Execute", bad);
  }
  {
    // The window ops on slot 9, an unbatched [2, 4, 4] float32 image: a
    // weight reshaped from it, a convolution, a pooling of that.
    v1::ExecuteRequest r;
    v1::Op weight, conv, pool;
    *weight.mutable_reshape()->mutable_x() = H(9);
    for (int64_t d : {2, 2, 2, 4}) weight.mutable_reshape()->add_shape(d);
    *conv.mutable_conv2d()->mutable_x() = H(9);
    *conv.mutable_conv2d()->mutable_weight() = R(0);
    conv.mutable_conv2d()->add_padding(1);
    *pool.mutable_pool2d()->mutable_x() = R(1);
    pool.mutable_pool2d()->set_op(v1::MAX_POOL);
    pool.mutable_pool2d()->add_kernel_size(2);
    pool.mutable_pool2d()->add_padding(1);
    *r.add_ops() = weight;
    *r.add_ops() = conv;
    *r.add_ops() = pool;
    r.add_keep(2);
    Add("Execute", r);
    v1::Op avg;
    *avg.mutable_pool2d()->mutable_x() = H(9);
    avg.mutable_pool2d()->set_op(v1::AVG_POOL);
    avg.mutable_pool2d()->add_kernel_size(3);
    avg.mutable_pool2d()->add_stride(2);
    avg.mutable_pool2d()->add_padding(1);
    avg.mutable_pool2d()->set_exclude_pad(true);
    v1::Op bad_conv;  // a 3-d weight
    *bad_conv.mutable_conv2d()->mutable_x() = H(9);
    *bad_conv.mutable_conv2d()->mutable_weight() = H(9);
    v1::Op ce, mse;  // class-index targets from slot 3 (int64 [3])
    ce.mutable_loss()->set_op(v1::CROSS_ENTROPY);
    *ce.mutable_loss()->mutable_input() = H(1);
    *ce.mutable_loss()->mutable_target() = H(3);
    ce.mutable_loss()->set_ignore_index(1);
    mse.mutable_loss()->set_op(v1::MSE_LOSS);
    *mse.mutable_loss()->mutable_input() = H(0);
    *mse.mutable_loss()->mutable_target() = H(0);
    mse.mutable_loss()->set_reduction(v1::REDUCTION_NONE);
    for (const v1::Op& op : {avg, bad_conv, ce, mse}) {
      v1::RunRequest run;
      *run.mutable_op() = op;
      Add("Run", run);
    }
    // Autograd: slot 9 requires grad, a convolution and pooling of it, the
    // sum's backward, its grad; then a second backward (freed graph) and
    // an in-place op on the leaf.
    v1::ExecuteRequest grad;
    v1::Op on, total, back, g, again, step;
    *on.mutable_requires_grad()->mutable_x() = H(9);
    *total.mutable_reduce()->mutable_x() = R(3);
    total.mutable_reduce()->set_op(v1::SUM);
    *back.mutable_backward()->mutable_root() = R(4);
    *g.mutable_grad()->mutable_x() = H(9);
    *again.mutable_backward()->mutable_root() = R(4);
    *step.mutable_in_place()->mutable_target() = H(9);
    step.mutable_in_place()->set_op(v1::SUB_);
    *step.mutable_in_place()->mutable_other() = R(6);
    step.set_no_grad(true);
    for (const v1::Op& op : {on, weight, conv, pool, total, back, g, step}) {
      *grad.add_ops() = op;
    }
    *grad.mutable_ops(2)->mutable_conv2d()->mutable_weight() = R(1);
    *grad.mutable_ops(3)->mutable_pool2d()->mutable_x() = R(2);
    grad.add_keep(6);
    Add("Execute", grad);
    *grad.add_ops() = again;
    Add("Execute", grad);
    v1::ExecuteRequest zero;
    v1::Op clear;
    *clear.mutable_zero_grad()->add_tensors() = H(9);
    *clear.mutable_zero_grad()->add_tensors() = H(1);
    v1::Op detach;
    *detach.mutable_detach()->mutable_x() = H(9);
    *zero.add_ops() = on;
    *zero.add_ops() = clear;
    *zero.add_ops() = detach;
    zero.add_keep(2);
    Add("Execute", zero);
    // An optimizer step after a backward: SGD with momentum (slot 9 its
    // own state), then Adam with state of another shape (an error).
    v1::ExecuteRequest train;
    v1::Op sgd, adam;
    v1::OptimizerStepArgs* s = sgd.mutable_optimizer_step();
    s->set_kind(v1::SGD);
    *s->add_params() = H(9);
    *s->add_state() = H(9);
    s->set_lr(0.1);
    s->set_momentum(0.9);
    s->set_step(2);
    v1::OptimizerStepArgs* a = adam.mutable_optimizer_step();
    a->set_kind(v1::ADAM);
    *a->add_params() = H(9);
    *a->add_state() = H(0);
    *a->add_state() = H(9);
    a->set_step(1);
    for (const v1::Op& op : {on, weight, conv, pool, total, back, sgd, adam}) {
      *train.add_ops() = op;
    }
    *train.mutable_ops(2)->mutable_conv2d()->mutable_weight() = R(1);
    *train.mutable_ops(3)->mutable_pool2d()->mutable_x() = R(2);
    train.add_keep(6);
    Add("Execute", train);
  }
  {
    v1::FetchRequest r;
    r.set_handle(0);
    Add("Fetch", r);
    r.set_chunk_bytes(5);
    r.set_offset(3);
    Add("Fetch", r);
    r.set_offset(1000);
    Add("Fetch", r);
    r.set_handle(9);
    Add("Fetch", r);
  }
  {
    v1::ReleaseRequest r;
    r.set_handle(1);
    Add("Release", r);
    r.set_handle(12345678);
    Add("Release", r);
    v1::GetTensorRequest g;
    g.set_handle(4);
    Add("GetTensor", g);
    g.set_handle(9);
    Add("GetTensor", g);
    v1::ListTensorsRequest l;
    Add("ListTensors", l);
  }
  Add("KeepAlive", v1::KeepAliveRequest());
  {
    v1::ReadRequest r;
    r.set_handle(0);
    Add("Read", r);
    r.set_offset(4);
    r.set_length(8);
    Add("Read", r);
    r.set_length(uint64_t{1} << 40);  // past the end
    Add("Read", r);
  }
  {
    // No such region exists on this host: NOT_FOUND, PERMISSION_DENIED or
    // INVALID_ARGUMENT paths; region ids that were never registered.
    v1::RegisterSharedMemoryRequest r;
    r.set_name("/tensord-fuzz-none");
    r.set_size(8192);
    r.set_cookie(std::string(16, '\x42'));
    Add("RegisterSharedMemory", r);
    r.set_name("/etc/passwd");
    Add("RegisterSharedMemory", r);
    v1::UnregisterSharedMemoryRequest u;
    u.set_region(7);
    Add("UnregisterSharedMemory", u);
    v1::UploadFromSharedMemoryRequest up;
    up.set_region(7);
    up.set_dtype(v1::FLOAT32);
    up.add_shape(4);
    Add("UploadFromSharedMemory", up);
    v1::FetchToSharedMemoryRequest f;
    f.set_handle(0);
    f.set_region(7);
    Add("FetchToSharedMemory", f);
  }
  AddMovesBetweenNodes();
  AddPrograms();
  AddCollectives();
}

}  // namespace
}  // namespace tensord::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  tensord::fuzz::Build();
  namespace fs = std::filesystem;
  int files = 0;
  for (const char* rpc : tensord::fuzz::kRpcs) {
    const fs::path dir = fs::path(argv[1]) / rpc;
    fs::create_directories(dir);
    const auto& list = tensord::fuzz::seeds[rpc];
    if (list.empty()) {
      std::fprintf(stderr, "no seeds for %s\n", rpc);
      return 1;
    }
    for (size_t i = 0; i < list.size(); ++i) {
      std::ofstream(dir / ("seed-" + std::to_string(i)), std::ios::binary)
          << list[i];
      ++files;
    }
  }
  std::printf("wrote %d seeds for %zu RPCs to %s\n", files,
              std::size(tensord::fuzz::kRpcs), argv[1]);
  return 0;
}
