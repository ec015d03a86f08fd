#!/usr/bin/env bash
# The TCP rendezvous between two network namespaces joined by a veth pair,
# as between two hosts: rank 0 in one, ranks 1 and 2 in the other reach it
# by its address and all end with rank 0's id; a missing rank times out
# with a message naming it on both sides; a wrong port is reported as
# unreachable. Needs root (ip netns); elsewhere it prints why it is skipped.
set -u
source "$(dirname "$0")/lib.bash"
e2e_init rendezvous_netns
peer="$build/tests/e2e/rendezvous_peer"

skip() {
  echo "skipped: $*"
  exit 0
}
[ "$(id -u)" -eq 0 ] || skip "not root (network namespaces need CAP_NET_ADMIN)"
command -v ip >/dev/null || skip "no 'ip' command (iproute2)"
ns_a="ltc-rdv-a-$$"
ns_b="ltc-rdv-b-$$"
cleanup() {
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
if ! reason=$(ip netns add "$ns_a" 2>&1); then skip "ip netns add failed: $reason"; fi
ip netns add "$ns_b" || fail "ip netns add $ns_b"
subnet="10.$((100 + $$ % 100)).$(($$ / 100 % 250)).0"
addr_a="${subnet%.0}.1"
addr_b="${subnet%.0}.2"
ip link add "veth-a$$" type veth peer name "veth-b$$" &&
  ip link set "veth-a$$" netns "$ns_a" && ip link set "veth-b$$" netns "$ns_b" &&
  ip -n "$ns_a" addr add "$addr_a/24" dev "veth-a$$" &&
  ip -n "$ns_b" addr add "$addr_b/24" dev "veth-b$$" &&
  ip -n "$ns_a" link set "veth-a$$" up && ip -n "$ns_b" link set "veth-b$$" up &&
  ip -n "$ns_a" link set lo up && ip -n "$ns_b" link set lo up ||
  { fail "could not build the veth pair between $ns_a and $ns_b"; e2e_finish; }

port=29511
# Ranks 1 and 2 start before rank 0 and must retry until it listens.
ip netns exec "$ns_b" "$peer" 1 3 "$addr_a" "$port" run-a 20 >"$work/r1" 2>&1 &
p1=$!
ip netns exec "$ns_b" "$peer" 2 3 "$addr_a" "$port" run-a 20 >"$work/r2" 2>&1 &
p2=$!
sleep 0.5
ip netns exec "$ns_a" "$peer" 0 3 "$addr_a" "$port" run-a 20 >"$work/r0" 2>&1 ||
  fail "rank 0: $(cat "$work/r0")"
wait "$p1" || fail "rank 1: $(cat "$work/r1")"
wait "$p2" || fail "rank 2: $(cat "$work/r2")"
[ "$(wc -c <"$work/r0")" -eq 257 ] || fail "rank 0 printed no id: $(cat "$work/r0")"
cmp -s "$work/r0" "$work/r1" || fail "rank 1's id differs from rank 0's"
cmp -s "$work/r0" "$work/r2" || fail "rank 2's id differs from rank 0's"

# Rank 2 never comes: both sides say so within the timeout.
ip netns exec "$ns_b" "$peer" 1 3 "$addr_a" "$port" run-b 2 >"$work/m1" 2>&1 &
p1=$!
expect 1 "missing ranks 2" -- ip netns exec "$ns_a" "$peer" 0 3 "$addr_a" "$port" run-b 2
wait "$p1" && fail "rank 1 succeeded without rank 2"
grep -q "rank 0 gave up" "$work/m1" || fail "rank 1 was not told why: $(cat "$work/m1")"

# Nobody listens on the other port: unreachable, with the address.
expect 1 "could not get the id from rank 0 at $addr_a:$((port + 1))" -- \
  ip netns exec "$ns_b" "$peer" 1 2 "$addr_a" "$((port + 1))" run-c 1
e2e_finish
