#include "tensord/cluster.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <thread>
#include <utility>

#include "client/grpc_session.h"

namespace tensord::client {
namespace {

using Clock = std::chrono::steady_clock;

std::string JoinNames(const std::vector<std::string>& parts,
                      std::string_view sep) {
  std::string out;
  for (const std::string& p : parts) {
    if (!out.empty()) out += sep;
    out += p;
  }
  return out;
}

// Every address "host:port" resolves to, as "ip:port" ("[ip]:port" for
// IPv6), in the resolver's order without repeats.
std::vector<std::string> Resolve(const std::string& name) {
  const size_t colon = name.rfind(':');
  if (colon == std::string::npos || colon + 1 == name.size()) {
    throw Error(StatusCode::INVALID_ARGUMENT,
                "cluster DNS name '" + name + "': expected host:port");
  }
  std::string host = name.substr(0, colon);
  const std::string port = name.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
      rc != 0) {
    throw Error(StatusCode::UNAVAILABLE, "cannot resolve cluster name '" +
                                             name + "': " + gai_strerror(rc));
  }
  std::vector<std::string> out;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    std::string address;
    if (a->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
      address.append(text).append(":").append(port);
    } else if (a->ai_family == AF_INET6) {
      const auto* in = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
      inet_ntop(AF_INET6, &in->sin6_addr, text, sizeof(text));
      address.append("[").append(text).append("]:").append(port);
    } else {
      continue;
    }
    if (std::find(out.begin(), out.end(), address) == out.end()) {
      out.push_back(std::move(address));
    }
  }
  freeaddrinfo(found);
  return out;
}

// The session id `cluster_session` ("node=id,...") names for `node`, or "".
std::string SessionOf(std::string_view cluster_session, std::string_view node) {
  while (!cluster_session.empty()) {
    const size_t comma = cluster_session.find(',');
    const std::string_view entry = cluster_session.substr(0, comma);
    const size_t eq = entry.find('=');
    if (eq != std::string_view::npos && entry.substr(0, eq) == node) {
      return std::string(entry.substr(eq + 1));
    }
    if (comma == std::string_view::npos) break;
    cluster_session.remove_prefix(comma + 1);
  }
  return "";
}

// What one item's work came to: its result, or the Error it threw, or
// neither when it did not finish in time.
template <typename Result>
struct Outcome {
  std::optional<Result> result;
  std::optional<Error> error;
};

// Runs `work` on each item in its own thread and waits until all are done
// or `timeout` passes. Threads still running are left to finish on their
// own, owning what they use.
template <typename Item, typename Result, typename Work>
std::vector<Outcome<Result>> WithinTimeout(const std::vector<Item>& items,
                                           std::chrono::milliseconds timeout,
                                           Work work) {
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    size_t done = 0;
    std::vector<Outcome<Result>> outcomes;
  };
  auto shared = std::make_shared<Shared>();
  shared->outcomes.resize(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    std::thread([shared, i, item = items[i], work] {
      Outcome<Result> outcome;
      try {
        outcome.result = work(item);
      } catch (const Error& e) {
        outcome.error = e;
      } catch (const std::exception& e) {
        outcome.error = Error(StatusCode::INTERNAL, e.what());
      }
      std::lock_guard<std::mutex> lock(shared->mu);
      shared->outcomes[i] = std::move(outcome);
      ++shared->done;
      shared->cv.notify_all();
    }).detach();
  }
  std::unique_lock<std::mutex> lock(shared->mu);
  shared->cv.wait_until(lock, Clock::now() + timeout,
                        [&] { return shared->done == items.size(); });
  return shared->outcomes;  // a copy: late threads write only their own
}

// A node that answered with an error the caller must see (not one that
// only says the node is not there).
bool Reportable(const std::optional<Error>& error) {
  return error.has_value() && error->code() != StatusCode::UNAVAILABLE &&
         error->code() != StatusCode::DEADLINE_EXCEEDED;
}

}  // namespace

struct Cluster::Directory {
  std::mutex mu;
  std::map<std::string, std::weak_ptr<const internal::Session>, std::less<>>
      sessions;  // guarded by mu
};

void Cluster::Publish(const std::vector<std::shared_ptr<Node>>& nodes) const {
  std::map<std::string, std::weak_ptr<const internal::Session>, std::less<>>
      sessions;
  for (const auto& node : nodes) {
    sessions.emplace(node->name, node->client.session_);
    // A node joined before has it already (and may be in use: not again).
    if (node->client.session_->has_node_lookup()) continue;
    node->client.session_->set_node_lookup(
        [directory = std::weak_ptr<Directory>(directory_)](
            std::string_view name) -> std::shared_ptr<const internal::Session> {
          std::shared_ptr<Directory> d = directory.lock();
          if (d == nullptr) return nullptr;
          std::lock_guard<std::mutex> lock(d->mu);
          auto it = d->sessions.find(name);
          return it == d->sessions.end() ? nullptr : it->second.lock();
        });
  }
  std::lock_guard<std::mutex> lock(directory_->mu);
  directory_->sessions = std::move(sessions);
}

Cluster::Cluster(std::vector<std::string> addresses, ClusterOptions options)
    : Cluster(std::move(addresses), "", std::move(options), "") {}

Cluster Cluster::FromDns(std::string name, ClusterOptions options) {
  return Cluster({}, std::move(name), std::move(options), "");
}

Cluster Cluster::Attach(std::vector<std::string> addresses,
                        std::string_view cluster_session,
                        ClusterOptions options) {
  return Cluster(std::move(addresses), "", std::move(options),
                 cluster_session);
}

Cluster::Cluster(std::vector<std::string> addresses, std::string dns_name,
                 ClusterOptions options, std::string_view cluster_session)
    : addresses_(std::move(addresses)),
      dns_name_(std::move(dns_name)),
      options_(std::move(options)),
      directory_(std::make_shared<Directory>()) {
  const std::vector<std::string> all = Addresses();
  const std::string attach(cluster_session);
  const std::vector<Outcome<std::shared_ptr<Node>>> joined =
      WithinTimeout<std::string, std::shared_ptr<Node>>(
          all, options_.node_timeout * 2,
          [options = options_, attach](const std::string& address) {
            return Join(options, address, attach);
          });
  std::map<std::string, std::shared_ptr<Node>> by_name;
  for (const auto& outcome : joined) {
    if (Reportable(outcome.error)) throw *outcome.error;
    const std::shared_ptr<Node>& node = outcome.result.value_or(nullptr);
    if (node == nullptr) continue;
    auto [it, added] = by_name.emplace(node->name, node);
    if (!added) {
      throw Error(StatusCode::INVALID_ARGUMENT,
                  "addresses " + it->second->address + " and " +
                      node->address + " are both node '" + node->name +
                      "': each node of a cluster needs its own --node-name");
    }
  }
  if (by_name.empty()) {
    throw Error(StatusCode::UNAVAILABLE,
                "no tensord node answered within " +
                    std::to_string(options_.node_timeout.count()) +
                    " ms at " + (all.empty() ? "(no address)" : JoinNames(all, ", ")));
  }
  for (auto& [name, node] : by_name) nodes_.push_back(std::move(node));
  Publish(nodes_);
}

std::vector<std::string> Cluster::Addresses() const {
  return dns_name_.empty() ? addresses_ : Resolve(dns_name_);
}

std::shared_ptr<Cluster::Node> Cluster::Join(
    const ClusterOptions& options, const std::string& address,
    std::string_view cluster_session) {
  ConnectOptions connect = options.connect;
  connect.address = address;
  std::shared_ptr<grpc::Channel> channel = MakeChannel(connect);
  const auto deadline = std::chrono::system_clock::now() + options.node_timeout;
  // Connected, or given up on: a refused connection (a dead daemon at a
  // listed address) returns at once rather than retrying until the
  // deadline; an address that does not answer at all takes the timeout.
  for (grpc_connectivity_state state = channel->GetState(true);
       state != GRPC_CHANNEL_READY;) {
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE ||
        state == GRPC_CHANNEL_SHUTDOWN ||
        !channel->WaitForStateChange(state, deadline)) {
      return nullptr;
    }
    state = channel->GetState(true);
  }
  // The node's name, before opening anything on it.
  auto stub = internal::v1::TensorService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(deadline);
  internal::v1::ListDevicesResponse listed;
  if (!stub->ListDevices(&context, internal::v1::ListDevicesRequest(), &listed)
           .ok()) {
    return nullptr;
  }
  if (listed.node().empty()) {
    throw Error(StatusCode::FAILED_PRECONDITION,
                "the server at " + address +
                    " has no node name: start every node with --node-name");
  }
  ClientOptions client = options.client;
  client.qualify_devices = true;
  client.session = SessionOf(cluster_session, listed.node());
  return std::make_shared<Node>(
      Node{listed.node(), address, Client(std::move(channel), client)});
}

std::vector<std::shared_ptr<Cluster::Node>> Cluster::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return nodes_;
}

std::vector<std::string> Cluster::nodes() const {
  std::vector<std::string> out;
  for (const auto& node : Snapshot()) out.push_back(node->name);
  return out;
}

Client Cluster::node(std::string_view name) const {
  std::vector<std::shared_ptr<Node>> nodes;
  for (int look = 0; look < 2; ++look) {
    // The second look: perhaps a node that is new, or came back.
    if (look == 1) Refresh();
    nodes = Snapshot();
    for (const auto& node : nodes) {
      if (node->name == name) return node->client;
    }
  }
  std::vector<std::string> names;
  for (const auto& node : nodes) names.push_back(node->name);
  throw Error(StatusCode::NOT_FOUND, "no node '" + std::string(name) +
                                         "' in the cluster; its nodes: " +
                                         JoinNames(names, ", "));
}

Client Cluster::On(const Device& device) const {
  const std::string& name = device.str();
  const size_t slash = name.find('/');
  if (slash != std::string::npos) return node(name.substr(0, slash));
  const std::vector<std::shared_ptr<Node>> nodes = Snapshot();
  if (nodes.size() == 1) return nodes.front()->client;
  throw Error(StatusCode::INVALID_ARGUMENT,
              "device '" + name + "' names no node, and the cluster has " +
                  std::to_string(nodes.size()) + ": name one, as '" +
                  nodes.front()->name + "/" + name + "'");
}

std::vector<DeviceInfo> Cluster::devices() const {
  auto list = [this](const std::vector<std::shared_ptr<Node>>& nodes) {
    return WithinTimeout<std::shared_ptr<Node>, std::vector<DeviceInfo>>(
        nodes, options_.node_timeout, [](const std::shared_ptr<Node>& node) {
          return node->client.devices();
        });
  };
  const std::vector<std::shared_ptr<Node>> nodes = Snapshot();
  const auto listed = list(nodes);
  std::map<std::string, std::vector<DeviceInfo>> by_node;
  std::vector<bool> alive;
  for (size_t i = 0; i < nodes.size(); ++i) {
    alive.push_back(listed[i].result.has_value());
    if (alive.back()) by_node[nodes[i]->name] = *listed[i].result;
  }
  // A node that did not answer (or answered as a restarted server): the
  // name is resolved again, so a pod that came back at a new address, or a
  // restarted daemon, joins again, and its devices are listed too.
  if (std::find(alive.begin(), alive.end(), false) != alive.end()) {
    const std::vector<std::shared_ptr<Node>> added = Reconcile(nodes, alive);
    const auto more = list(added);
    for (size_t i = 0; i < added.size(); ++i) {
      if (more[i].result.has_value()) by_node[added[i]->name] = *more[i].result;
    }
  }
  std::vector<DeviceInfo> out;  // in node order
  for (auto& [name, devices] : by_node) {
    out.insert(out.end(), devices.begin(), devices.end());
  }
  return out;
}

std::string Cluster::session() const {
  std::vector<std::string> parts;
  for (const auto& node : Snapshot()) {
    parts.push_back(node->name + "=" + node->client.session());
  }
  return JoinNames(parts, ",");
}

void Cluster::refresh() { Refresh(); }

void Cluster::Refresh() const {
  const std::vector<std::shared_ptr<Node>> current = Snapshot();
  // A node answers as itself: a restarted server (another instance, this
  // session's tensors gone) throws here and is joined again, afresh.
  const auto answered = WithinTimeout<std::shared_ptr<Node>, bool>(
      current, options_.node_timeout, [](const std::shared_ptr<Node>& node) {
        node->client.server_version();  // throws when it does not answer
        return true;
      });
  std::vector<bool> alive;
  for (const auto& outcome : answered) alive.push_back(outcome.result.has_value());
  Reconcile(current, alive);
}

std::vector<std::shared_ptr<Cluster::Node>> Cluster::Reconcile(
    const std::vector<std::shared_ptr<Node>>& current,
    const std::vector<bool>& alive) const {
  std::vector<std::shared_ptr<Node>> kept;
  std::vector<std::string> known;
  for (size_t i = 0; i < current.size(); ++i) {
    if (!alive[i]) continue;
    kept.push_back(current[i]);
    known.push_back(current[i]->address);
  }
  std::vector<std::string> fresh;
  for (const std::string& address : Addresses()) {
    if (std::find(known.begin(), known.end(), address) == known.end()) {
      fresh.push_back(address);
    }
  }
  const auto joined = WithinTimeout<std::string, std::shared_ptr<Node>>(
      fresh, options_.node_timeout * 2,
      [options = options_](const std::string& address) {
        return Join(options, address, "");
      });
  std::vector<std::shared_ptr<Node>> added;
  for (const auto& outcome : joined) {
    const std::shared_ptr<Node>& node = outcome.result.value_or(nullptr);
    if (node == nullptr) continue;
    const bool taken = std::any_of(
        kept.begin(), kept.end(),
        [&](const std::shared_ptr<Node>& k) { return k->name == node->name; });
    if (taken) continue;
    kept.push_back(node);
    added.push_back(node);
  }
  std::sort(kept.begin(), kept.end(),
            [](const auto& a, const auto& b) { return a->name < b->name; });
  Publish(kept);
  std::lock_guard<std::mutex> lock(mu_);
  nodes_ = std::move(kept);
  return added;
}

Tensor Cluster::zeros(std::vector<int64_t> shape, DType dtype,
                      const Device& device) const {
  return On(device).zeros(std::move(shape), dtype, device);
}
Tensor Cluster::ones(std::vector<int64_t> shape, DType dtype,
                     const Device& device) const {
  return On(device).ones(std::move(shape), dtype, device);
}
Tensor Cluster::full(std::vector<int64_t> shape, double value, DType dtype,
                     const Device& device) const {
  return On(device).full(std::move(shape), value, dtype, device);
}
Tensor Cluster::rand(std::vector<int64_t> shape, const Device& device,
                     std::optional<uint64_t> seed) const {
  return On(device).rand(std::move(shape), device, seed);
}
Tensor Cluster::randn(std::vector<int64_t> shape, const Device& device,
                      std::optional<uint64_t> seed) const {
  return On(device).randn(std::move(shape), device, seed);
}
Tensor Cluster::FromBytes(DType dtype, std::vector<int64_t> shape,
                          std::string_view bytes, const Device& device) const {
  return On(device).FromBytes(dtype, std::move(shape), bytes, device);
}

}  // namespace tensord::client
