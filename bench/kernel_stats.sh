#!/usr/bin/env bash
# Runs a command under bench/vk_stats_layer.c: every compute pipeline the command creates
# is reported on stderr with the driver's statistics (registers, shared memory, ... as the
# driver names them), one "vkstats:" line per pipeline, in creation order.
#   bash bench/kernel_stats.sh build/wgml bench --group train-ops --filter D64 --samples 1
# The layer is built with cc when the Vulkan headers are installed (Debian: libvulkan-dev);
# WGML_VK_STATS_SO names a prebuilt one instead. WGML_VK_STATS_DIR=<dir> also writes the
# driver's internal representations of each pipeline there, where it offers any, and each
# pipeline's own pipeline-cache data, from which bench/sass_dump.py disassembles NVIDIA's
# machine code (bench/notes/registers.md). With WGML_LOG_KERNELS=1 in the
# environment each "vkstats:" line names its kernel (the library's "wgml: kernel" line comes
# just before Dawn creates that pipeline) instead of Dawn's "dawn_entry_point".
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
so=${WGML_VK_STATS_SO:-}
if [ -z "$so" ]; then
    if ! printf '#include <vulkan/vk_layer.h>\n' | cc -E -x c - >/dev/null 2>&1; then
        echo "kernel_stats.sh: the Vulkan headers are missing (Debian: apt-get install libvulkan-dev)," \
             "or set WGML_VK_STATS_SO to a layer built elsewhere" >&2
        exit 1
    fi
    so="$work/libwgml_vk_stats.so"
    cc -O2 -Wall -Wextra -Werror -shared -fPIC -o "$so" "$here/vk_stats_layer.c"
fi
so=$(cd "$(dirname "$so")" && pwd)/$(basename "$so")
cat >"$work/wgml_vk_stats.json" <<JSON
{ "file_format_version": "1.1.2",
  "layer": { "name": "VK_LAYER_WGML_kernel_stats", "type": "GLOBAL", "library_path": "$so",
             "api_version": "1.3.0", "implementation_version": "1",
             "description": "wgml: compute pipeline statistics" } }
JSON
if [ "${WGML_LOG_KERNELS:-0}" != 1 ]; then
    VK_LAYER_PATH="$work" VK_INSTANCE_LAYERS=VK_LAYER_WGML_kernel_stats "$@"
    exit
fi
# the command's stderr through the renaming, its stdout as it is
{ VK_LAYER_PATH="$work" VK_INSTANCE_LAYERS=VK_LAYER_WGML_kernel_stats "$@" 2>&1 1>&3 3>&- |
    awk '/^wgml: kernel / { k = substr($0, 14) }
         /^vkstats: [0-9]+ dawn_entry_point / { if (k != "") sub(/dawn_entry_point/, k); k = "" }
         { print; fflush() }' >&2; } 3>&1
