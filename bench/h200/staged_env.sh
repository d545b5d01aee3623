# bench/h200/staged_env.sh — sourced (never run) by the device scripts in bench/h200 from the repository root, after
# `bash bench/h200/product_run.sh --stage` put node and Dawn for Node in $X (/tmp/exactspec): points this shell at
# them, once for every script, so that they all run the same node, Dawn and Vulkan driver. Also after the older
# staging, bench/h200/h200_setup.sh (node in /tmp/nb, Dawn unpacked into node_modules: the links below are kept).
#   source bench/h200/staged_env.sh [BACKEND]
#   - node: /tmp/nb/node (a link to $X/node/node unless a script put one there) first on PATH
#   - Dawn: node_modules/webgpu -> $X/node_modules/webgpu (where app/gpu and the tests import it)
#   - Vulkan: VK_DRIVER_FILES = NVIDIA's ICD where the device has one (and the caller set none)
#   - EXACTSPEC_DAWN_BACKEND = BACKEND, else its value, else vulkan (the backend Dawn takes in the tests and benches)
# Checks nothing was left unstaged: a missing node or Dawn is the staging call's to report (product_run.sh names the
# call to repeat).
X=${X:-/tmp/exactspec}
mkdir -p /tmp/nb node_modules
[ -e /tmp/nb/node ] || ln -sf $X/node/node /tmp/nb/node
[ -e node_modules/webgpu ] || ln -s $X/node_modules/webgpu node_modules/webgpu
if [ -e /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
  export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
fi
export PATH=/tmp/nb:$PATH EXACTSPEC_DAWN_BACKEND=${1:-${EXACTSPEC_DAWN_BACKEND:-vulkan}}
