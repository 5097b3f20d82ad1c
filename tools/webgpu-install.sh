#!/usr/bin/env bash
# Install a software WebGPU stack into DEST, for running ONNX Runtime's WebGPU EP on a
# machine without a GPU (Debian 12 bookworm, x86_64):
#   DEST/mesa    Mesa 25 lavapipe (Vulkan on the CPU) from bookworm-backports, unpacked with
#                `dpkg -x` (the system's Mesa and apt configuration are not touched), plus the
#                Vulkan loader and vulkaninfo when the system lacks them;
#                DEST/mesa/lvp_icd.x86_64.json is the ICD file that names it.
#   DEST/venv    Python venv with onnxruntime-webgpu and numpy.
#   (transformers.js and onnxruntime-node, whose Linux x64 binding has the WebGPU EP, come from tools/node's
#   lockfile: tests/test_webgpu.py and tools/transformers_js.py install them.)
#   DEST/env.sh  `source` it to select lavapipe (VK_ICD_FILENAMES, LD_LIBRARY_PATH), keep
#                compiled shaders in DEST/shader-cache (cold compiles take minutes), and set
#                LP_NATIVE_VECTOR_WIDTH=64 (see there).
# Idempotent: a second run downloads nothing. Usage: tools/webgpu-install.sh DEST
set -euo pipefail

die() { echo "webgpu-install: error: $*" >&2; exit 1; }
step() { echo "webgpu-install: $*"; }

[ $# -eq 1 ] || die "usage: $0 DEST"
[ "$(uname -m)" = x86_64 ] || die "only x86_64 is supported (got $(uname -m))"
. /etc/os-release
[ "${VERSION_CODENAME:-}" = bookworm ] || die "needs Debian 12 bookworm (got ${PRETTY_NAME:-unknown})"
for tool in apt-get apt-cache dpkg-deb dpkg-query ldd python3; do
  command -v "$tool" >/dev/null || die "'$tool' not found in PATH"
done

mkdir -p "$1"
DEST=$(cd "$1" && pwd)

# ---- pinned versions -------------------------------------------------------------------
MESA_VER=25.0.7-2~bpo12+1            # bookworm-backports
DRM_VER=2.4.123-1~bpo12+1            # bookworm-backports (Mesa 25 needs libdrm >= 2.4.121)
VULKAN_VER=1.3.239.0-1               # bookworm
VULKAN_TOOLS_VER=1.3.239.0+dfsg1-1   # bookworm (vulkaninfo)
ORT_WEBGPU_PY=1.27.0
NUMPY_VER=2.4.6

# Package=version to unpack. The loader and vulkaninfo only when the system lacks them.
DEBS=("mesa-vulkan-drivers=$MESA_VER" "libdrm2=$DRM_VER" "libdrm-amdgpu1=$DRM_VER")
installed() { dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null | grep -qx installed; }
installed libvulkan1 || DEBS+=("libvulkan1=$VULKAN_VER")
command -v vulkaninfo >/dev/null || DEBS+=("vulkan-tools=$VULKAN_TOOLS_VER")

# ---- 1. download the .debs with a private apt state -----------------------------------
APT="$DEST/apt"
DEBDIR="$DEST/debs"
mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$APT/sources.list.d" \
         "$APT/preferences.d" "$DEBDIR"
cat > "$APT/sources.list" <<'EOF'
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm-backports main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main
EOF
APT_OPTS=(-q -o "Dir::Etc::SourceList=$APT/sources.list" -o "Dir::Etc::SourceParts=$APT/sources.list.d"
          -o "Dir::Etc::Preferences=$APT/preferences" -o "Dir::Etc::PreferencesParts=$APT/preferences.d"
          -o "Dir::State::Lists=$APT/lists" -o "Dir::Cache=$APT/cache" -o "APT::Get::List-Cleanup=0")

deb_file() {  # pkg=ver -> path of the downloaded .deb (apt's name: ':' becomes %3a)
  local pkg=${1%%=*} ver=${1#*=}
  echo "$DEBDIR/${pkg}_${ver//:/%3a}_amd64.deb"
}
missing=()
for d in "${DEBS[@]}"; do [ -s "$(deb_file "$d")" ] || missing+=("$d"); done
if [ ${#missing[@]} -gt 0 ]; then
  step "downloading ${#missing[@]} .deb(s) from bookworm(-backports) with a private apt state"
  apt-get "${APT_OPTS[@]}" update >"$APT/update.log" 2>&1 \
    || die "apt-get update on the private state failed (see $APT/update.log)"
  (cd "$DEBDIR" && apt-get "${APT_OPTS[@]}" download "${missing[@]}" >"$APT/download.log" 2>&1) \
    || die "cannot download ${missing[*]} (pinned version gone from the archive? see $APT/download.log)"
  for d in "${missing[@]}"; do [ -s "$(deb_file "$d")" ] || die "download of $d produced no $(deb_file "$d")"; done
else
  step "debs already downloaded (${#DEBS[@]})"
fi

# ---- 2. unpack into DEST/mesa ----------------------------------------------------------
MESA="$DEST/mesa"
mkdir -p "$MESA/.stamps"
n=0
for d in "${DEBS[@]}"; do
  f=$(deb_file "$d"); stamp="$MESA/.stamps/$(basename "$f").done"
  [ -e "$stamp" ] && continue
  dpkg-deb -x "$f" "$MESA" || die "dpkg-deb -x $f failed"
  touch "$stamp"; n=$((n + 1))
done
step "unpacked $n new .deb(s) into $MESA"

LIBDIR="$MESA/usr/lib/x86_64-linux-gnu"
LVP="$LIBDIR/libvulkan_lvp.so"
[ -e "$LVP" ] || die "$LVP missing after unpacking mesa-vulkan-drivers"
ICD="$MESA/lvp_icd.x86_64.json"
cat > "$ICD.tmp" <<EOF
{
    "ICD": {
        "api_version": "1.4.305",
        "library_arch": "64",
        "library_path": "$LVP"
    },
    "file_format_version": "1.0.1"
}
EOF
# keep Mesa's own api_version when its ICD file is there
if [ -f "$MESA/usr/share/vulkan/icd.d/lvp_icd.json" ]; then
  api=$(sed -n 's/.*"api_version": *"\([^"]*\)".*/\1/p' "$MESA/usr/share/vulkan/icd.d/lvp_icd.json")
  [ -n "$api" ] && sed -i "s/\"api_version\": \"[^\"]*\"/\"api_version\": \"$api\"/" "$ICD.tmp"
fi
mv "$ICD.tmp" "$ICD"

LD_ADD="$LIBDIR"
unresolved=$(LD_LIBRARY_PATH="$LD_ADD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$LVP" | awk '/not found/ {print $1}' | tr '\n' ' ')
[ -z "$unresolved" ] || die "libvulkan_lvp.so needs libraries the system lacks: $unresolved(install them with apt-get)"
if ! installed libvulkan1; then
  [ -e "$LIBDIR/libvulkan.so.1" ] || die "Vulkan loader libvulkan.so.1 missing after unpacking libvulkan1"
fi
step "lavapipe ICD written: $ICD"

# ---- 3. env.sh ------------------------------------------------------------------------
mkdir -p "$DEST/shader-cache"
cat > "$DEST/env.sh" <<EOF
# source this file: selects Mesa $MESA_VER lavapipe for Vulkan (and so for Dawn / WebGPU)
export VK_ICD_FILENAMES="$ICD"
export VK_DRIVER_FILES="$ICD"
export LD_LIBRARY_PATH="$LD_ADD\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export MESA_SHADER_CACHE_DIR="$DEST/shader-cache"
export MESA_SHADER_CACHE_MAX_SIZE=\${MESA_SHADER_CACHE_MAX_SIZE:-1G}
# llvmpipe's subgroup size is its vector width / 32 (default 256 bits -> 8). With 64 bits the
# subgroup size is 2, below WebGPU's minimum of 4, so Dawn hides the 'subgroups' feature and
# ORT's WebGPU attention takes its shared-memory path, which is right on lavapipe; its subgroup
# path is wrong there for longer sequences (ORT 1.27: S > min(subgroup size, 16); 1.30 at
# size 8: S >= 32). Slower (fp16 most); set another width before sourcing to override.
export LP_NATIVE_VECTOR_WIDTH=\${LP_NATIVE_VECTOR_WIDTH:-64}
export PATH="$MESA/usr/bin:\$PATH"
EOF
step "wrote $DEST/env.sh"

# ---- 4. Python venv --------------------------------------------------------------------
VENV="$DEST/venv"
have_py() {
  "$VENV/bin/python" - "$ORT_WEBGPU_PY" "$NUMPY_VER" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version
sys.exit(0 if (version("onnxruntime-webgpu"), version("numpy")) == tuple(sys.argv[1:3]) else 1)
EOF
}
if [ -x "$VENV/bin/python" ] && have_py; then
  step "venv already has onnxruntime-webgpu==$ORT_WEBGPU_PY numpy==$NUMPY_VER"
else
  step "creating $VENV with onnxruntime-webgpu==$ORT_WEBGPU_PY numpy==$NUMPY_VER"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" || die "python3 -m venv $VENV failed"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
      "onnxruntime-webgpu==$ORT_WEBGPU_PY" "numpy==$NUMPY_VER" >"$DEST/pip.log" 2>&1 \
    || die "pip install into $VENV failed (see $DEST/pip.log)"
  have_py || die "venv check failed after pip install"
fi

step "done; use: source $DEST/env.sh"
