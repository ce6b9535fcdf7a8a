#!/usr/bin/env bash
# all-MiniLM-L6-v2 inference, tessera against PyTorch and ONNX Runtime (fp32 and int8) on the
# same machine in one run: sentences/s at batch 32 x 128 tokens and latency at 1 x 16, 2 threads.
#
#   scripts/bench_bert.sh [BUILD_DIR]      (default build; needs scripts/bootstrap.sh bench)
#
# PyTorch is Debian's python3-torch with transformers 4.40.2 from PyPI; ONNX Runtime lives in a
# virtual environment of its own (BUILD_DIR/venv-ort: a system-wide NumPy 2 would break Debian's
# torch). The model comes from scripts/fetch_model.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build="${1:-build}"
model="${TESSERA_MINILM_DIR:-${TESSERA_MODELS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera}/all-MiniLM-L6-v2}"
scripts/fetch_model.sh >/dev/null

cmake --build "$build" --target bench_bert >/dev/null
echo "tessera (bench_bert):"
TESSERA_MINILM_DIR="$model" "$build/bench/bench_bert" --benchmark_counters_tabular=true \
  --benchmark_repetitions=3 --benchmark_report_aggregates_only=true 2>/dev/null |
  grep -E 'Benchmark|_median'

# Debian's interpreter: python3-torch is installed for it (PATH may hold another python3).
py=python3
[[ -x /usr/bin/python3 ]] && py=/usr/bin/python3
"$py" -c 'import transformers' 2>/dev/null ||
  "$py" -m pip install --quiet --break-system-packages transformers==4.40.2
echo "anchors:"
"$py" bench/bert/bert_anchors.py torch "$model" 2>/dev/null
onnx="$build/bench-results/bert-onnx"
[[ -f "$onnx/minilm.onnx" ]] || "$py" bench/bert/bert_anchors.py export "$model" "$onnx" 2>/dev/null
venv="$build/venv-ort"
if [[ ! -x "$venv/bin/python" ]]; then
  "$py" -m venv "$venv"
  "$venv/bin/pip" install --quiet onnxruntime numpy onnx
fi
"$venv/bin/python" bench/bert/bert_anchors.py ort "$onnx" 2>/dev/null
