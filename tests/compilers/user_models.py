"""Models made elsewhere, as users bring them: transformers' BERT, GPT-2, ViT, ResNet-18 and MobileNetV2 built
from their config classes with random weights (no download), and a bare ``nn.Linear`` exported by
``torch.onnx.export`` and saved by ``torch.export``. torchvision does not import beside this torch, so the
ResNet-18 (basic blocks, depths 2-2-2-2) and MobileNet come from transformers' own implementations."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

VOCAB = 200


class FirstOutput(nn.Module):
    """A transformers model's first output as a plain tensor (what ONNX exporters want)."""

    def __init__(self, model, gpt: bool = False):
        super().__init__()
        self.model, self.gpt = model, gpt

    def forward(self, *args):
        if self.gpt:  # explicit positions and mask: the exporter cannot translate the packed-sequence check
            ids = args[0]
            positions = torch.arange(ids.shape[1]).unsqueeze(0)
            return self.model(input_ids=ids, attention_mask=torch.ones_like(ids), position_ids=positions,
                              use_cache=False, return_dict=False)[0]
        return self.model(*args, return_dict=False)[0]


def _transformers():
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers


def bert():
    tf = _transformers()
    config = tf.BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=128, max_position_embeddings=64)
    ids = torch.randint(0, VOCAB, (2, 16), generator=torch.Generator().manual_seed(0))
    return FirstOutput(tf.BertModel(config)), (ids, torch.ones_like(ids)), ["input_ids", "attention_mask"], {0: "batch"}


def gpt2():
    tf = _transformers()
    config = tf.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=64,
                           attn_implementation="eager", use_cache=False)
    ids = torch.randint(0, VOCAB, (2, 16), generator=torch.Generator().manual_seed(0))
    return FirstOutput(tf.GPT2LMHeadModel(config), gpt=True), (ids,), ["input_ids"], {0: "batch", 1: "sequence"}


def vit():
    tf = _transformers()
    config = tf.ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=64, num_hidden_layers=2,
                          num_attention_heads=4, intermediate_size=128)
    return FirstOutput(tf.ViTModel(config)), (torch.randn(2, 3, 32, 32),), ["pixel_values"], {0: "batch"}


def resnet18():
    tf = _transformers()
    config = tf.ResNetConfig(num_channels=3, embedding_size=32, hidden_sizes=[32, 64, 128, 256], depths=[2, 2, 2, 2],
                             layer_type="basic", num_labels=10)
    return (FirstOutput(tf.ResNetForImageClassification(config)), (torch.randn(2, 3, 64, 64),), ["pixel_values"],
            {0: "batch"})


def mobilenet():
    tf = _transformers()
    config = tf.MobileNetV2Config(num_channels=3, image_size=64, depth_multiplier=0.35, num_labels=10)
    return (FirstOutput(tf.MobileNetV2ForImageClassification(config)), (torch.randn(2, 3, 64, 64),),
            ["pixel_values"], {0: "batch"})


def linear():
    return nn.Linear(256, 128, bias=False), (torch.randn(1, 256),), ["x"], {0: "batch"}


CORPUS = {"bert": bert, "gpt2": gpt2, "vit": vit, "resnet18": resnet18, "mobilenet_v2": mobilenet, "linear": linear}


def export_onnx(name: str, folder: Path) -> Path:
    """The model exported by the TorchScript exporter (opset 17), batch (and GPT-2's sequence) left symbolic."""
    torch.manual_seed(0)
    model, inputs, names, dynamic = CORPUS[name]()
    path = folder / f"{name}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), inputs, str(path), dynamo=False, opset_version=17, input_names=names,
                          output_names=["out"], dynamic_axes={**{n: dynamic for n in names}, "out": dynamic})
    return path


def save_program(folder: Path) -> Path:
    """A two-layer MLP saved with ``torch.export.save``."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 10)).eval()
    path = folder / "mlp.pt2"
    torch.export.save(torch.export.export(model, (torch.randn(2, 64),)), str(path))
    return path


def inputs_npz(name: str, folder: Path, batch: int = 2) -> Path:
    """Inputs for the corpus model ``name`` at ``batch``, keyed by input name (token ids in the vocabulary)."""
    rng = np.random.default_rng(1)
    _, example, names, _ = CORPUS[name]()
    arrays = {}
    for input_name, x in zip(names, example, strict=True):
        shape = (batch, *x.shape[1:])
        if x.dtype == torch.int64:
            arrays[input_name] = (rng.integers(0, VOCAB, shape) if input_name == "input_ids"
                                  else np.ones(shape, np.int64))
        else:
            arrays[input_name] = rng.standard_normal(shape).astype(np.float32)
    path = folder / f"{name}_inputs.npz"
    np.savez(path, **arrays)
    return path
