# Sourced by the bench scripts (not run): a chain of three network
# namespaces, left -- middle -- right, joined by two veth pairs.
#
#   ns_chain PREFIX L M R LEFT_IF MID_LEFT_IF MID_RIGHT_IF RIGHT_IF
#
# creates the namespaces ${PREFIX}L, ${PREFIX}M and ${PREFIX}R (loopback
# up), the veth pair LEFT_IF (in L) -- MID_LEFT_IF (in M) and the pair
# MID_RIGHT_IF (in M) -- RIGHT_IF (in R), all interface names prefixed by
# PREFIX too. The interfaces stay down (the caller sets sysctls and
# addresses first).
#
#   ns_chain_del PREFIX L M R
#
# deletes the three namespaces (and their interfaces), ignoring any that
# is gone.

ns_chain() {
    local p=$1 l=$2 m=$3 r=$4
    local n
    for n in "$l" "$m" "$r"; do
        ip netns add "$p$n"
        ip -n "$p$n" link set lo up
    done
    ip link add "$p$5" netns "$p$l" type veth peer name "$p$6" netns "$p$m"
    ip link add "$p$7" netns "$p$m" type veth peer name "$p$8" netns "$p$r"
}

ns_chain_del() {
    local p=$1 n
    shift
    for n in "$@"; do ip netns del "$p$n" 2>/dev/null || true; done
}
