"""One encoder backend in its own process, for :mod:`benchmarks.peers`: ``python -m benchmarks.peer_worker``.

The process loads one backend (flow-plugin's ``Backbone`` at a precision, or a sentence-transformers model on
its torch, ONNX Runtime or OpenVINO backend), exports the ONNX / OpenVINO files it needs from the local model
folder first when they are not there yet, warms it up, and then answers commands on standard input, one a line:

``encode ROUND [EMBEDDINGS.npy]``
    encode every sentence once (wall and CPU seconds timed around the one ``encode`` call), save the
    embeddings where a path is given, and answer with the times;
``quit``
    leave.

Each answer is one line ``@@ {json}`` on the file descriptor standard output had when the process started;
anything a library prints goes to standard error instead, so it cannot break the protocol. This module imports
nothing of the benchmark's own (it runs in the peers' own virtual environments, where only sentence-transformers
and its backend's packages are installed); flow-plugin is imported only by flow-plugin's backends.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable

#: how each backend is built: (library, runtime, option); the names are :data:`benchmarks.peers.PEERS`'s
BACKENDS: dict[str, tuple[str, str, str]] = {
    "flow-plugin auto": ("flow-plugin", "torch", "auto"),
    "flow-plugin float32": ("flow-plugin", "torch", "float32"),
    "flow-plugin bf16": ("flow-plugin", "torch", "bf16"),
    "flow-plugin int8": ("flow-plugin", "torch", "int8"),
    "sentence-transformers torch float32": ("sentence-transformers", "torch", "float32"),
    "sentence-transformers torch bf16": ("sentence-transformers", "torch", "bf16"),
    "sentence-transformers onnx": ("sentence-transformers", "onnx", "plain"),
    "sentence-transformers onnx O3": ("sentence-transformers", "onnx", "O3"),
    "sentence-transformers onnx int8": ("sentence-transformers", "onnx", "int8"),
    "sentence-transformers openvino": ("sentence-transformers", "openvino", "plain"),
    "sentence-transformers openvino int8": ("sentence-transformers", "openvino", "int8"),
}
#: the answer prefix of the protocol
ANSWER = "@@ "
#: STS-B train sentences the OpenVINO static int8 quantization calibrates on (at most)
CALIBRATION_SENTENCES = 300


def cpu_flags() -> set[str]:
    """The CPU's flags from /proc/cpuinfo (empty where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def onnx_int8_variant(flags: set[str]) -> str:
    """sentence-transformers' dynamic int8 ONNX configuration for a CPU with ``flags``: the widest integer
    instructions it has (VNNI's int8 dot products where present).

    >>> onnx_int8_variant({"avx2", "avx512f", "avx512_vnni"}), onnx_int8_variant({"avx2"}), onnx_int8_variant(set())
    ('avx512_vnni', 'avx2', 'arm64')
    """
    if "avx512_vnni" in flags:
        return "avx512_vnni"
    if "avx512f" in flags:
        return "avx512"
    if "avx2" in flags:
        return "avx2"
    return "arm64"


def _export_folder(model: Path, exports: Path, name: str) -> Path:
    """A copy of the model folder under ``exports`` for one runtime's exported files (the original, which may
    sit inside an installed package, is never written to); made once, by a rename."""
    folder = exports / name
    if not folder.is_dir():
        exports.mkdir(parents=True, exist_ok=True)
        staging = exports / f".{name}.{os.getpid()}.tmp"
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(model, staging)
        os.replace(staging, folder)
    return folder


def _sentence_transformer(runtime: str, option: str, model: Path, exports: Path, threads: int,
                          calibration: list[str]) -> tuple[Any, dict[str, Any]]:
    """A sentence-transformers model on ``runtime`` (and what was exported, and how it runs)."""
    from sentence_transformers import SentenceTransformer

    info: dict[str, Any] = {}
    if runtime == "torch":
        kwargs = {"model_kwargs": {"dtype": "bfloat16"}} if option == "bf16" else {}
        return SentenceTransformer(str(model), device="cpu", **kwargs), info
    if runtime == "onnx":
        import onnxruntime

        folder = _export_folder(model, exports, "onnx")
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        info["onnxruntime"] = onnxruntime.__version__
        if not (folder / "onnx" / "model.onnx").is_file():  # sentence-transformers exports it when absent
            SentenceTransformer(str(folder), device="cpu", backend="onnx").save_pretrained(str(folder))
        file_name = "onnx/model.onnx"
        if option == "O3":
            file_name = "onnx/model_O3.onnx"
            if not (folder / file_name).is_file():
                from sentence_transformers import export_optimized_onnx_model

                export_optimized_onnx_model(SentenceTransformer(str(folder), backend="onnx"), "O3", str(folder))
        elif option == "int8":
            variant = onnx_int8_variant(cpu_flags())
            file_name = f"onnx/model_qint8_{variant}.onnx"
            info["int8_variant"] = variant
            if not (folder / file_name).is_file():
                from sentence_transformers import export_dynamic_quantized_onnx_model

                export_dynamic_quantized_onnx_model(SentenceTransformer(str(folder), backend="onnx"), variant, str(folder))
        info["file"] = file_name
        model_kwargs = {"file_name": file_name, "session_options": options, "provider": "CPUExecutionProvider"}
        return SentenceTransformer(str(folder), device="cpu", backend="onnx", model_kwargs=model_kwargs), info
    if runtime == "openvino":
        import openvino

        folder = _export_folder(model, exports, "openvino")
        info["openvino"] = openvino.__version__
        if not (folder / "openvino" / "openvino_model.xml").is_file():
            SentenceTransformer(str(folder), device="cpu", backend="openvino").save_pretrained(str(folder))
        file_name = "openvino/openvino_model.xml"
        if option == "int8":
            file_name = "openvino/openvino_model_qint8_static.xml"
            if not (folder / file_name).is_file():
                _openvino_static_int8(folder, file_name, calibration)
        info["file"] = file_name
        model_kwargs = {"file_name": file_name, "ov_config": {"INFERENCE_NUM_THREADS": threads}}
        encoder = SentenceTransformer(str(folder), device="cpu", backend="openvino", model_kwargs=model_kwargs)
        try:
            info["inference_precision"] = _openvino_precision(encoder, openvino)
        except Exception as error:  # noqa: BLE001 -- a description only; the timing does not need it
            info["inference_precision_error"] = f"{type(error).__name__}: {error}"
        return encoder, info
    raise ValueError(runtime)


def _openvino_precision(encoder: Any, openvino: Any) -> str:
    """The precision OpenVINO's CPU plugin runs the model in (``f32``, ``bf16`` ...): the compiled model's
    ``INFERENCE_PRECISION_HINT``. optimum-intel keeps the compiled model as ``request``, or (newer releases) an infer
    request made from it, which has no properties of its own; without either, the CPU plugin's default."""
    model = encoder[0].auto_model
    model.compile()
    compiled = getattr(model, "request", None)
    if hasattr(compiled, "get_compiled_model"):  # an InferRequest
        compiled = compiled.get_compiled_model()
    if hasattr(compiled, "get_property"):
        value = compiled.get_property("INFERENCE_PRECISION_HINT")
    else:
        value = openvino.Core().get_property("CPU", "INFERENCE_PRECISION_HINT")
    return str(getattr(value, "get_type_name", lambda: value)())


def _openvino_static_int8(folder: Path, file_name: str, calibration: list[str]) -> None:
    """Post-training static int8 quantization of the OpenVINO model in ``folder`` (optimum-intel's
    ``OVQuantizer``, default configuration), calibrated on ``calibration`` (local sentences: the Hub's default
    calibration set cannot be reached), written as ``file_name`` (and its ``.bin``)."""
    import tempfile

    import datasets
    from optimum.intel.openvino import OVConfig, OVQuantizationConfig, OVQuantizer
    from sentence_transformers import SentenceTransformer

    if not calibration:
        raise ValueError("OpenVINO int8 needs calibration sentences")
    base = SentenceTransformer(str(folder), device="cpu", backend="openvino")
    quantizer = OVQuantizer.from_pretrained(base[0].auto_model)
    texts = datasets.Dataset.from_dict({"text": calibration[:CALIBRATION_SENTENCES]})
    dataset = texts.map(lambda rows: base.tokenizer(rows["text"], padding="max_length", max_length=64, truncation=True),
                        batched=True, remove_columns=["text"])
    config = OVConfig(quantization_config=OVQuantizationConfig(num_samples=len(dataset)))
    with tempfile.TemporaryDirectory() as save_dir:
        quantizer.quantize(dataset, save_directory=save_dir, ov_config=config)
        produced = next(Path(save_dir).rglob("openvino_model.xml"))
        target = folder / file_name
        shutil.move(produced.with_suffix(".bin"), target.with_suffix(".bin"))
        shutil.move(produced, target)


def build(backend: str, model: Path, exports: Path, threads: int, batch_size: int, max_length: int,
          pooling: str, calibration: list[str]) -> tuple[Callable[[list[str]], Any], dict[str, Any]]:
    """``(encode, description)`` of ``backend``: ``encode(sentences)`` returns an (n, d) array."""
    library, runtime, option = BACKENDS[backend]
    if library == "flow-plugin":
        from flow_plugin.encoding.backbone import Backbone

        backbone = Backbone(str(model), pooling=pooling, max_seq_length=max_length, batch_size=batch_size,
                            precision=option, show_progress_bar=False).load()
        info = {"precision": backbone.precision, "precision_choice": backbone.precision_choice.as_dict(),
                "kernels": backbone.kernels}
        return backbone.encode, info
    encoder, info = _sentence_transformer(runtime, option, model, exports, threads, calibration)
    encoder.max_seq_length = max_length
    info["sentence_transformers"] = __import__("sentence_transformers").__version__

    def encode(sentences: list[str]) -> Any:
        return encoder.encode(sentences, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False)

    return encode, info


def _answer(channel: Any, message: dict[str, Any]) -> None:
    channel.write(ANSWER + json.dumps(message) + "\n")
    channel.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peer_worker", description=__doc__.splitlines()[0])
    parser.add_argument("--backend", required=True, choices=sorted(BACKENDS))
    parser.add_argument("--model", type=Path, required=True, help="the local model folder")
    parser.add_argument("--exports", type=Path, required=True, help="where ONNX / OpenVINO exports are kept")
    parser.add_argument("--sentences", type=Path, required=True,
                        help="JSON: {'sentences': [...], 'calibration': [...], 'warm_up': N}")
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--max-length", type=int, required=True)
    parser.add_argument("--pooling", default="last-avg", help="flow-plugin's pooling (sentence-transformers reads the folder's)")
    args = parser.parse_args(argv)
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # whatever libraries print goes to the log, never into the protocol
    sys.stdout = sys.stderr
    try:
        import torch

        torch.set_num_threads(args.threads)
        inputs = json.loads(args.sentences.read_text(encoding="utf-8"))
        sentences = inputs["sentences"]
        started = time.perf_counter()
        encode, info = build(args.backend, args.model, args.exports, args.threads, args.batch_size, args.max_length,
                             args.pooling, inputs.get("calibration") or [])
        loaded = time.perf_counter() - started
        encode(sentences[: inputs.get("warm_up", 2 * args.batch_size)])  # kernels chosen, caches built: untimed
        info |= {"setup_seconds": round(loaded, 3), "warm_up_seconds": round(time.perf_counter() - started - loaded, 3),
                 "torch": torch.__version__, "torch_threads": torch.get_num_threads(), "python": sys.version.split()[0]}
        _answer(channel, {"ready": True, "backend": args.backend, "info": info})
    except Exception as error:  # noqa: BLE001 -- reported to the parent as the reason this backend is missing
        _answer(channel, {"ready": False, "backend": args.backend, "error": f"{type(error).__name__}: {error}"[:600]})
        raise
    import numpy as np

    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        if words[0] != "encode":
            _answer(channel, {"error": f"unknown command {words[0]!r}"})
            continue
        cpu_start, wall_start = time.process_time(), time.perf_counter()
        embeddings = encode(sentences)
        wall, cpu = time.perf_counter() - wall_start, time.process_time() - cpu_start
        embeddings = np.asarray(embeddings, dtype=np.float32)
        if len(words) > 2:
            np.save(words[2], embeddings)
        _answer(channel, {"round": int(words[1]), "seconds": wall, "cpu_seconds": cpu,
                          "shape": list(embeddings.shape), "finite": bool(np.isfinite(embeddings).all())})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
