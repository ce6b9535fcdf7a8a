#!/usr/bin/env bash
# all-MiniLM-L6-v2 inference, tessera against PyTorch and ONNX Runtime (fp32 and int8) on the
# same machine in one run: sentences/s at batch 32 x 128 tokens and latency at 1 x 16, 2 threads.
#
#   scripts/bench_bert.sh [BUILD_DIR] [--usd-per-hour PRICE]
#
# (default build; needs scripts/bootstrap.sh bench). tessera runs in every precision (fp32,
# bf16, fp16, int8, fp8); the table and plot land in BUILD_DIR/bench-results/bert.{md,png}.
# With --usd-per-hour, the price of the instance per hour, it also prints what a million
# sentences cost at each row's throughput (batch 32 x 128).
#
# PyTorch is Debian's python3-torch with transformers 4.40.2 from PyPI; ONNX Runtime lives in a
# virtual environment of its own (BUILD_DIR/venv-ort: a system-wide NumPy 2 would break Debian's
# torch). The model comes from scripts/fetch_model.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=build
usd=""
while (($#)); do
  case "$1" in
    --usd-per-hour) usd="${2:?--usd-per-hour needs a price}"; shift 2 ;;
    *) build="$1"; shift ;;
  esac
done
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
model="${TESSERA_MINILM_DIR:-${TESSERA_MODELS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera}/all-MiniLM-L6-v2}"
scripts/fetch_model.sh >/dev/null

cmake --build "$build" --target bench_bert >/dev/null
echo "tessera (bench_bert):"
TESSERA_MINILM_DIR="$model" "$build/bench/bench_bert" --benchmark_counters_tabular=true \
  --benchmark_repetitions=3 --benchmark_report_aggregates_only=true 2>/dev/null |
  grep -E 'Benchmark|_median' | tee -a "$out"

# Debian's interpreter: python3-torch is installed for it (PATH may hold another python3).
py=python3
[[ -x /usr/bin/python3 ]] && py=/usr/bin/python3
"$py" -c 'import transformers' 2>/dev/null ||
  "$py" -m pip install --quiet --break-system-packages transformers==4.40.2
echo "anchors:"
"$py" bench/bert/bert_anchors.py torch "$model" 2>/dev/null | tee -a "$out"
onnx="$build/bench-results/bert-onnx"
[[ -f "$onnx/minilm.onnx" ]] || "$py" bench/bert/bert_anchors.py export "$model" "$onnx" 2>/dev/null
venv="$build/venv-ort"
if [[ ! -x "$venv/bin/python" ]]; then
  "$py" -m venv "$venv"
  "$venv/bin/pip" install --quiet onnxruntime numpy onnx
fi
"$venv/bin/python" -c 'import matplotlib' 2>/dev/null || "$venv/bin/pip" install --quiet matplotlib
"$venv/bin/python" bench/bert/bert_anchors.py ort "$onnx" 2>/dev/null | tee -a "$out"

# Cost per million sentences: price / 3600 / (sentences per second) * 10^6.
if [[ -n "$usd" ]]; then
  echo "cost per million sentences at \$$usd per hour (batch 32 x 128):"
  awk -v usd="$usd" '
    /_median/ && /32\/128/ { r = $NF; sub(/\/s$/, "", r); sub(/.*=/, "", r); name = $1
                              sub(/\/32\/128.*/, "", name); sub(/BertForward_/, "tessera ", name)
                              printf "  %-28s $%.3f\n", name, usd / 3600 / r * 1e6 }
    /^(pytorch|onnxruntime) / { for (i = 1; i < NF; ++i) if ($(i + 1) == "sentences/s") r = $i
                      name = $1 " " $3
                      printf "  %-28s $%.3f\n", name, usd / 3600 / r * 1e6 }' "$out"
fi

# The table (and plot) of this run: build/bench-results/bert.md and bert.png.
mkdir -p "$build/bench-results"
cp "$out" "$build/bench-results/bert.txt"
"$venv/bin/python" scripts/bert_report.py "$build/bench-results/bert.txt" \
  "$build/bench-results/bert.png" | tee "$build/bench-results/bert.md"
