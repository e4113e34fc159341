"""The frozen backbone, with the real all-MiniLM-L6-v2 weights and a tiny random BERT."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from flow_plugin.encoding.backbone import Backbone
from flow_plugin.errors import InputError, InputTypeError
from flow_plugin.encoding.pooling import parse_pooling

SENTENCES = [
    "A man is playing a guitar.",
    "A woman is slicing an onion into small pieces on a wooden cutting board in the kitchen.",
    "Someone plays an instrument.",
    "Dogs.",
    "The stock market fell sharply today after the central bank raised interest rates again.",
    "A child is riding a horse.",
    "Two men are fighting.",
]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module")
def minilm(minilm_path: Path) -> Backbone:
    return Backbone(minilm_path, pooling="last-avg", precision="float32", show_progress_bar=False)


def test_shapes_dtype_and_frozen_eval_model(minilm: Backbone) -> None:
    embeddings = minilm.encode(SENTENCES)
    assert embeddings.shape == (len(SENTENCES), 384) and embeddings.dtype == np.float32
    assert minilm.model.training is False
    assert not any(parameter.requires_grad for parameter in minilm.model.parameters())
    assert minilm.device.type in ("cpu", "cuda")


def test_matches_sentence_transformers_mean_pooling(minilm: Backbone, minilm_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(minilm_path), device="cpu").encode(SENTENCES, normalize_embeddings=False)
    ours = minilm.encode(SENTENCES)
    for mine, theirs in zip(ours, reference):
        assert cosine(mine, theirs) > 1 - 1e-5


def test_order_is_preserved_under_length_batching(minilm: Backbone) -> None:
    batched = minilm.encode(SENTENCES, batch_size=2)  # several length-sorted batches
    one_by_one = np.stack([minilm.encode([sentence])[0] for sentence in SENTENCES])
    np.testing.assert_allclose(batched, one_by_one, atol=1e-4)
    reversed_input = minilm.encode(SENTENCES[::-1], batch_size=3)
    np.testing.assert_allclose(reversed_input[::-1], batched, atol=1e-4)


def test_paraphrase_scores_higher_than_unrelated_pair(minilm: Backbone) -> None:
    guitar, _, instrument, _, market, _, _ = minilm.encode(SENTENCES)
    assert cosine(guitar, instrument) > cosine(guitar, market) + 0.2


def test_pooling_variants_match_hidden_states_and_differ(minilm_path: Path) -> None:
    backbone = Backbone(minilm_path, pooling="first-last-avg", precision="float32")
    sentences = SENTENCES[:3]
    tokens = backbone.tokenizer(sentences, padding=True, truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
        hidden = backbone.model(**tokens, output_hidden_states=True).hidden_states
    mask = tokens["attention_mask"].unsqueeze(-1).float()

    def masked_mean(layer: torch.Tensor) -> np.ndarray:
        return ((layer * mask).sum(1) / mask.sum(1)).numpy()

    expected = {
        "first-last-avg": (masked_mean(hidden[1]) + masked_mean(hidden[-1])) / 2,
        "last2avg": (masked_mean(hidden[-2]) + masked_mean(hidden[-1])) / 2,
        "last-avg": masked_mean(hidden[-1]),
        "cls": hidden[-1][:, 0].numpy(),
        "layers:0,3": (masked_mean(hidden[0]) + masked_mean(hidden[3])) / 2,
    }
    results = {}
    for name, value in expected.items():
        spec = [0, 3] if name == "layers:0,3" else name
        got = Backbone(minilm_path, pooling=spec, precision="float32").encode(sentences)
        np.testing.assert_allclose(got, value, atol=2e-5, err_msg=name)
        results[name] = got
    names = list(results)
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            assert not np.allclose(results[first], results[second], atol=1e-3), (first, second)
    assert parse_pooling([1, -1]).name == "first-last-avg"


def test_bf16_precision_stays_close_to_float32(minilm_path: Path) -> None:
    fp32 = Backbone(minilm_path, pooling="last-avg", precision="float32").encode(SENTENCES)
    bf16 = Backbone(minilm_path, pooling="last-avg", precision="bf16").encode(SENTENCES)
    assert min(cosine(a, b) for a, b in zip(fp32, bf16)) > 0.999


def test_empty_input_gives_empty_array_without_loading_weights(minilm_path: Path) -> None:
    backbone = Backbone(minilm_path)
    out = backbone.encode([])
    assert out.shape == (0, 384) and out.dtype == np.float32
    assert not backbone.is_loaded


def test_non_string_input_is_an_error(tiny_bert_dir: Path) -> None:
    backbone = Backbone(tiny_bert_dir)
    with pytest.raises(InputTypeError, match=r"sentences\[1\] is int"):
        backbone.encode(["a man", 3])
    with pytest.raises(InputTypeError, match="single str"):
        backbone.encode("a man plays guitar")
    with pytest.raises(InputTypeError, match=r"sentences\[0\] is NoneType"):
        backbone.encode([None])


def test_local_folder_loading_and_truncation(tiny_bert_dir: Path) -> None:
    backbone = Backbone(tiny_bert_dir, pooling="last2avg", max_seq_length=8, precision="float32")
    assert not backbone.is_loaded and backbone.embedding_dim == 32
    long_sentence = "the man plays the guitar in the park with the dog today"
    truncated = "the man plays the guitar in"  # [CLS] + 6 word pieces + [SEP] = 8 tokens
    out = backbone.encode([long_sentence, truncated])
    assert backbone.is_loaded
    np.testing.assert_allclose(out[0], out[1], rtol=0, atol=2e-5 * np.abs(out).max())
    assert len(backbone.tokenize([long_sentence])[0]) == 8


def test_pooling_layer_out_of_range_is_an_error(tiny_bert_dir: Path) -> None:
    with pytest.raises(InputError, match=r"hidden_states\[7\].*only 3 hidden states"):
        Backbone(tiny_bert_dir, pooling=[1, 7]).load()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pooling": "median"}, "unknown pooling 'median'"),
        ({"precision": "int4"}, "unknown precision 'int4'"),
        ({"max_seq_length": 1}, "max_seq_length must be an int >= 2"),
        ({"batch_size": 0}, "batch_size must be a positive int"),
    ],
)
def test_bad_backbone_settings_are_errors(tiny_bert_dir: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        Backbone(tiny_bert_dir, **kwargs)


BAD_BATCH_SIZES = [(-1, "got -1"), (0, "got 0"), (1.5, "got 1.5"), (True, "got True"), ("8", "got '8'")]


@pytest.mark.parametrize(("batch_size", "shown"), BAD_BATCH_SIZES)
def test_a_bad_batch_size_is_a_one_line_error_wherever_it_is_given(tiny_bert_dir: Path, batch_size: object,
                                                                   shown: str) -> None:
    """-1 used to return uninitialised memory (values ~1e27), 0 silently meant the default and 1.5 was a
    raw TypeError; the constructor, ``encode`` and the encoder options now share one check."""
    from flow_plugin.encoding.options import EncoderOptions

    message = rf"batch_size must be a positive int, {shown}; give the number of sentences per forward pass"
    backbone = Backbone(tiny_bert_dir, precision="float32")
    for call in (lambda: Backbone(tiny_bert_dir, batch_size=batch_size),
                 lambda: backbone.encode(["the man plays guitar ."], batch_size=batch_size),
                 lambda: backbone.encode([], batch_size=batch_size),
                 lambda: EncoderOptions(batch_size=batch_size)):
        with pytest.raises(InputError, match=message) as caught:
            call()
        assert "\n" not in str(caught.value)
    assert Backbone(tiny_bert_dir, batch_size=np.int64(2)).batch_size == 2  # a numpy integer is a whole number too


def test_key_names_everything_that_shapes_an_embedding(tiny_bert_dir: Path) -> None:
    key = Backbone(tiny_bert_dir, revision="abc", pooling="cls", max_seq_length=32, precision="float32", device="cpu").key
    assert key.as_dict() == {
        "model": str(tiny_bert_dir),
        "revision": "abc",
        "pooling": "cls",
        "max_seq_length": 32,
        "precision": "float32",
        "kernels": "cpu-float32",
        "batch_plan": "length-exact",
    }


@pytest.mark.parametrize(("pooling", "kept"), [([0], 0), ([1], 1), ([0, 2], 2), ("first-last-avg", 6)])
def test_layers_the_pooling_never_reads_are_not_run(minilm_path: Path, pooling: object, kept: int) -> None:
    full = Backbone(minilm_path, pooling="last-avg", precision="float32")
    tokens = full.tokenizer(SENTENCES[:3], padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = full.model(**tokens, output_hidden_states=True).hidden_states
    mask = tokens["attention_mask"].unsqueeze(-1).float()
    layers = parse_pooling(pooling).layers
    expected = sum(((hidden[i] * mask).sum(1) / mask.sum(1)) for i in layers).numpy() / len(layers)
    backbone = Backbone(minilm_path, pooling=pooling, precision="float32")
    got = np.stack([backbone.encode([sentence])[0] for sentence in SENTENCES[:3]])
    assert len(backbone.model.encoder.layer) == kept
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-5 * np.abs(expected).max())


def test_a_checkpoint_saved_in_half_precision_runs_on_float32_master_weights(tiny_bert_dir: Path,
                                                                            tmp_path: Path) -> None:
    """Many published checkpoints are stored in fp16 or bf16; loaded as they are, every layer (LayerNorms too)
    would compute in half precision whatever ``precision`` says. The backbone loads float32 master weights, so
    the fp16 checkpoint gives what the same rounded values stored as float32 give, exactly."""
    from transformers import AutoModel

    halved = AutoModel.from_pretrained(tiny_bert_dir, dtype=torch.float32).to(torch.float16)
    half_folder, widened_folder = tmp_path / "fp16", tmp_path / "widened"
    halved.save_pretrained(half_folder)
    halved.to(torch.float32).save_pretrained(widened_folder)
    for folder in (half_folder, widened_folder):
        for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json"):
            if (tiny_bert_dir / name).exists():
                (folder / name).write_bytes((tiny_bert_dir / name).read_bytes())
    sentences = ["a man plays a guitar", "the cat sat on the mat"]
    half = Backbone(half_folder, pooling="last-avg", precision="float32", show_progress_bar=False).load()
    assert {parameter.dtype for parameter in half._model.parameters()} == {torch.float32}
    widened = Backbone(widened_folder, pooling="last-avg", precision="float32", show_progress_bar=False)
    np.testing.assert_array_equal(half.encode(sentences), widened.encode(sentences))
