#!/usr/bin/env bash
# The egress proxy's cost on loopback (docs/benchmarks.md, "The egress proxy"): time to first byte direct against
# CONNECT, absolute-URL HTTP and a caught connection, and a download's throughput direct against CONNECT
# (crates/egress/examples/bench_proxy.rs, a release build). No root needed.
# Usage: scripts/bench-egress.sh [REQUESTS] [MEGABYTES]
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
cargo run --release --quiet --locked -p sandlot-egress --example bench_proxy -- "$@"
