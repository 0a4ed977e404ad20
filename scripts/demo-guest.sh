# Runs inside a 2-node lab guest (busybox sh), from scripts/demo.sh: page-cache locality of one file.
set -e
echo "# cold file: where reads nothing in"
numaio evict /mnt/data.bin >/dev/null
numaio where /mnt/data.bin
echo; echo "# read under numactl --membind=0 (kernel places pages on the reader's node)"
numactl --membind=0 cat /mnt/data.bin > /dev/null
numaio where --map /mnt/data.bin
echo; echo "# warm --node 1: pages already cached on node 0 are migrated, then verified"
numaio warm /mnt/data.bin --node 1
echo; echo "# move: 1 MiB stripes over nodes 0,1 (ZonFS striping), reads nothing new"
numaio move /mnt/data.bin --stripe 0,1 --chunk 1M
numaio where --map /mnt/data.bin
