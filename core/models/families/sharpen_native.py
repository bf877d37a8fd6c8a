"""Our own family (the embedded default model): config names and weight names are the backbone's."""
from __future__ import annotations

from ...errors import ModelError
from ..model import ModelConfig
from ...tokenizer import EOS_TOKEN, MASK_TOKEN, PAD_TOKEN
from .family import Family
from .hf import chat_template

_LAYER = {
    "layers.{i}.attn_norm.weight": "layers.{i}.attn_norm.weight",
    "layers.{i}.attn.wq.weight": "layers.{i}.attn.wq.weight",
    "layers.{i}.attn.wk.weight": "layers.{i}.attn.wk.weight",
    "layers.{i}.attn.wv.weight": "layers.{i}.attn.wv.weight",
    "layers.{i}.attn.wo.weight": "layers.{i}.attn.wo.weight",
    "layers.{i}.ffn_norm.weight": "layers.{i}.ffn_norm.weight",
    "layers.{i}.ffn.w1.weight": "layers.{i}.ffn.w1.weight",
    "layers.{i}.ffn.w2.weight": "layers.{i}.ffn.w2.weight",
    "layers.{i}.ffn.w3.weight": "layers.{i}.ffn.w3.weight",
}


def _special_ids(config: dict, tokenizer) -> dict:
    def pick(key: str, token: str):
        value = config.get(key)
        if isinstance(value, list) and key == "eos_token_id":  # HF configs may list several end ids: the first is canonical
            value = value[0] if value else None
        if value is None:
            return tokenizer.token_id(token)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ModelError(f"config.json: {key} is {value!r}, not a token id")
        return value

    return {
        "mask_id": pick("mask_token_id", MASK_TOKEN),
        "pad_id": pick("pad_token_id", PAD_TOKEN),
        "eos_id": pick("eos_token_id", EOS_TOKEN),
        # A chat template lets the chat endpoints write a conversation for it (the embedded model's
        # is a comment transcript); train/ never tunes on instructions, so none are taken.
        "chat_template": chat_template(config),
        "instruct": False,
    }


SHARPEN = Family(
    name="sharpen",
    model_types=("sharpen",),
    to_config=ModelConfig.from_dict,
    weight_map={"embed.weight": "embed.weight", "norm.weight": "norm.weight", "output.weight": "output.weight", **_LAYER},
    special_ids=_special_ids,
    default_refresh="block",  # measured at equal accuracy and faster on this model (docs/speed.md)
)
