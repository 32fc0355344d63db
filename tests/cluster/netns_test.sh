#!/usr/bin/env bash
# Many nodes across network namespaces (issue 13): two tensord daemons, each
# in a network namespace this test makes (ip netns, veth pairs, private
# 10.213.x.x/30 addresses, nothing routed anywhere else), tokens for the
# client and for the nodes, and examples/cluster_move on the host: devices
# named by node, a 4 MiB move server to server across the namespaces (the
# destination pulls over the link between the two namespaces), and PyTorch's
# same-device error across nodes.
#
#   netns_test.sh TENSORD CLUSTER_MOVE [loopback]
#
# Exits 77 (CTest: skipped) with the reason where the machine does not let
# it make namespaces (not root, no iproute2, no CAP_SYS_ADMIN/NET_ADMIN).
# With "loopback" the same scenario runs with both daemons on 127.0.0.1
# (ports they pick) and no namespace: it runs everywhere.
set -euo pipefail

tensord=$1
cluster_move=$2
mode=${3:-netns}

skip() {
  echo "SKIPPED: $*"
  exit 77
}
if [[ $mode == netns ]]; then
  [[ $(id -u) -eq 0 ]] || skip "making network namespaces needs root"
  command -v ip >/dev/null || skip "no ip command (iproute2)"
fi

tag="td$$"  # unique per run; interface names stay under 15 bytes
ns_a="${tag}a"
ns_b="${tag}b"
dir=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
  [[ $mode == netns ]] || return 0
  ip netns del "$ns_a" 2>/dev/null || true
  ip netns del "$ns_b" 2>/dev/null || true
  ip link del "${tag}ha" 2>/dev/null || true
  ip link del "${tag}hb" 2>/dev/null || true
}
trap cleanup EXIT

head -c 24 /dev/urandom | base64 > "$dir/client-token"
{
  echo "tensord-0 $(head -c 24 /dev/urandom | base64)"
  echo "tensord-1 $(head -c 24 /dev/urandom | base64)"
} > "$dir/node-tokens"
expect() {
  grep -qF -- "$1" <<<"$out" || {
    echo "FAIL: expected: $1"
    exit 1
  }
}
check() {  # check ADDRESS_A ADDRESS_B
  out=$("$cluster_move" --token-file "$dir/client-token" --size 1048576 "$1" "$2")
  echo "$out"
  expect "device tensord-0/cpu"
  expect "device tensord-1/cpu"
  expect "moved 4194304 bytes from tensord-0/cpu to tensord-1/cpu: every value arrived"
  expect "y * 2 ran on tensord-1/cpu"
  expect "Expected all tensors to be on the same device, but found at least two devices, tensord-0/cpu and tensord-1/cpu!"
  echo "PASS"
}
wait_for() {  # wait_for FILE...
  for _ in $(seq 100); do
    local all=1
    for f in "$@"; do [[ -s $f ]] || all=0; done
    [[ $all == 1 ]] && return 0
    sleep 0.1
  done
  echo "FAIL: the daemons did not start"
  exit 1
}

if [[ $mode == loopback ]]; then
  # tensord-0 first, on a port it picks; tensord-1 then knows where it is.
  "$tensord" --listen 127.0.0.1:0 --node-name tensord-0 \
    --node-token-file "$dir/node-tokens" --port-file "$dir/a.port" \
    --log-level warn &
  pids+=($!)
  wait_for "$dir/a.port"
  "$tensord" --listen 127.0.0.1:0 --node-name tensord-1 \
    --node-token-file "$dir/node-tokens" \
    --peers "tensord-0=127.0.0.1:$(cat "$dir/a.port")" \
    --port-file "$dir/b.port" --log-level warn &
  pids+=($!)
  wait_for "$dir/b.port"
  check "127.0.0.1:$(cat "$dir/a.port")" "127.0.0.1:$(cat "$dir/b.port")"
  exit 0
fi

ip netns add "$ns_a" 2>/dev/null || skip "ip netns add failed (no CAP_SYS_ADMIN)"
ip netns add "$ns_b"

# host <-> a (10.213.1.0/30), host <-> b (10.213.2.0/30), a <-> b (10.213.3.0/30)
link() {  # link HOST_SIDE_NAME NS_SIDE_NAME NS HOST_ADDR NS_ADDR
  ip link add "$1" type veth peer name "$2"
  ip link set "$2" netns "$3"
  ip addr add "$4/30" dev "$1"
  ip link set "$1" up
  ip -n "$3" addr add "$5/30" dev "$2"
  ip -n "$3" link set "$2" up
}
link "${tag}ha" "${tag}ah" "$ns_a" 10.213.1.1 10.213.1.2 ||
  skip "cannot make veth pairs (no CAP_NET_ADMIN)"
link "${tag}hb" "${tag}bh" "$ns_b" 10.213.2.1 10.213.2.2
ip link add "${tag}ab" type veth peer name "${tag}ba"
ip link set "${tag}ab" netns "$ns_a"
ip link set "${tag}ba" netns "$ns_b"
ip -n "$ns_a" addr add 10.213.3.1/30 dev "${tag}ab"
ip -n "$ns_b" addr add 10.213.3.2/30 dev "${tag}ba"
ip -n "$ns_a" link set "${tag}ab" up
ip -n "$ns_b" link set "${tag}ba" up
ip -n "$ns_a" link set lo up
ip -n "$ns_b" link set lo up

start() {  # start NS NODE PEERS
  ip netns exec "$1" "$tensord" --listen 0.0.0.0:50051 --node-name "$2" \
    --auth-token-file "$dir/client-token" \
    --node-token-file "$dir/node-tokens" --peers "$3" \
    --port-file "$dir/$2.port" --log-level warn &
  pids+=($!)
}
start "$ns_a" tensord-0 "tensord-1=10.213.3.2:50051"
start "$ns_b" tensord-1 "tensord-0=10.213.3.1:50051"
wait_for "$dir/tensord-0.port" "$dir/tensord-1.port"
check 10.213.1.2:50051 10.213.2.2:50051
