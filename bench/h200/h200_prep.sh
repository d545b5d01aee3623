#!/bin/bash
# Prepare .devcarry/gpu/ (git-ignored) for the H200 bench: node (xz), npm webgpu's Dawn (index.js, package.json,
# dist/linux-x64/dawn.node as tar.xz) and Debian's Vulkan loader + glvnd debs (the NVIDIA ICD needs them).
# Run here (it needs apt-get download from Debian); then on the device: bash bench/h200/h200_run.sh, with
# .devcarry/gpu carried (about 29 MB).
set -e
cd "$(dirname "$0")/../.."
D=.devcarry/gpu
mkdir -p $D
[ -f $D/node.xz ] || xz -T2 -6 -c "$(command -v node)" > $D/node.xz
[ -f $D/webgpu.tar.xz ] || tar -C node_modules -cJf $D/webgpu.tar.xz webgpu/index.js webgpu/package.json webgpu/dist/linux-x64/dawn.node
(cd $D && apt-get download libvulkan1 libglvnd0 libglx0 libgl1 libegl1 libopengl0 libgles2)
ls -la $D
