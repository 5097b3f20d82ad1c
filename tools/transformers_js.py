"""transformers.js on a release package, against Python: the drivers the tests and `python -m bench.transformers_js`
share.

A transformers.js user embeds a photo with the library's own image processor (`AutoImageProcessor` on the
package folder) and the package's `onnx/vision_encoder*.onnx`, run by the onnxruntime-node that transformers.js
installs (`tools/node/embed.mjs`; the library's model classes load the vision encoder only together with decoder
files, which a vision package does not have). The same files go through `python -m runtime embed` (transformers'
Python processor, onnxruntime). Per photo and variant: grids, the pixel_values difference (the libraries resize
differently), and the features' min per-token cosine and max abs difference, every output.

The Node side is installed from `tools/node/package-lock.json` (transformers.js 4.3.1) with
`npm ci --ignore-scripts`: onnxruntime-node's post-install step downloads from a host outside the package
registry, and its CPU binary ships inside the package anyway.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

from vlm_vision_onnx.core import parity
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.core.progress import say

NODE_DIR = Path(__file__).resolve().parent / "node"
NODE_FILES = ("package.json", "package-lock.json", "embed.mjs", "example.mjs")
#: The photos of `runtime.sample_photos` (several sizes, one grayscale) plus astronaut at 300 x 220 (grid 1x14x20).
EXTRA = {"astronaut_300x220": ("astronaut", (300, 220))}


def node_missing() -> str | None:
    """Why the Node side cannot run here (None when node and npm are on PATH)."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    return f"{' and '.join(missing)} not on PATH (Node 20 with npm runs transformers.js)" if missing else None


def install(folder: Path) -> Path:
    """`npm ci --ignore-scripts` of tools/node into `folder` (pinned by its lockfile); returns `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in NODE_FILES:
        shutil.copyfile(NODE_DIR / name, folder / name)
    done = subprocess.run(["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund"], cwd=folder,
                          capture_output=True, text=True, check=False)
    if done.returncode:
        raise UsageError(f"npm ci in {folder} failed: {(done.stderr or done.stdout).strip().splitlines()[-1]}")
    return folder


def write_photos(folder: Path) -> dict[str, Path]:
    """{name: PNG} of the sample photos and EXTRA, written to `folder`."""
    from vlm_vision_onnx.runtime import sample_photos

    sample_photos.write(folder / "photos")
    found = {p.stem: p for p in sorted((folder / "photos").glob("*.png"))}
    for name, (source, size) in EXTRA.items():
        path = folder / f"{name}.png"
        Image.open(found[source]).convert("RGB").resize(size, Image.BICUBIC).save(path)
        found[name] = path
    return found


def run_node(node: Path, package: Path, encoder: str, calls: list[list[Path]], out: Path,
             webgpu: Path | None = None) -> list[dict]:
    """embed.mjs on `calls` (lists of images, one encoder run each); records with the arrays read back. `webgpu`:
    a WebGPU install (`make webgpu`): the encoder runs on onnxruntime-node's WebGPU EP under its env.sh."""
    out.mkdir(parents=True, exist_ok=True)
    command = ["node", str(node / "embed.mjs"), str(package.resolve()), encoder, str(out),
               *[",".join(str(p.resolve()) for p in call) for call in calls]]
    env = None
    if webgpu is not None:
        from vlm_vision_onnx.runtime.webgpu import in_env

        command, env = in_env(webgpu, command), {**os.environ, "ORT_DEVICE": "webgpu"}
    done = subprocess.run(command, cwd=node, capture_output=True, text=True, check=False, env=env)
    if done.returncode:
        raise UsageError(f"transformers.js run failed: {done.stderr.strip().splitlines()[-1] if done.stderr else done.returncode}")
    records = json.loads(done.stdout.strip().splitlines()[-1])
    for k, record in enumerate(records):
        record["pixels"] = np.fromfile(out / f"call_{k}.pixel_values.bin", np.float32).reshape(record["pixel_values"])
        record["arrays"] = {name: np.fromfile(out / f"call_{k}.{name}.bin", np.float32).reshape(shape)
                            for name, shape in record["outputs"].items()}
    return records


def run_python(package: Path, variant: str, call: list[Path], out: Path) -> dict:
    """`python -m runtime embed` of one call's images: {grid_thw: [[t, h, w]...], outputs: {name: rows of all
    entries, in call order}} and the processor's pixel_values (transformers' Python processor)."""
    from vlm_vision_onnx.runtime import __main__ as runtime_cli

    npz = out / "python.npz"
    code = runtime_cli.main(["embed", *map(str, call), "--package", str(package), "--variant", variant,
                             "--out", str(npz), "--force", "--threads", "1", "--engine", "onnxruntime"])
    if code:
        raise UsageError(f"python -m runtime embed exited {code}")
    with np.load(npz) as data:
        entries = list(data["entries"])
        names = sorted({k.split(".", 1)[1] for k in data.files if "." in k and k.split(".", 1)[1] != "grid_thw"
                        and k.split(".", 1)[0] in entries and not k.endswith((".path", ".source"))
                        and data[k].dtype == np.float32 and data[k].ndim == 2})
        grids = [data[f"{e}.grid_thw"].reshape(-1).tolist() for e in entries]
        outputs = {n: np.concatenate([data[f"{e}.{n}"] for e in entries]) for n in names}
    return {"grid_thw": grids, "outputs": outputs, "pixels": python_pixels(package, call)}


def python_pixels(package: Path, call: list[Path]) -> np.ndarray:
    """pixel_values of transformers' Python processor for the call's images, one at a time, concatenated."""
    from transformers import AutoImageProcessor

    processor = AutoImageProcessor.from_pretrained(str(package))
    return np.concatenate([processor(images=[Image.open(p)], return_tensors="np")["pixel_values"] for p in call])


def compare(package: Path, variants: dict[str, str], calls: dict[str, list[Path]], work: Path,
            node: Path, webgpu: Path | None = None) -> list[dict]:
    """One record per (variant, call): grids of both, pixel and feature differences. `variants`: {variant:
    encoder file in PACKAGE/onnx}; `webgpu`: transformers.js's side on WebGPU (`run_node`)."""
    records = []
    for variant, encoder in variants.items():
        say(f"transformers.js: {variant} ({encoder}) on {len(calls)} call(s){' on WebGPU' if webgpu else ''}")
        node_runs = run_node(node, package, encoder, list(calls.values()), work / f"node-{variant}", webgpu)
        for (label, call), js in zip(calls.items(), node_runs):
            py = run_python(package, variant, call, work)
            same_grid = js["grid_thw"] == py["grid_thw"]
            record = {"variant": variant, "call": label, "images": [p.name for p in call], "grid_thw": js["grid_thw"],
                      "python_grid_thw": py["grid_thw"], "same_grid": same_grid}
            if same_grid:
                pixels = np.abs(js["pixels"] - py["pixels"])
                record["pixel_max_abs"], record["pixel_mean_abs"] = float(pixels.max()), float(pixels.mean())
                record["outputs"] = {name: {"min_token_cosine": parity.min_token_cosine(js["arrays"][name], ref),
                                            "max_abs": float(np.abs(js["arrays"][name] - ref).max())}
                                     for name, ref in py["outputs"].items()}
                record["min_token_cosine"] = min(o["min_token_cosine"] for o in record["outputs"].values())
            records.append(record)
    return records


def default_calls(photos: dict[str, Path]) -> dict[str, list[Path]]:
    """Every photo alone, and one two-image call of two sizes."""
    calls = {name: [path] for name, path in photos.items()}
    calls["astronaut_300x220 + chelsea"] = [photos["astronaut_300x220"], photos["chelsea"]]
    return calls


# --- transformers.js in a real browser (headless Chromium, WebGPU on SwiftShader): tools/browser/ -------------------

BROWSER_DIR = Path(__file__).resolve().parent / "browser"
BROWSER_FILES = ("index.html", "embed-page.mjs")
CHROMIUM = Path("/usr/bin/chromium")
#: Debian's chromium, headless as root, on a machine whose network reaches only package registries. WebGPU needs
#: only --enable-unsafe-webgpu (without it requestAdapter() returns null) and takes SwiftShader (Vulkan on the CPU);
#: the background-networking flags keep Chromium from dialling Google hosts the closed network refuses.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu-sandbox", "--enable-unsafe-webgpu", "--disable-quic",
                  "--no-first-run", "--no-default-browser-check", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-default-apps", "--disable-extensions",
                  "--mute-audio")


def chromium_missing() -> str | None:
    """Why the browser side cannot run here (None when Debian's chromium is installed)."""
    if not CHROMIUM.exists():
        return f"{CHROMIUM} not found (apt-get install -y chromium runs transformers.js on WebGPU in a browser)"
    return None


def _browser_server(routes: dict[str, Path], received: dict, done):
    """A threaded HTTP server on 127.0.0.1 (ephemeral port): GET maps URL prefixes of `routes` to files (the
    longest prefix wins; "/" is the node folder); the first POST /result stores its body in received["body"] and
    sets `done` (a threading.Event)."""
    import http.server
    import urllib.parse
    from typing import ClassVar

    class Handler(http.server.SimpleHTTPRequestHandler):
        extensions_map: ClassVar[dict[str, str]] = {**http.server.SimpleHTTPRequestHandler.extensions_map, ".mjs": "text/javascript",
                          ".js": "text/javascript", ".wasm": "application/wasm", ".onnx": "application/octet-stream",
                          ".json": "application/json"}

        def translate_path(self, path: str) -> str:
            path = urllib.parse.unquote(urllib.parse.urlsplit(path).path)
            for prefix in sorted(routes, key=len, reverse=True):
                if prefix == "/" or path == prefix or path.startswith(prefix + "/"):
                    root = routes[prefix].resolve()
                    target = (root / path[len(prefix):].lstrip("/")).resolve()
                    if target == root or root in target.parents:
                        return str(target)
                    break
            return str(routes["/"] / "-not-served-")

        def end_headers(self):
            # Cross-origin isolation lets onnxruntime-web use wasm threads; nothing is cached between runs.
            self.send_header("Cross-Origin-Opener-Policy", "same-origin")
            self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
            self.send_header("Cache-Control", "no-store")
            super().end_headers()

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if urllib.parse.urlsplit(self.path).path == "/result" and "body" not in received:
                received["body"] = body
                done.set()
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    return http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)


def run_browser(node: Path, package: Path, encoder: str, photo: Path, timeout: float = 600) -> dict:
    """tools/browser/index.html in headless Chromium: transformers.js's processor on `photo` and the package's
    onnx/`encoder` on onnxruntime-web's WebGPU EP, everything served from 127.0.0.1 (`node`: an `install` folder;
    the page files are copied into it). Returns {grid_thw, outputs: {name: array}, pixels, adapter: {vendor,
    architecture, description, features, shader_f16, ...}, ep, placements, timings_ms}; UsageError with the page's
    error line (or Chromium's last lines) when it fails."""
    import base64
    import signal
    import threading
    import time

    if (why := chromium_missing()):
        raise UsageError(why)
    page = node / "browser"
    page.mkdir(exist_ok=True)
    for name in BROWSER_FILES:
        shutil.copyfile(BROWSER_DIR / name, page / name)
    received: dict = {}
    done = threading.Event()
    server = _browser_server({"/": node.resolve(), f"/package/{package.name}": package.resolve(),
                              f"/photo/{photo.name}": photo.resolve()}, received, done)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = (f"http://127.0.0.1:{server.server_address[1]}/browser/index.html?package=/package/{package.name}"
           f"&encoder={encoder}&photo=/photo/{photo.name}")
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        log = Path(profile) / "chromium.log"
        with open(log, "w") as out:
            browser = subprocess.Popen([str(CHROMIUM), *CHROMIUM_FLAGS, f"--user-data-dir={profile}/profile", url],
                                       stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                       env={**os.environ, "TMPDIR": profile})  # its singleton socket goes here too
        try:
            deadline = time.monotonic() + timeout
            while not done.wait(0.5):
                if browser.poll() is not None or time.monotonic() > deadline:
                    tail = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-3:]
                    what = f"exited {browser.returncode}" if browser.returncode is not None else f"timed out after {timeout:.0f} s"
                    raise UsageError(f"chromium {what} before the page posted a result: {' | '.join(tail)}")
        finally:
            if browser.poll() is None:
                browser.terminate()  # the browser shuts its gpu and renderer processes down itself
                try:
                    browser.wait(10)
                except subprocess.TimeoutExpired:
                    pass
            try:  # whatever is left of the process group started here (its own session)
                os.killpg(browser.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            browser.wait()
            server.shutdown()
            server.server_close()
    result = json.loads(received["body"])
    if "error" in result:
        raise UsageError(f"browser page failed: {result['error']}")

    def array(entry: dict) -> np.ndarray:
        return np.frombuffer(base64.b64decode(entry["data"]), "<f4").reshape(entry["dims"]).copy()

    return {"grid_thw": result["grid_thw"], "outputs": {n: array(o) for n, o in result["outputs"].items()},
            "pixels": array(result["pixel_values"]), "adapter": result["adapter"], "ep": result["ep"],
            "placements": result["placements"], "timings_ms": result["timings_ms"],
            "transformers_js": result.get("transformers_js")}


#: The attention canary: one com.microsoft.MultiHeadAttention of CANARY_HEADS heads on [1, CANARY_ROWS, 64] query,
#: key and value sliced from the photo's pixel_values (ONNX IR 8: onnxruntime-web reads IR 13 at most).
CANARY_ROWS, CANARY_HEADS = 64, 4


def attention_model(rows: int = CANARY_ROWS, heads: int = CANARY_HEADS):
    """pixel_values [N, 1536] (N >= rows), grid_thw [I, 3] (unused) -> attended [1, rows, 64]: q, k, v are
    columns 0-63, 64-127 and 128-191 of pixel_values' first `rows` rows."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h

    def const(name, values):
        return h.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(np.array(values, np.int64)))

    nodes = [const("rows", [0, rows]), const("shape", [1, rows, 64]), const("axes", [0, 1])]
    for i, x in enumerate("qkv"):
        nodes += [const(f"{x}_start", [0, 64 * i]), const(f"{x}_end", [rows, 64 * (i + 1)]),
                  h.make_node("Slice", ["pixel_values", f"{x}_start", f"{x}_end", "axes"], [f"{x}_rows"]),
                  h.make_node("Reshape", [f"{x}_rows", "shape"], [x])]
    nodes.append(h.make_node("MultiHeadAttention", ["q", "k", "v"], ["attended"], domain="com.microsoft",
                             num_heads=heads))
    graph = h.make_graph(nodes, "attention_canary",
                         [h.make_tensor_value_info("pixel_values", T.FLOAT, ["N", 1536]),
                          h.make_tensor_value_info("grid_thw", T.INT64, ["I", 3])],
                         [h.make_tensor_value_info("attended", T.FLOAT, [1, rows, 64])])
    return h.make_model(graph, ir_version=8, opset_imports=[h.make_opsetid("", 18), h.make_opsetid("com.microsoft", 1)])


def chromium_version() -> str:
    """`chromium --version`'s last line ("Chromium 150.0.7871.100 built on Debian ...")."""
    done = subprocess.run([str(CHROMIUM), "--version"], capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return lines[-1].strip() if lines else f"unknown ({CHROMIUM} --version printed nothing)"


def attention_canary(node: Path, package: Path, photo: Path, work: Path) -> dict:
    """Whether this browser's WebGPU runs onnxruntime-web's MultiHeadAttention right: `attention_model` in the page
    (a copy of `package`'s configs under `work`, the photo's pixel_values as input) against ONNX Runtime's CPU EP.
    Returns {chromium, rows, heads, max_abs, ratio (median browser / CPU), ok (max_abs <= 1e-4)}."""
    import onnx
    import onnxruntime as ort

    folder = work / package.name
    (folder / "onnx").mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "preprocessor_config.json"):
        shutil.copyfile(package / name, folder / name)
    onnx.save(attention_model(), folder / "onnx" / "attention.onnx")
    browser = run_browser(node, folder, "attention.onnx", photo)
    session = ort.InferenceSession(str(folder / "onnx" / "attention.onnx"), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"pixel_values": browser["pixels"],
                                  "grid_thw": np.array(browser["grid_thw"], np.int64)})[0]
    got = browser["outputs"]["attended"]
    max_abs = float(np.abs(got - expected).max())
    return {"chromium": chromium_version(), "rows": CANARY_ROWS, "heads": CANARY_HEADS, "max_abs": max_abs,
            "ratio": float(np.median(got / expected)), "ok": max_abs <= 1e-4}

