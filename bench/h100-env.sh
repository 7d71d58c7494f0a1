# Sourced by the bench/*-h100.sh scripts on the device machine (run with
# `carry: [".gl", ".devbin"]`): the GL libraries NVIDIA's Vulkan driver
# needs (.gl), wgpu on that driver, Mesa's XDG_RUNTIME_DIR, and the binary
# built here (.devbin/tg.xz, where there is one) as /tmp/tg.
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json WGPU_BACKEND=vulkan XDG_RUNTIME_DIR=/tmp/xdg
mkdir -p /tmp/xdg && chmod 700 /tmp/xdg
if [ -f .devbin/tg.xz ]; then xz -dc .devbin/tg.xz > /tmp/tg && chmod +x /tmp/tg; fi
