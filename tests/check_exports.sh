#!/bin/sh
# The shared library exports the public wgml_ API and nothing else.
lib=$1
syms=$(nm -D --defined-only "$lib" | awk '{print $3}')
echo "$syms" | grep -q '^wgml_add$' || { echo "wgml_add is not exported from $lib"; exit 1; }
others=$(echo "$syms" | grep -v '^wgml_' || true)
[ -z "$others" ] || { echo "exported symbols outside the API:"; echo "$others"; exit 1; }
echo "$(echo "$syms" | wc -l) symbols exported, all wgml_"
echo "1 passed, 0 failed"
