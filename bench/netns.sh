# Several "machines" on one host, for the split benchmarks (sourced by bench/split_net.sh and bench/llama_rpc.sh):
#   netns_up PREFIX NET COUNT   namespaces PREFIX0.. with addresses NET.1.. (NET like 10.78.0) on a bridge, veth
#                               PREFIXv<r>p inside each, host names in /etc/hosts; sets $NETNS_AGENT, an rsh agent for
#                               mpirun (--mca plm_rsh_agent) that starts a command inside the namespace named as host
#   netns_mpirun ARGS...        mpirun across them: one daemon per namespace, TCP between them on NET.0/24
#   netns_down                  removes what netns_up made (call it from an EXIT trap)
# Needs root and iproute2.
netns_up() {
  NETNS_PREFIX=$1 NETNS_NET=$2 NETNS_COUNT=$3
  NETNS_AGENT=$(mktemp)
  printf '#!/bin/sh\nhost=$1; shift\nexec ip netns exec "$host" sh -c "$*"\n' >"$NETNS_AGENT"
  chmod +x "$NETNS_AGENT"
  ip link add "${NETNS_PREFIX}br" type bridge
  ip link set "${NETNS_PREFIX}br" up
  ip addr add "$NETNS_NET.254/24" dev "${NETNS_PREFIX}br"
  local r ns
  for r in $(seq 0 $((NETNS_COUNT - 1))); do
    ns=$NETNS_PREFIX$r
    ip netns add "$ns"
    ip link add "${NETNS_PREFIX}v$r" type veth peer name "${NETNS_PREFIX}v${r}p"
    ip link set "${NETNS_PREFIX}v${r}p" netns "$ns"
    ip link set "${NETNS_PREFIX}v$r" master "${NETNS_PREFIX}br"
    ip link set "${NETNS_PREFIX}v$r" up
    ip netns exec "$ns" ip addr add "$NETNS_NET.$((r + 1))/24" dev "${NETNS_PREFIX}v${r}p"
    ip netns exec "$ns" ip link set "${NETNS_PREFIX}v${r}p" up
    ip netns exec "$ns" ip link set lo up
    grep -q " $ns\$" /etc/hosts || echo "$NETNS_NET.$((r + 1)) $ns" >>/etc/hosts
  done
}
# --bind-to none: each namespace's daemon would otherwise bind its rank to "its" first core, the same one for all;
# --mca routed direct: Open MPI's default routing tree between the daemons failed now and then to wire up (its
# message suggests this)
netns_mpirun() {
  mpirun --allow-run-as-root --oversubscribe --bind-to none --mca routed direct --mca plm_rsh_agent "$NETNS_AGENT" \
    --mca oob_tcp_if_include "$NETNS_NET.0/24" --mca btl self,tcp --mca btl_tcp_if_include "$NETNS_NET.0/24" "$@"
}
netns_down() {
  local r
  for r in $(seq 0 $((${NETNS_COUNT:-0} - 1))); do ip netns del "$NETNS_PREFIX$r" 2>/dev/null || true; done
  ip link del "${NETNS_PREFIX}br" 2>/dev/null || true
  rm -f "${NETNS_AGENT:-}"
}
