# Sourced by bench/h200/h200_run.sh and h200_final.sh on the device machine: unpack node, Dawn's webgpu package
# and the Vulkan loader debs that bench/h200/h200_prep.sh put in .devcarry/gpu (carried), point Vulkan at NVIDIA's ICD.
D=${GPU_CARRY:-.devcarry/gpu}   # (GPU_CARRY=.devcarry/gpu_rest after a call that unpacked .devcarry/gpu_node/node.xz into /tmp/nb)
mkdir -p /tmp/nb node_modules
[ -x /tmp/nb/node ] || xz -T4 -dc $D/node.xz > /tmp/nb/node
chmod +x /tmp/nb/node
for f in $D/*.deb; do dpkg -x $f /; done; ldconfig
tar -C node_modules -xJf $D/webgpu.tar.xz
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
