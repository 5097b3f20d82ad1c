// The work of index.html: embed one photo with a release package in the browser, on WebGPU, and POST the result.
//
// Query: package=URL path of the package folder (/package/NAME), encoder=a file of its onnx/ (vision_encoder.onnx),
// photo=URL of the image, result=where to POST (default /result).
// Preprocessing is transformers.js's own (AutoImageProcessor.from_pretrained on the package folder, RawImage);
// the encoder runs on the onnxruntime-web that transformers.js imports (its WebGPU bundle), with
// executionProviders ['webgpu'] and no fallback: transformers.js's model classes load the vision encoder only
// together with decoder files, which a vision package does not have (as tools/node/embed.mjs).
// POSTs JSON {grid_thw, pixel_values: {dims, data}, outputs: {name: {dims, type, data}}, adapter, ep, placements,
// timings_ms} (data: little-endian float32 as base64), or {error, logs} on any failure.
window.embedPageStarted = true;
const params = new URLSearchParams(location.search);
const resultUrl = params.get('result') || '/result';
const logs = [];
for (const level of ['log', 'info', 'warn', 'error', 'debug']) {
  const original = console[level].bind(console);
  console[level] = (...args) => {
    logs.push(`${level}: ${args.map(String).join(' ')}`);
    original(...args);
  };
}

let posted = false;
async function post(body) {
  if (posted) return;
  posted = true;
  document.getElementById('status').textContent = body.error ? `error: ${body.error}` : 'done';
  await fetch(resultUrl, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
}
const fail = (error) => post({ error: String(error?.message ?? error), logs: logs.slice(-40) });
window.addEventListener('error', (event) => fail(event.error ?? event.message));
window.addEventListener('unhandledrejection', (event) => fail(event.reason));

function base64(typed) {
  const bytes = new Uint8Array(typed.buffer, typed.byteOffset, typed.byteLength);
  let text = '';
  for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(text);
}

// {EP: {op type: node count}} from the verbose session log's "Node(s) placed on [EP]" blocks (one line per node,
// "OpType (node name)"; Loop bodies are sessions of their own and add their own blocks).
function nodePlacements(lines) {
  const found = {};
  let ep = null;
  for (const line of lines) {
    const header = line.match(/Node\(s\) placed on \[(\w+)\]/);
    if (header) { ep = header[1]; found[ep] ??= {}; continue; }
    const node = line.match(/VerifyEachNodeIsAssignedToAnEp\] {3}(\w+) \(/);
    if (node && ep) found[ep][node[1]] = (found[ep][node[1]] ?? 0) + 1;
    else if (!/VerifyEachNodeIsAssignedToAnEp/.test(line)) ep = null;
  }
  return found;
}

async function adapterInfo() {
  if (!navigator.gpu) throw new Error('navigator.gpu is undefined: this browser has no WebGPU (Chromium needs --enable-unsafe-webgpu here)');
  const adapter = await navigator.gpu.requestAdapter({ powerPreference: 'high-performance' });
  if (!adapter) throw new Error('navigator.gpu.requestAdapter() returned null: no WebGPU adapter');
  const info = adapter.info ?? {};
  return {
    vendor: info.vendor, architecture: info.architecture, device: info.device, description: info.description,
    subgroup_min_size: info.subgroupMinSize, subgroup_max_size: info.subgroupMaxSize,
    is_fallback_adapter: info.isFallbackAdapter ?? adapter.isFallbackAdapter ?? null,
    features: [...adapter.features].sort(),
    shader_f16: adapter.features.has('shader-f16'),
  };
}

async function main() {
  const pkg = params.get('package'), encoder = params.get('encoder') || 'vision_encoder.onnx', photo = params.get('photo');
  if (!pkg || !photo) throw new Error('index.html needs ?package=/URL/PATH/NAME&photo=/URL/OF/IMAGE[&encoder=FILE]');
  const adapter = await adapterInfo();
  const timings_ms = {};
  let t = performance.now();

  // onnxruntime-web first, so its .wasm is the local one: transformers.js points wasmPaths at a CDN unless set.
  const ort = await import('onnxruntime-web/webgpu');
  ort.env.wasm.wasmPaths = { wasm: new URL('/node_modules/onnxruntime-web/dist/ort-wasm-simd-threaded.asyncify.wasm', location.href).href };
  const { AutoImageProcessor, RawImage, env } = await import('@huggingface/transformers');
  env.allowRemoteModels = false;  // the package is served from this origin: nothing is downloaded from the hub
  env.allowLocalModels = true;
  env.useBrowserCache = false;
  const slash = pkg.replace(/\/+$/, '').lastIndexOf('/');
  env.localModelPath = pkg.slice(0, slash + 1);
  const processor = await AutoImageProcessor.from_pretrained(pkg.replace(/\/+$/, '').slice(slash + 1));
  const { pixel_values, image_grid_thw } = await processor(await RawImage.read(new URL(photo, location.href).href));
  const grid_thw = image_grid_thw.tolist().map((row) => row.map(Number));
  timings_ms.imports_and_processor = performance.now() - t;

  t = performance.now();
  const session = await ort.InferenceSession.create(new URL(`${pkg.replace(/\/+$/, '')}/onnx/${encoder}`, location.href).href, {
    executionProviders: ['webgpu'],  // only WebGPU: no silent fallback to the wasm EP
    logSeverityLevel: 0,  // verbose: the session log names the EP of every node ("Node placements")
    logVerbosityLevel: 0,
  });
  timings_ms.session_create = performance.now() - t;
  const placements = nodePlacements(logs);

  t = performance.now();
  const outputs = await session.run({
    pixel_values: new ort.Tensor('float32', pixel_values.data, pixel_values.dims),
    grid_thw: new ort.Tensor('int64', BigInt64Array.from(grid_thw.flat().map(BigInt)), [grid_thw.length, 3]),
  });
  timings_ms.run = performance.now() - t;
  const found = {};
  for (const [name, tensor] of Object.entries(outputs)) {
    found[name] = { dims: tensor.dims, type: tensor.type, location: tensor.location, data: base64(tensor.data) };
  }
  const device = ort.env.webgpu?.device;  // set once onnxruntime-web's WebGPU backend has initialised
  await post({
    grid_thw, outputs: found, adapter, timings_ms, placements,
    pixel_values: { dims: pixel_values.dims, data: base64(pixel_values.data) },
    ep: { requested: ['webgpu'], webgpu_device: Boolean(await device), ort_version: ort.env.versions?.web },
    transformers_js: env.version,
  });
}

main().catch(fail);
