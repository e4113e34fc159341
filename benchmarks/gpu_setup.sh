# Source on a lent GPU machine, from the repository's root, with .gpu-carry carried (python -m benchmarks.gpu_carry
# builds it here): `. benchmarks/gpu_setup.sh`. Installs the carried wheels offline into $site, puts them and the
# checkout on the path, installs flow-plugin's MTEB hook (the .pth a pip install of flow-plugin would put in
# site-packages), and points flow-plugin at the carried tokenizer and data. docs/performance.md, On a GPU.
carry="${FLOW_PLUGIN_GPU_CARRY:-$PWD/.gpu-carry}"
if [ ! -d "$carry/wheels" ]; then
  echo "gpu_setup: no $carry/wheels: build it with python -m benchmarks.gpu_carry and carry .gpu-carry" >&2
  return 1 2>/dev/null || exit 1
fi
site="${FLOW_PLUGIN_GPU_SITE:-/tmp/flow-plugin-gpu-site}"
export PYTHONPATH="$PWD:$site${PYTHONPATH:+:$PYTHONPATH}" PATH="$site/bin:$PATH"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
  "$carry"/wheels/*.whl || { return 1 2>/dev/null || exit 1; }
cp flow_plugin/_startup/flow_plugin_mteb.pth "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/"
export FLOW_PLUGIN_SHARED_DATA="$carry/data" FLOW_PLUGIN_TOKENIZER="$carry/tokenizer"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
python3 -c "import flow_plugin, mteb, nflows, polars, torch, transformers, sentence_transformers as st
print('gpu_setup: torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name() if torch.cuda.is_available() else 'NO GPU',
      '| transformers', transformers.__version__, '| sentence-transformers', st.__version__, '| mteb', mteb.__version__,
      '| polars', polars.__version__, '| flow_plugin', flow_plugin.__file__)"
python3 -m pip check 2>&1 | grep -i -E "mteb|datasets|pydantic|polars|nflows|fsspec|typing" || true
