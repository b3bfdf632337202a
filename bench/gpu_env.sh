# Sourced by the scripts that run on the GPU machine (device_run.sh, e2e_compare.sh, ab.sh):
# the packages carried in .gl/ (the Vulkan loader and the build's libraries, which the
# machine lacks) unpacked onto it, and NVIDIA's driver named to the loader where it is
# installed. Repeating it is harmless.
for f in .gl/*.deb; do [ -f "$f" ] && dpkg -x "$f" /; done
ldconfig 2>/dev/null
if [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
