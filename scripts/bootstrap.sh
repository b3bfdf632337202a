#!/usr/bin/env bash
# Fetches everything wgml needs to build and run into deps/ (gitignored), idempotently.
#
#   deps/dawn/        the Dawn runtime: a system Dawn if the distribution packages one,
#                     else the pinned npm prebuilt, checked against its published integrity
#   deps/webgpu/      webgpu.h from Debian's libwebgpu-dawn-dev (unpacked, not installed)
#   deps/lavapipe/    Mesa's lavapipe Vulkan driver from bookworm-backports plus the Vulkan
#                     loader, unpacked privately, for machines without a GPU
#   deps/env.sh       the environment that makes the private driver visible (sourced by make)
#   deps/dawn-sid/    with DAWN=sid (make DAWN=sid ...): Debian unstable's Dawn
#                     (libwebgpu-dawn0, the build webgpu.h comes from) with the libraries
#                     it needs from unstable (glibc, libstdc++, abseil) unpacked beside it:
#                     the programs built against it name its dynamic loader; and
#                     unstable's lavapipe with what it needs (Mesa 26: subgroup matrices)
#   deps/env-sid.sh   the environment for those programs: unstable's lavapipe made visible
#
# Debian build tools that are missing are installed with apt-get (root, or sudo).
# Mirrors are read from this machine's own apt configuration; no host is named here.
# A second run finds deps/.stamp-* files and returns at once.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
deps="$here/deps"
mkdir -p "$deps"

DAWN_NPM_PKG=bun-webgpu-linux-x64
DAWN_NPM_VERSION=0.1.7
DAWN_NPM_INTEGRITY='sha512-UEP7UZdEhx9otvkZczjsszL8ZVlrODANQvgl+C88/bNVmxDoFi7w1fWzGi1sZyakiETjmtFDq2/xCLhbSZxjqw=='
HEADER_PKG=libwebgpu-dawn-dev
# DAWN=sid: the runtime pinned by version and checksum; the packages it depends on are
# read from its Depends and taken at the version unstable serves (apt checks them against
# the archive's signed index)
DAWN_SID_PKG=libwebgpu-dawn0
DAWN_SID_VERSION='0.0~git20260909.1a75cb7f-1'
DAWN_SID_SHA256=7b424e7ffec48e6a94d6c986f4564d1df7380284d4c6cc6bee614c7b10b8cdd0
# and unstable's lavapipe beside it (Mesa 26 lists subgroup matrices; bookworm-backports'
# 25.0 does not), pinned the same way, what it needs taken by apt's dependency closure
MESA_SID_PKG=mesa-vulkan-drivers
MESA_SID_VERSION='26.2.6-1'
MESA_SID_SHA256=fe78bf25497ad1a7afae87cc59838fe86344d811e2e87d6f8047612fae521711
DAWN=${DAWN:-npm}
LAVAPIPE_SUITE=bookworm-backports

say() { printf 'bootstrap: %s\n' "$*"; }
die() { printf 'bootstrap: error: %s\n' "$*" >&2; exit 1; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"
    elif command -v sudo >/dev/null; then sudo "$@"
    else die "need root to run: $*"; fi
}

# ---------------------------------------------------------------- build tools
# --fuzz: only the fuzzing toolchain (clang with libFuzzer), for `make fuzz`
pkgs_wanted="cmake make gcc pkg-config libcjson-dev libpcre2-dev libutf8proc-dev libmicrohttpd-dev libopenmpi-dev openmpi-bin curl python3 npm openssl"
[ "${1:-}" = --fuzz ] && pkgs_wanted="clang libclang-rt-14-dev libcjson-dev libpcre2-dev libutf8proc-dev"
need_pkgs=()
for p in $pkgs_wanted; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need_pkgs+=("$p")
done
# npm may come from elsewhere (e.g. nodesource); only ask apt for it when absent.
if command -v npm >/dev/null; then
    need_pkgs=("${need_pkgs[@]/npm}")
fi
pkgs=(); for p in "${need_pkgs[@]}"; do [ -n "$p" ] && pkgs+=("$p"); done
if [ ${#pkgs[@]} -gt 0 ]; then
    say "installing Debian packages: ${pkgs[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
fi
[ "${1:-}" = --fuzz ] && exit 0

# ---------------------------------------------------------------- private apt
# The mirror this machine already uses, from its deb822 or one-line source lists.
mirror() {
    local m=""
    if ls /etc/apt/sources.list.d/*.sources >/dev/null 2>&1; then
        m=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)
    fi
    if [ -z "$m" ] && [ -f /etc/apt/sources.list ]; then
        m=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z+]+:\/\//) { print $i; exit } }' /etc/apt/sources.list)
    fi
    [ -n "$m" ] || die "no Debian mirror found in /etc/apt/sources.list{,.d}"
    # a security mirror is not the archive: take its parent archive path
    echo "${m%-security}"
}

# private_apt NAME "suite ..." : an apt state of our own in deps/apt/NAME, printed as options
private_apt() {
    local name=$1 suites=$2 dir="$deps/apt/$1" m
    m=$(mirror)
    mkdir -p "$dir/lists/partial" "$dir/archives/partial"
    : > "$dir/sources.list"
    for s in $suites; do
        echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $m $s main" >> "$dir/sources.list"
    done
    local o="-oDir::State::Lists=$dir/lists -oDir::Etc::SourceList=$dir/sources.list"
    o="$o -oDir::Etc::SourceParts=/dev/null -oDir::Cache::archives=$dir/archives"
    o="$o -oDir::Cache::pkgcache= -oDir::Cache::srcpkgcache= -oDebug::NoLocking=1"
    o="$o -oAPT::Sandbox::User=root -oAcquire::Languages=none"
    if [ ! -f "$dir/.updated" ]; then
        apt-get $o -qq update >/dev/null || die "apt-get update for $suites failed"
        touch "$dir/.updated"
    fi
    echo "$o"
}

# ---------------------------------------------------------------- Dawn runtime
if [ ! -f "$deps/.stamp-dawn" ]; then
    rm -rf "$deps/dawn"; mkdir -p "$deps/dawn"
    sys=$(ls /usr/lib/*/libwebgpu_dawn.so 2>/dev/null | head -n1 || true)
    if [ -n "$sys" ] && [ -f /usr/include/webgpu/webgpu.h ]; then
        say "using the system Dawn: $sys"
        echo system > "$deps/dawn/kind"
    else
        say "fetching $DAWN_NPM_PKG@$DAWN_NPM_VERSION from the npm registry"
        tmp=$(mktemp -d)
        (cd "$tmp" && npm pack --silent "$DAWN_NPM_PKG@$DAWN_NPM_VERSION" >/dev/null) \
            || die "npm pack $DAWN_NPM_PKG@$DAWN_NPM_VERSION failed"
        tgz=$(ls "$tmp"/*.tgz)
        got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)"
        [ "$got" = "$DAWN_NPM_INTEGRITY" ] || die "integrity mismatch for $tgz: $got"
        tar -xzf "$tgz" -C "$tmp"
        cp "$tmp/package/libwebgpu_wrapper.so" "$tmp/package/LICENSE" "$deps/dawn/"
        rm -rf "$tmp"
        echo npm > "$deps/dawn/kind"
    fi
    touch "$deps/.stamp-dawn"
fi

# ---------------------------------------------------------------- webgpu.h
if [ ! -f "$deps/.stamp-webgpu" ]; then
    if [ "$(cat "$deps/dawn/kind")" = system ]; then
        mkdir -p "$deps/webgpu"
    else
        say "fetching webgpu.h from Debian's $HEADER_PKG"
        o=$(private_apt sid "sid")
        tmp=$(mktemp -d); chmod 755 "$tmp"
        (cd "$tmp" && apt-get $o -qq download "$HEADER_PKG" >/dev/null 2>&1) || die "apt-get download $HEADER_PKG failed"
        rm -rf "$deps/webgpu"; mkdir -p "$deps/webgpu"
        dpkg-deb -x "$tmp"/*.deb "$tmp/root"
        cp -r "$tmp/root/usr/include/webgpu" "$tmp/root/usr/include/dawn" "$deps/webgpu/"
        dpkg-deb -f "$tmp"/*.deb Version > "$deps/webgpu/version"
        rm -rf "$tmp"
    fi
    touch "$deps/.stamp-webgpu"
fi

# ---------------------------------------------------------------- DAWN=sid
# deps/dawn-sid/root: the packages unpacked; lib: the folder of libwebgpu_dawn.so.0 and of
# unstable's loader; versions: what was taken. A version the archive no longer serves
# leaves no deps/dawn-sid (the build then says so and uses the npm runtime).
if [ "$DAWN" = sid ] && [ ! -f "$deps/.stamp-dawn-sid" ]; then
    say "fetching $DAWN_SID_PKG $DAWN_SID_VERSION and what it needs from Debian unstable"
    o=$(private_apt sid "sid")
    tmp=$(mktemp -d); chmod 755 "$tmp"
    if ! (cd "$tmp" && apt-get $o -qq download "$DAWN_SID_PKG=$DAWN_SID_VERSION" >/dev/null 2>&1); then
        rm -rf "$tmp" "$deps/dawn-sid"
        say "warning: Debian unstable no longer serves $DAWN_SID_PKG $DAWN_SID_VERSION; update DAWN_SID_VERSION and"
        say "warning: DAWN_SID_SHA256 in scripts/bootstrap.sh to a version it serves. Building with the npm runtime."
    else
        deb=$(ls "$tmp"/*.deb)
        got=$(sha256sum "$deb" | cut -d' ' -f1)
        [ "$got" = "$DAWN_SID_SHA256" ] || die "checksum mismatch for $deb: $got"
        # Depends: "libabsl20260526 (>= ...), libc6 (>= 2.43), ..." -> the names
        need=$(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed 's/|.*//; s/(.*)//; s/ //g' | grep -v '^$')
        (cd "$tmp" && apt-get $o -qq download $need >/dev/null 2>&1) \
            || die "apt-get download from unstable failed for: $need"
        rm -rf "$deps/dawn-sid"; mkdir -p "$deps/dawn-sid"
        for d in "$tmp"/*.deb; do
            dpkg-deb -x "$d" "$deps/dawn-sid/root"
            echo "$(dpkg-deb -f "$d" Package) $(dpkg-deb -f "$d" Version) $(sha256sum "$d" | cut -d' ' -f1)"
        done > "$deps/dawn-sid/versions"
        rm -rf "$tmp"
        lib=$(dirname "$(find "$deps/dawn-sid/root" -name 'libwebgpu_dawn.so*' | head -n1)")
        [ -e "$lib/ld-linux-x86-64.so.2" ] || die "unstable's loader is not beside libwebgpu_dawn in $lib"
        echo "$lib" > "$deps/dawn-sid/lib"
        touch "$deps/.stamp-dawn-sid"
    fi
fi

# deps/dawn-sid/lvp_icd.json: unstable's lavapipe, unpacked into the same root (so the
# programs' RPATH finds its libraries, and unstable's Vulkan loader, before any other);
# deps/env-sid.sh names it for `make DAWN=sid`. Without it the runs use bookworm-backports'.
if [ "$DAWN" = sid ] && [ -f "$deps/.stamp-dawn-sid" ] && [ ! -f "$deps/.stamp-lavapipe-sid" ]; then
    say "fetching $MESA_SID_PKG $MESA_SID_VERSION (lavapipe) and what it needs from Debian unstable"
    o=$(private_apt sid "sid")
    tmp=$(mktemp -d); chmod 755 "$tmp"
    if ! (cd "$tmp" && apt-get $o -qq download "$MESA_SID_PKG=$MESA_SID_VERSION" >/dev/null 2>&1); then
        say "warning: Debian unstable no longer serves $MESA_SID_PKG $MESA_SID_VERSION; update MESA_SID_VERSION and"
        say "warning: MESA_SID_SHA256 in scripts/bootstrap.sh. DAWN=sid runs on bookworm-backports' lavapipe."
    else
        got=$(sha256sum "$tmp"/*.deb | cut -d' ' -f1)
        [ "$got" = "$MESA_SID_SHA256" ] || die "checksum mismatch for $MESA_SID_PKG: $got"
        need=$(apt-cache $o depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
               --no-replaces --no-enhances --no-pre-depends "$MESA_SID_PKG" 2>/dev/null \
               | grep -v '^[ <]' | grep -vx "$MESA_SID_PKG" | sort -u)
        [ -n "$need" ] || die "could not resolve what $MESA_SID_PKG needs in unstable"
        (cd "$tmp" && apt-get $o -qq download $need >/dev/null 2>&1) \
            || die "apt-get download from unstable failed for: $need"
        for d in "$tmp"/*.deb; do
            dpkg-deb -x "$d" "$deps/dawn-sid/root"
            echo "$(dpkg-deb -f "$d" Package) $(dpkg-deb -f "$d" Version) $(sha256sum "$d" | cut -d' ' -f1)"
        done | sort -u > "$deps/dawn-sid/versions-lavapipe"
        rm -rf "$tmp"
        lvp=$(find "$deps/dawn-sid/root" -name libvulkan_lvp.so | head -n1)
        [ -n "$lvp" ] || die "libvulkan_lvp.so missing from unstable's $MESA_SID_PKG"
        # libLLVM's RUNPATH is $ORIGIN/../lib (a RUNPATH hides the programs' RPATH): make that
        # folder the one it lies in, or its libraries (libxml2.so.16, ...) are sought on the host
        d=$(dirname "$lvp"); [ -e "$d/../lib" ] || ln -s "$(basename "$d")" "$d/../lib"
        cat > "$deps/dawn-sid/lvp_icd.json" <<JSON
{ "file_format_version": "1.0.0", "ICD": { "library_path": "$lvp", "api_version": "1.4.0" } }
JSON
        touch "$deps/.stamp-lavapipe-sid"
    fi
fi

# ---------------------------------------------------------------- lavapipe
if [ ! -f "$deps/.stamp-lavapipe" ]; then
    say "fetching Mesa's lavapipe from $LAVAPIPE_SUITE"
    o=$(private_apt backports "bookworm $LAVAPIPE_SUITE")
    # What installing the driver would bring onto this machine, unpacked privately instead.
    list=$(apt-get $o -s -qq --no-install-recommends install -t "$LAVAPIPE_SUITE" mesa-vulkan-drivers libvulkan1 \
           | awk '/^Inst / {print $2}')
    [ -n "$list" ] || die "could not resolve mesa-vulkan-drivers from $LAVAPIPE_SUITE"
    tmp=$(mktemp -d); chmod 755 "$tmp"
    (cd "$tmp" && apt-get $o -qq download -t "$LAVAPIPE_SUITE" $list >/dev/null 2>&1) \
        || die "apt-get download of the lavapipe packages failed"
    rm -rf "$deps/lavapipe"; mkdir -p "$deps/lavapipe"
    for d in "$tmp"/*.deb; do dpkg-deb -x "$d" "$deps/lavapipe/root"; done
    rm -rf "$tmp"
    lib=$(dirname "$(find "$deps/lavapipe/root" -name libvulkan_lvp.so | head -n1)")
    [ -n "$lib" ] || die "libvulkan_lvp.so missing from the unpacked packages"
    cat > "$deps/lavapipe/lvp_icd.json" <<JSON
{ "file_format_version": "1.0.0", "ICD": { "library_path": "$lib/libvulkan_lvp.so", "api_version": "1.3.0" } }
JSON
    echo "$lib" > "$deps/lavapipe/libdir"
    touch "$deps/.stamp-lavapipe"
fi

# ---------------------------------------------------------------- environment
lib=$(cat "$deps/lavapipe/libdir")
cat > "$deps/env.sh" <<ENV
# generated by scripts/bootstrap.sh: adds the private lavapipe driver to whatever Vulkan
# drivers this machine has (a real GPU, if any, stays visible and is preferred by wgml).
export LD_LIBRARY_PATH="$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export VK_ADD_DRIVER_FILES="$deps/lavapipe/lvp_icd.json"
ENV
if [ -f "$deps/.stamp-lavapipe-sid" ]; then
    cat > "$deps/env-sid.sh" <<ENV
# generated by scripts/bootstrap.sh for programs built with DAWN=sid: adds unstable's
# lavapipe (found through their RPATH, with unstable's Vulkan loader) to this machine's drivers.
export VK_ADD_DRIVER_FILES="$deps/dawn-sid/lvp_icd.json"
ENV
else
    cp "$deps/env.sh" "$deps/env-sid.sh"
fi
