#!/usr/bin/env bash
# The first GPU session, as one command on a lent GPU machine (docs/speed.md, "The first GPU session").
#
#     bash bench/gpu_session.sh            # writes its tables to $OUT (or ./gpu-session/) and prints them
#     DEVICE=cpu bash bench/gpu_session.sh # a dry run of the same steps on any machine
#
# Such a machine has its own python3 with a CUDA torch (2.11 when last seen) and the packages
# sharpen's core needs (safetensors, tokenizers, transformers, accelerate, triton), but no network
# and no .venv: sharpen is installed from this checkout, without its dependencies, into a folder
# of its own, so the run imports the installed package as a user's would. Time is short (a lease
# is 15 minutes, its start included): each part has a time limit, gpu_ready.py prints each group
# of rows as it has them and stops starting groups once its budget is spent, so a run cut short
# still brings back every row it measured.
set -u -o pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-session}"
device="${DEVICE:-cuda}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1

{
    date -u
    [ "$device" = cuda ] && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available() and torch.cuda.get_device_name())'
    git rev-parse --short HEAD 2>/dev/null
} 2>&1 | tee "$out/environment.txt"

site=/tmp/sharpen-site
rm -rf "$site"
if ! python3 -m pip install -q --no-deps --no-build-isolation --no-index --target "$site" . >"$out/install.log" 2>&1; then
    # pip builds the wheel with the machine's own setuptools (no network for another): if that
    # fails, the checkout's folders are linked in the installed layout (`sharpen` is a namespace
    # package: sharpen.core is core/, and so on, as pyproject.toml maps them).
    echo "pip could not install sharpen ($(grep -m1 -i error "$out/install.log")); linking the checkout instead"
    rm -rf "$site" && mkdir -p "$site/sharpen"
    for part in app core kernels themes; do ln -s "$PWD/$part" "$site/sharpen/$part"; done
fi
export PYTHONPATH="$site"
python3 -c 'import sharpen.core.models.loading as l; print("sharpen from", l.__file__)' 2>&1 | tee -a "$out/environment.txt"

# The table (gpu_ready.py says what each row must show): host syncs, each shape's cached step timed
# eager and under CUDA graphs, the load peaks, packed passes, then the counts any device gives
# alike, while the budget lasts.
timeout 300 python3 bench/gpu_ready.py --device "$device" --no-compile-count --budget 200 2>"$out/gpu_ready.err" | tee "$out/gpu_ready.md" || echo "gpu_ready.py: exit $? (124: its time limit)"
# Quantized steps on the GPU: int8, and int4 on PyTorch's own kernel (never run on a GPU before).
timeout 90 python3 bench/quantize.py --device "$device" --shapes tiny,qwen2-0.5b 2>"$out/quantize.err" | tee "$out/quantize.md" || echo "quantize.py: exit $? (124: its time limit)"
# Concurrent clients on `sharpen serve` at real sizes (bench/serve.py; docs/speed.md, "The serve rows"): the masked
# and block-causal kinds at the Qwen2.5-0.5B and 1.5B shapes in bfloat16, 1/4/8 clients, batched (--max-batch 8)
# against one run at a time (--max-batch 1), both eager (--compile off: a compiled model runs one at a time). Each
# kind and size prints its rows when done, so a run cut at its 180 s still brings back the ones it finished. The image
# has no starlette or uvicorn (sharpen's serve extra): their wheels travel in .whl/ (docs/speed.md says how).
deps=/tmp/sharpen-serve-deps
: >"$out/serve.err"
if ! python3 -c 'import starlette, uvicorn' 2>/dev/null && ls .whl/starlette-*.whl .whl/uvicorn-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$deps" .whl/starlette-*.whl .whl/uvicorn-*.whl >>"$out/install.log" 2>&1
    export PYTHONPATH="$site:$deps"
fi
if python3 -c 'import starlette, uvicorn' 2>/dev/null; then
    sizes=0.5b,1.5b; [ "$device" = cuda ] || sizes=small  # a dry run: the same steps at the small sizes
    timeout 180 python3 bench/serve.py --kinds masked,block-causal --models "$sizes" --clients 1,4,8 --requests 2 --repeats 1 \
        --max-tokens 32 --checkpoint-dtype bfloat16 --checkpoints /tmp/sharpen-serve-checkpoints \
        --server-args "--device $device --dtype bfloat16 --compile off" 2>"$out/serve.err" | tee "$out/serve.md" \
        || echo "serve.py: exit $? (124: its time limit)"
else
    echo "serve rows skipped: no starlette/uvicorn for this python3 and none in .whl/ (docs/speed.md)" | tee "$out/serve.md"
fi
tail -n 3 "$out/gpu_ready.err" "$out/quantize.err" "$out/serve.err"
