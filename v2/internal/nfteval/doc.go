// Package nfteval evaluates one packet against an nftables table as the
// kernel reports it (`nft -j list table <family> <name>`, libnftables' JSON
// schema) and says which verdict the table's base chains of one hook give,
// and which rule, or which chain policy, gave it.
//
// It exists to check renderers from the outside: a test renders a model into
// the kernel, lists the table, and compares what this package computes for a
// packet with what the model says. It is written from the nftables semantics,
// not from any vcoil renderer, so a renderer's mistake is not repeated here.
//
// What it understands is what a filter table of policies or services uses:
// base chains (hook, priority, policy) of type filter; matches on ip/ip6
// addresses, ip protocol, th/tcp/udp/sctp ports, icmp/icmpv6 types, meta
// l4proto, nfproto, iifname, oifname and mark, ct state, `fib daddr type
// local` and `fib saddr type local`; the operators ==, !=, the implicit flag match and <, >, <=, >=;
// literals, prefixes, ranges, anonymous and named sets, interval sets and
// concatenations; verdict maps, named and anonymous; accept, drop, reject,
// continue, return, jump and goto; counter and log, which change nothing.
//
// It deliberately does not guess. Anything else in a rule (NAT, a mark being
// set, a limit before a verdict, a ct key other than state, raw payload
// offsets, a set type it does not know) makes Parse fail with the rule's
// chain and handle, and a packet for which a rule's outcome would be
// undefined makes Evaluate fail: `th dport 80` on an ICMP packet (the kernel
// reads whatever bytes sit there), unless another part of the match decides
// it (`ip daddr . meta l4proto . th dport @set` whose elements are all TCP).
// A check that silently skipped what it does not understand could not fail.
//
// The implicit dependencies that nft adds when it compiles a rule (an `ip
// saddr` match only applies to IPv4, a `tcp dport` match only to TCP) are not
// in the JSON listing; they are restored here, so that such a match never
// matches a packet of another family or protocol, whatever its operator.
package nfteval
