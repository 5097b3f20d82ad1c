// node example.mjs PACKAGE PHOTO: embed one photo with a release package (docs/transformers-js.md).
import { AutoImageProcessor, RawImage, env } from '@huggingface/transformers';
import * as ort from 'onnxruntime-node';
import { basename, dirname, join } from 'node:path';

const [pkg, photo] = process.argv.slice(2);
env.allowRemoteModels = false;        // the package is a local folder: nothing is downloaded
env.localModelPath = dirname(pkg);
const processor = await AutoImageProcessor.from_pretrained(basename(pkg));
const session = await ort.InferenceSession.create(join(pkg, 'onnx', 'vision_encoder_int8.onnx'));
const { pixel_values, image_grid_thw } = await processor(await RawImage.read(photo));
const { image_features } = await session.run({
  pixel_values: new ort.Tensor('float32', pixel_values.data, pixel_values.dims),
  grid_thw: new ort.Tensor('int64', image_grid_thw.data, image_grid_thw.dims),
});
console.log(image_grid_thw.tolist().map((row) => row.map(Number)), image_features.dims);
