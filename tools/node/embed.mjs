// Embed photos with a release package the way a transformers.js user does: the library's own image processor
// (AutoImageProcessor.from_pretrained on the package folder, nothing remote) and the vision encoder through the
// onnxruntime-node that transformers.js installs (its model classes load the vision encoder only together with
// the decoder files, which a vision package does not have).
//
//   node embed.mjs PACKAGE ENCODER OUT CALL [CALL ...]
//
// ENCODER: a file of PACKAGE/onnx (vision_encoder.onnx, vision_encoder_int8.onnx, ...). Each CALL is one encoder
// run: image paths joined by ",". The processor takes one image at a time (given several, it stacks them as the
// frames of one video), so a call of several images concatenates their pixel_values and grids, as the Python
// runtime packs them. Writes OUT/call_K.pixel_values.bin and OUT/call_K.OUTPUT.bin (raw little-endian float32)
// and prints JSON: [{images, grid_thw, pixel_values: shape, outputs: {name: shape}}].
// ORT_DEVICE=webgpu runs the encoder on onnxruntime-node's WebGPU EP (built into its Linux x64 binding), as
// transformers.js does for `device: 'webgpu'` in Node; default: its CPU EP.
import { AutoImageProcessor, RawImage, env } from '@huggingface/transformers';
import * as ort from 'onnxruntime-node';
import { writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';

const [packageDir, encoder, out, ...calls] = process.argv.slice(2);
env.allowRemoteModels = false;
env.localModelPath = dirname(packageDir);
const processor = await AutoImageProcessor.from_pretrained(basename(packageDir));
const device = process.env.ORT_DEVICE || 'cpu';
const session = await ort.InferenceSession.create(join(packageDir, 'onnx', encoder), { executionProviders: [device] });
const results = [];
for (const [k, call] of calls.entries()) {
  const images = call.split(',');
  const pixels = [], grids = [];
  for (const path of images) {
    const { pixel_values, image_grid_thw } = await processor(await RawImage.read(path));
    pixels.push(pixel_values);
    grids.push(...image_grid_thw.tolist().map((row) => row.map(Number)));
  }
  const rows = pixels.reduce((n, p) => n + p.dims[0], 0), width = pixels[0].dims[1];
  const data = new Float32Array(rows * width);
  let offset = 0;
  for (const p of pixels) { data.set(p.data, offset); offset += p.data.length; }
  const feeds = {
    pixel_values: new ort.Tensor('float32', data, [rows, width]),
    grid_thw: new ort.Tensor('int64', BigInt64Array.from(grids.flat().map(BigInt)), [grids.length, 3]),
  };
  const outputs = await session.run(feeds);
  writeFileSync(join(out, `call_${k}.pixel_values.bin`), Buffer.from(data.buffer));
  const shapes = {};
  for (const [name, tensor] of Object.entries(outputs)) {
    writeFileSync(join(out, `call_${k}.${name}.bin`), Buffer.from(tensor.data.buffer, tensor.data.byteOffset, tensor.data.byteLength));
    shapes[name] = tensor.dims;
  }
  results.push({ images, grid_thw: grids, pixel_values: [rows, width], outputs: shapes });
}
console.log(JSON.stringify(results));
