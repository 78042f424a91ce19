"""Write a LoRA adapter for the tests' tiny Llama (``write_tiny_llama``), with no Hub access.

PEFT's layout, which ``vllm serve --lora-modules NAME=PATH`` loads: ``adapter_config.json`` and
``adapter_model.safetensors`` with small random ``lora_A`` (rank by in) and ``lora_B`` (out by
rank) weights for ``q_proj`` and ``v_proj`` of every layer. Its text is noise, like the base
model's; what it proves is that vLLM loads it and serves requests that name it::

    adapter = write_tiny_lora(tmp / "adapter", base=write_tiny_llama(tmp / "model"))
"""

from __future__ import annotations

import json
from pathlib import Path

RANK = 8
ALPHA = 16
TARGETS = ("q_proj", "v_proj")


def write_tiny_lora(directory: Path, *, base: Path, seed: int = 0) -> Path:
    """Write the adapter for the model in ``base`` (its ``config.json``) to ``directory``."""
    import torch
    from safetensors.torch import save_file

    config = json.loads((base / "config.json").read_text())
    hidden = config["hidden_size"]
    head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
    out = {"q_proj": config["num_attention_heads"] * head_dim,
           "v_proj": config["num_key_value_heads"] * head_dim}
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(config["num_hidden_layers"]):
        for module in TARGETS:
            name = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            tensors[f"{name}.lora_A.weight"] = 0.01 * torch.randn(RANK, hidden,
                                                                  generator=generator)
            tensors[f"{name}.lora_B.weight"] = 0.01 * torch.randn(out[module], RANK,
                                                                  generator=generator)
    directory.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(directory / "adapter_model.safetensors"))
    (directory / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": str(base),
        "r": RANK, "lora_alpha": ALPHA, "lora_dropout": 0.0, "bias": "none",
        "target_modules": list(TARGETS)}, indent=1))
    return directory
