#!/usr/bin/env bash
# Runs an MPI program on two "hosts" made on this machine: two network namespaces joined by a
# veth pair, one rank in each, talking over TCP (mpirun starts the second rank through `ip netns
# exec`, as it would through ssh). Exits 77 (CTest: skipped) where namespaces cannot be made
# (not root, no CAP_NET_ADMIN, no iproute2).
#
#   tests/dist/two_hosts.sh PROGRAM [ARGS...]
set -euo pipefail
(($#)) || { echo "usage: two_hosts.sh PROGRAM [ARGS...]" >&2; exit 2; }
command -v ip >/dev/null || { echo "two_hosts: no iproute2 (ip): skipped"; exit 77; }
command -v mpirun >/dev/null || { echo "two_hosts: no mpirun: skipped"; exit 77; }

a="tessera_a$$" b="tessera_b$$" net=10.213.77
work="$(mktemp -d)"
cleanup() {
  ip netns delete "$a" 2>/dev/null || true
  ip netns delete "$b" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
if ! ip netns add "$a" 2>/dev/null || ! ip netns add "$b" 2>/dev/null; then
  echo "two_hosts: cannot create network namespaces here: skipped"
  exit 77
fi
ip link add "va$$" type veth peer name "vb$$"
ip link set "va$$" netns "$a"
ip link set "vb$$" netns "$b"
ip -n "$a" addr add "$net.1/24" dev "va$$"
ip -n "$b" addr add "$net.2/24" dev "vb$$"
for ns in "$a" "$b"; do
  ip -n "$ns" link set lo up
done
ip -n "$a" link set "va$$" up
ip -n "$b" link set "vb$$" up

# mpirun's launch agent: "AGENT [options] HOST COMMAND..." runs COMMAND in HOST's namespace.
cat >"$work/agent" <<AGENT
#!/bin/sh
while [ "\${1#-}" != "\$1" ]; do shift; done
host="\$1"; shift
case "\$host" in $net.1) ns=$a ;; $net.2) ns=$b ;; *) ns="\$host" ;; esac
exec ip netns exec "\$ns" /bin/sh -c "\$*"
AGENT
chmod +x "$work/agent"

# Every rank sees the caller's environment variables that tessera and OpenMP read.
exports=()
for v in OMP_NUM_THREADS OMP_WAIT_POLICY TESSERA_DIST_TIMEOUT TESSERA_MINILM_DIR; do
  [[ -n "${!v:-}" ]] && exports+=(-x "$v")
done
echo "two_hosts: rank 0 in $a ($net.1), rank 1 in $b ($net.2), TCP over a veth pair"
# mpi_yield_when_idle: the ranks yield the CPU while they wait. Both hosts share this machine's
# cores, and the kernel delivers veth packets in software: ranks spinning on every core starve
# it until the next scheduler tick (measured: every all-reduce took a multiple of 8 ms).
ip netns exec "$a" mpirun --mca plm_rsh_agent "$work/agent" --host "$net.1,$net.2" -np 2 \
  --mca btl tcp,self --mca btl_tcp_if_include "$net.0/24" --mca oob_tcp_if_include "$net.0/24" \
  --mca mpi_yield_when_idle 1 "${exports[@]}" "$@"
