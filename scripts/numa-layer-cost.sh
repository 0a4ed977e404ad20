#!/usr/bin/env bash
# Compares a move_pages node query through numaio-sys with libnuma's numa_move_pages on the
# same number of pages (docs/ARCHITECTURE.md). Needs a C compiler and libnuma.so.1; the
# header is not needed. Both query in batches of 1024 pages (numaio-sys's MOVE_PAGES_BATCH).
# A measurement, not a test: not run by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
PAGES=${1:-16384}
ROUNDS=${2:-200}
lib=$(ldconfig -p | awk '/libnuma\.so\.1 /{print $NF; exit}')
[ -n "$lib" ] || { echo "libnuma.so.1 not found: apt-get install libnuma1" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/q.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
long numa_move_pages(int pid, unsigned long count, void **pages, const int *nodes,
                     int *status, int flags);
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 16384, rounds = argc > 2 ? atol(argv[2]) : 200;
    char *buf = aligned_alloc(4096, n * 4096);
    void **pages = malloc(n * sizeof *pages);
    int *status = malloc(n * sizeof *status);
    for (long i = 0; i < n; i++) { buf[i * 4096] = 1; pages[i] = buf + i * 4096; }
    if (numa_move_pages(0, n, pages, NULL, status, 0)) { perror("numa_move_pages"); return 1; }
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long r = 0; r < rounds; r++)
        for (long i = 0; i < n; i += 1024)
            numa_move_pages(0, n - i < 1024 ? n - i : 1024, pages + i, NULL, status + i, 0);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / (double)(n * rounds);
    printf("libnuma numa_move_pages: %.1f ns/page (%ld pages x %ld rounds)\n", ns, n, rounds);
    return 0;
}
C
cc -O2 -o "$tmp/q" "$tmp/q.c" "$lib"
cargo build -q --release -p numaio-sys --example move_pages_cost
for _ in 1 2 3; do
    "$tmp/q" "$PAGES" "$ROUNDS"
    target/release/examples/move_pages_cost "$PAGES" "$ROUNDS"
done
