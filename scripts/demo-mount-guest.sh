# Runs inside a 2-node lab guest (busybox sh), from scripts/demo.sh: numaio mount, the NUMA-aware
# file system, used by unmodified programs. One NVMe disk per node (`node-disk N` names it).
set -e
devs="$(node-disk 0) $(node-disk 1)"
echo "# a volume over one disk per node, mounted with FUSE"
numaio mkfs $devs
mkdir -p /v
numaio mount $devs /v
echo; echo "# unmodified dd, pinned to node 0 and to node 1 (numactl), write through the mount"
numactl --cpunodebind=0 dd if=/dev/zero of=/v/from-node0 bs=64k count=64 conv=fsync 2>/dev/null
numactl --cpunodebind=1 dd if=/dev/zero of=/v/from-node1 bs=64k count=64 conv=fsync 2>/dev/null
echo; echo "# per node: space, cache, bytes read and written; then per process: bytes per node of the data"
numaio fs stat /v
echo; echo "# unmount (flushes), then where each file's blocks are: writer-local placement"
numaio umount /v
dargs=""; for d in $devs; do dargs="$dargs -d $d"; done
numaio fs map $dargs /
