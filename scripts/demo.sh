#!/usr/bin/env bash
# The main demo: set up, build, show `numaio topo` on this machine, then boot 2-node NUMA lab
# guests: `numaio topo`, a numaio-fs volume mounted with FUSE (placement and accounting),
# and page-cache locality of one file.
set -euo pipefail
cd "$(dirname "$0")/.."
# The demo needs the base packages and the guest kernels, not the test tools or programs.
NUMAIO_SETUP_PARTS=base,kernels bash scripts/setup.sh
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"

echo
echo "== cargo build --release"
cargo build --release --workspace --bins
BIN="${CARGO_TARGET_DIR:-target}/release"

echo
echo "== numaio topo (this machine)"
"$BIN/numaio" topo

echo
echo "== numaio topo inside a 2-node lab guest (QEMU, 2 x 1 CPU, 2 x 512 MiB)"
"$BIN/numaio-lab" expect --nodes 2
echo
"$BIN/numaio-lab" run --nodes 2 --timing -- numaio topo

echo
echo "== numaio mount in a 2-node lab guest: writer-local blocks and per-node accounting (see scripts/demo-mount-guest.sh)"
"$BIN/numaio-lab" run --nodes 2 --module fuse --node-disk 0=64M --node-disk 1=64M --timing --script scripts/demo-mount-guest.sh

echo
echo "== page-cache locality of one file in a 2-node lab guest (where, warm, move; see scripts/demo-guest.sh)"
"$BIN/numaio-lab" run --nodes 2 --disk data.bin=8M --timing --script scripts/demo-guest.sh
