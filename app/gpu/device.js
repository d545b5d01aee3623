// device.js — adapter/device acquisition from a GPU object (navigator.gpu in a page, Dawn's `create()` in Node).
// Never touches `navigator`: the caller passes the GPU object.

/** Ask for the adapter's maximum limits we rely on (the default storage binding is only 128 MiB). */
export async function openDevice(gpu, opts = {}) {
  if (!gpu || typeof gpu.requestAdapter !== 'function') {
    throw new Error('no WebGPU: the GPU object passed to createEngine has no requestAdapter()');
  }
  const adapter = await gpu.requestAdapter(opts.adapterOptions ?? { powerPreference: 'high-performance' });
  if (!adapter) throw new Error('no WebGPU adapter available');
  const want = ['maxStorageBufferBindingSize', 'maxBufferSize', 'maxStorageBuffersPerShaderStage',
    'maxComputeWorkgroupStorageSize', 'maxComputeInvocationsPerWorkgroup', 'maxComputeWorkgroupSizeX',
    'maxComputeWorkgroupsPerDimension', 'maxUniformBufferBindingSize', 'maxDynamicUniformBuffersPerPipelineLayout'];
  const requiredLimits = {};
  for (const k of want) if (adapter.limits[k] !== undefined) requiredLimits[k] = adapter.limits[k];
  const requiredFeatures = [];
  if (opts.timestamps && adapter.features.has('timestamp-query')) requiredFeatures.push('timestamp-query');
  if (opts.subgroups !== false && adapter.features.has('subgroups')) requiredFeatures.push('subgroups');
  const device = await adapter.requestDevice({ requiredLimits, requiredFeatures });
  let info = adapter.info ?? {};
  const adapterInfo = {
    vendor: info.vendor ?? '', architecture: info.architecture ?? '', device: info.device ?? '',
    description: info.description ?? '', isFallbackAdapter: !!(adapter.isFallbackAdapter ?? info.isFallbackAdapter),
    features: [...adapter.features], maxStorageBufferBindingSize: device.limits.maxStorageBufferBindingSize,
    subgroupMinSize: info.subgroupMinSize ?? 0, subgroupMaxSize: info.subgroupMaxSize ?? 0,
  };
  const state = { lost: null, error: null };
  const lostPromise = device.lost.then((i) => {
    state.lost = `${i.reason ?? 'unknown'}: ${i.message ?? ''}`;
    return state.lost;
  });
  device.onuncapturederror = (ev) => {
    if (!state.error) state.error = String(ev.error?.message ?? ev.error ?? ev);
  };
  return { adapter, device, adapterInfo, state, lostPromise };
}
