// Many tensord servers as one: tensord::Cluster.
//
//   tensord::Cluster cluster({"10.0.0.1:50051", "10.0.0.2:50051"});
//   // or Cluster::FromDns("tensord-peers.default.svc:50051") in Kubernetes
//   for (const auto& d : cluster.devices()) std::cout << d.name << "\n";
//                                    // tensord-0/cuda:0, tensord-1/cuda:0
//   auto x = cluster.randn({1024, 1024}, "tensord-1/cuda:0");
//   auto y = x.matmul(x);            // runs on tensord-1, as x lives there
//   std::cout << y.device() << "\n"; // tensord-1/cuda:0
//
// A node is one server, named by its --node-name. The cluster holds one
// Client per node (one channel, one session each, with ClientOptions::
// qualify_devices): devices are named "node/device", every Tensor belongs
// to the node that made it and its ops run there, and its device() names
// the node. An op mixing tensors of two nodes throws PyTorch's same-device
// error with both qualified names (FAILED_PRECONDITION "Expected all
// tensors to be on the same device, but found at least two devices,
// tensord-0/cuda:0 and tensord-1/cuda:0!"). x.to("tensord-1/cuda:0") for
// an x on tensord-0 moves it server to server: tensord-0 grants it to
// tensord-1, which pulls the bytes itself (the nodes need --node-token-file
// and their peers' addresses; see the proto's "Moves between nodes"); the
// client sends two small requests, whatever the size.
//
// Discovery: a list of addresses, or one DNS name that resolves to every
// node (a Kubernetes headless Service). refresh() resolves the name again,
// connects to nodes that appeared and drops those that stopped answering
// or answer as a restarted server (their sessions' tensors are gone; the
// node joins again with a new session). The cluster does the same by
// itself when devices() finds a node that does not answer, and when a
// device or node() names a node it does not have: a pod that restarted
// under a new address, or a daemon that restarted, is found again.
// A node must answer within ClusterOptions::node_timeout, or it is left
// out: of the cluster when it is built or refreshed, of devices() when it
// is listed, so a dead node never hangs calls about the others.
//
// Sessions: each node's session is leased and kept alive by its Client, as
// any Client's. session() is the cluster's session id ("tensord-0=<id>,
// tensord-1=<id>"); Attach() re-attaches every node's session with it.
//
// Errors are tensord::Error: UNAVAILABLE when no node answers, NOT_FOUND
// for a node the cluster does not have (naming those it has),
// INVALID_ARGUMENT for a device name without a node when there are several
// nodes, or two addresses reaching one node.
//
// Thread-safety: every method may be called from several threads at once;
// refresh() too.
#ifndef TENSORD_CLIENT_TENSORD_CLUSTER_H_
#define TENSORD_CLIENT_TENSORD_CLUSTER_H_

#include <chrono>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tensord/channel.h"
#include "tensord/client.h"

namespace tensord::client {

struct ClusterOptions {
  // Token and TLS for every node (its `address` is not used).
  ConnectOptions connect;
  // Each node's Client (qualify_devices is always on; `session` is set by
  // Attach).
  ClientOptions client;
  // How long a node may take to connect or to answer a listing.
  std::chrono::milliseconds node_timeout{2000};
};

class Cluster {
 public:
  // One node per address ("host:port"); addresses that do not answer are
  // left out (UNAVAILABLE when none does).
  explicit Cluster(std::vector<std::string> addresses,
                   ClusterOptions options = {});
  // Every address `name` ("host:port") resolves to is a node.
  static Cluster FromDns(std::string name, ClusterOptions options = {});
  // Re-attaches every node's session named in `cluster_session` (from
  // session()); a node it does not name gets a new session.
  static Cluster Attach(std::vector<std::string> addresses,
                        std::string_view cluster_session,
                        ClusterOptions options = {});

  // The nodes' names, sorted.
  std::vector<std::string> nodes() const;
  // The Client of node `name` (NOT_FOUND naming the nodes there are, after
  // looking again as refresh() does).
  Client node(std::string_view name) const;
  // Every answering node's devices, named by node, in node order (nodes
  // that do not answer are looked for again, as refresh() does).
  std::vector<DeviceInfo> devices() const;
  // "node=<session id>,..." in node order: the cluster's session id.
  std::string session() const;
  // Resolves the DNS name again (FromDns) or retries the addresses the
  // cluster was built from, joins nodes that answer and are new, and drops
  // nodes that no longer answer (their tensors go with their sessions).
  void refresh();

  // Tensors made on the node `device` names ("tensord-1/cuda:0"; a name
  // without a node means the only node). As Client's same-named methods.
  template <typename T>
  Tensor tensor(std::initializer_list<T> values, const Device& device) const {
    return On(device).tensor(values, device);
  }
  template <typename T>
  Tensor tensor(const std::vector<T>& values, std::vector<int64_t> shape,
                const Device& device) const {
    return On(device).tensor(values, std::move(shape), device);
  }
  Tensor zeros(std::vector<int64_t> shape, DType dtype,
               const Device& device) const;
  Tensor ones(std::vector<int64_t> shape, DType dtype,
              const Device& device) const;
  Tensor full(std::vector<int64_t> shape, double value, DType dtype,
              const Device& device) const;
  Tensor rand(std::vector<int64_t> shape, const Device& device,
              std::optional<uint64_t> seed = std::nullopt) const;
  Tensor randn(std::vector<int64_t> shape, const Device& device,
               std::optional<uint64_t> seed = std::nullopt) const;
  Tensor FromBytes(DType dtype, std::vector<int64_t> shape,
                   std::string_view bytes, const Device& device) const;

  // The Client of the node `device` names.
  Client On(const Device& device) const;

 private:
  struct Node {
    std::string name;
    std::string address;
    Client client;
  };
  Cluster(std::vector<std::string> addresses, std::string dns_name,
          ClusterOptions options, std::string_view cluster_session);
  // Connects to `address` (attaching to its node's session in
  // `cluster_session` if that names one); nullptr when it does not answer
  // in time. Static: it may outlive the Cluster on a timed-out thread.
  static std::shared_ptr<Node> Join(const ClusterOptions& options,
                                    const std::string& address,
                                    std::string_view cluster_session);
  std::vector<std::string> Addresses() const;
  std::vector<std::shared_ptr<Node>> Snapshot() const;
  // refresh(), for the const methods that find a node missing or dead.
  void Refresh() const;
  // Keeps the nodes of `current` that are `alive`, joins the nodes at
  // addresses (resolved again) that none of those has, publishes the
  // result; returns the nodes it joined.
  std::vector<std::shared_ptr<Node>> Reconcile(
      const std::vector<std::shared_ptr<Node>>& current,
      const std::vector<bool>& alive) const;

  // Ties the nodes' sessions together, for moves between them.
  struct Directory;
  void Publish(const std::vector<std::shared_ptr<Node>>& nodes) const;

  const std::vector<std::string> addresses_;
  const std::string dns_name_;
  const ClusterOptions options_;
  mutable std::mutex mu_;
  // Guarded by mu_, by name; mutable: the const methods rejoin nodes.
  mutable std::vector<std::shared_ptr<Node>> nodes_;
  const std::shared_ptr<Directory> directory_;
};

}  // namespace tensord::client

namespace tensord {
using client::Cluster;
using client::ClusterOptions;
}  // namespace tensord

#endif  // TENSORD_CLIENT_TENSORD_CLUSTER_H_
