#!/usr/bin/env bash
# Installs the .deb (built by scripts/package.sh, or the one given) on this machine with
# dpkg, checks what it installed, then removes and purges it.
# Usage: bash scripts/test-deb.sh [PATH.deb]        (needs root; builds the .deb if none)
# Checks: the binary runs (`numaio topo`), man pages and completions are where man and the
# shells look, the default config is a conffile the daemon accepts, the systemd unit passes
# `systemd-analyze verify` and scores <= 3.0 in `systemd-analyze security`, and removal
# takes it all away. systemd need not be running: both analyses work on unit files.
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS

skip() {
    echo "SKIPPED: test-deb.sh: $1" >&2
    [ -n "${NUMAIO_SKIP_LOG:-}" ] && echo "SKIPPED: test-deb.sh: $1" >> "$NUMAIO_SKIP_LOG"
    # CI has root, dpkg and systemd-analyze: a skip there is a failure.
    [ -n "${CI:-}" ] && exit 1
    exit 0
}
[ "$(id -u)" = 0 ] || skip "needs root to install a package"
command -v dpkg >/dev/null || skip "not a Debian system (no dpkg)"
if dpkg -s numaio >/dev/null 2>&1; then
    echo "test-deb.sh: a numaio package is already installed; remove it first (dpkg -r numaio)" >&2
    exit 1
fi

deb="${1:-}"
if [ -z "$deb" ]; then
    bash scripts/package.sh || { echo "test-deb.sh: scripts/package.sh failed" >&2; exit 1; }
    deb=$(ls -t target/debian/numaio_*.deb | head -1)
fi
[ -f "$deb" ] || { echo "test-deb.sh: no package at $deb" >&2; exit 1; }

pass=0; fail=0
check() {
    local what="$1"; shift
    if "$@" >/tmp/numaio-test-deb.out 2>&1; then
        pass=$((pass + 1)); echo "ok   $what"
    else
        fail=$((fail + 1)); echo "FAIL $what"; sed 's/^/     /' /tmp/numaio-test-deb.out | tail -20
    fi
}
# Leave no package behind whatever happens.
trap 'dpkg -P numaio >/dev/null 2>&1; rm -f /tmp/numaio-test-deb.out' EXIT

check "dpkg -i $(basename "$deb")" dpkg -i "$deb"
check "numaio is /usr/bin/numaio" test "$(command -v numaio)" = /usr/bin/numaio
check "numaio --version" sh -c 'numaio --version | grep -qx "numaio [0-9.]*"'
check "numaio topo" sh -c 'numaio topo | grep -q node'
check "numaio topo --json" sh -c 'numaio topo --json | grep -q "\"nodes\""'

subs=$(numaio --help | sed -n '/^Commands:/,/^$/p' | awk 'NR>1 && NF {print $1}' | grep -vx help)
check "man pages for numaio and its $(echo $subs | wc -w) subcommands" sh -c '
    test -s /usr/share/man/man1/numaio.1.gz || exit 1
    for s in '"$(echo $subs)"'; do test -s /usr/share/man/man1/numaio-$s.1.gz || { echo "no numaio-$s.1.gz"; exit 1; }; done'
if command -v man >/dev/null; then
    check "man -w numaio" sh -c 'test "$(man -w numaio)" = /usr/share/man/man1/numaio.1.gz'
    check "man numaio-daemon renders" sh -c 'MANPAGER=cat man numaio-daemon | grep -q "Exit status"'
else
    echo "SKIPPED: test-deb.sh: man -w: man is not installed (the files are checked above)" >&2
fi
check "bash completion" sh -c 'bash -n /usr/share/bash-completion/completions/numaio && grep -q "complete -F _numaio" /usr/share/bash-completion/completions/numaio'
check "zsh completion" sh -c 'head -1 /usr/share/zsh/vendor-completions/_numaio | grep -q "#compdef numaio"'
check "fish completion" grep -q "complete -c numaio" /usr/share/fish/vendor_completions.d/numaio.fish
check "/etc/numaio.toml is a conffile" sh -c 'dpkg-query -W -f="\${Conffiles}" numaio | grep -q "/etc/numaio.toml"'
check "the daemon accepts /etc/numaio.toml" numaio daemon --config /etc/numaio.toml --once --dry-run

unit=$(dpkg -L numaio | grep '/systemd/system/numaio.service$' | head -1)
check "unit installed ($unit)" test -s "$unit"
check "unit not enabled by the package" sh -c '! ls /etc/systemd/system/*/numaio.service 2>/dev/null | grep -q .'
if command -v systemd-analyze >/dev/null; then
    check "systemd-analyze verify $unit" systemd-analyze verify "$unit"
    score=$(systemd-analyze security --offline=yes "$unit" 2>/dev/null | sed -n 's/.*Overall exposure level for numaio.service: \([0-9.]*\).*/\1/p')
    echo "     systemd-analyze security: exposure ${score:-?}"
    check "systemd-analyze security exposure ${score:-?} <= 3.0" awk -v s="${score:-99}" 'BEGIN { exit !(s <= 3.0) }'
else
    echo "SKIPPED: test-deb.sh: systemd-analyze is not installed (apt-get install systemd)" >&2
    [ -n "${CI:-}" ] && fail=$((fail + 1))
fi

check "dpkg -r numaio" dpkg -r numaio
check "binary, man pages and completions removed" sh -c '! test -e /usr/bin/numaio && ! ls /usr/share/man/man1/numaio*.1.gz 2>/dev/null | grep -q . && ! test -e /usr/share/bash-completion/completions/numaio && ! test -e "'"$unit"'"'
check "config kept until purge" test -e /etc/numaio.toml
check "dpkg -P numaio removes the config" sh -c 'dpkg -P numaio && ! test -e /etc/numaio.toml'

echo "test-deb: $((SECONDS - t0)) s"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
