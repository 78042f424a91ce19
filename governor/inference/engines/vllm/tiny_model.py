"""Write a tiny random Llama (config + trained BPE tokenizer) to a directory, with no Hub access.

vLLM serves it with ``load_format="dummy"`` (random weights), which is all the tests and the
CPU benchmark need: the engine, scheduler, tokenizer and chat template are real, the text is
noise. The shape is the smallest the CPU attention backend accepts (head_dim 64)::

    path = write_tiny_llama(Path("/tmp/tiny"))
    # AsyncEngineArgs(model=str(path), load_format="dummy", dtype="float32", ...)
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

# A minimal template in the usual shape: one block per message, then the assistant's cue.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
# Special tokens, in id order 0, 1, 2 (config.json's bos/eos ids match).
UNK, BOS, EOS = "<unk>", "<s>", "</s>"
VOCAB_SIZE = 2048
MAX_POSITION_EMBEDDINGS = 2048


def _corpus(seed: int) -> list[str]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 8))) for _ in range(800)]
    return [" ".join(rng.choice(words) for _ in range(30)) for _ in range(600)]


def write_tiny_llama(directory: Path, *, chat_template: bool = True, seed: int = 0) -> Path:
    """Write ``config.json`` and a tokenizer to ``directory`` (created) and return it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, PreTrainedTokenizerFast

    # transformers is typed in some releases and not in others; treat it as untyped everywhere.
    tokenizer_class: Any = PreTrainedTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[UNK, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(_corpus(seed), trainer)
    # Like Llama's tokenizers: encoding with special tokens puts BOS in front.
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, 1)]
    )
    fast = tokenizer_class(
        tokenizer_object=tokenizer, bos_token=BOS, eos_token=EOS, unk_token=UNK
    )
    fast.model_max_length = MAX_POSITION_EMBEDDINGS
    if chat_template:
        fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(directory))
    _portable_tokenizer_config(directory / "tokenizer_config.json", chat_template)
    LlamaConfig(
        architectures=["LlamaForCausalLM"],
        vocab_size=VOCAB_SIZE,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=MAX_POSITION_EMBEDDINGS,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    ).save_pretrained(str(directory))
    return directory


def _portable_tokenizer_config(path: Path, chat_template: bool) -> None:
    # transformers 5 writes ``tokenizer_class: TokenizersBackend`` and the template to a separate
    # ``chat_template.jinja``; older transformers (the GPU image's) know neither, while the classic
    # class name and an inline template load everywhere.
    config = json.loads(path.read_text())
    config.pop("backend", None)
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    if chat_template:
        config["chat_template"] = CHAT_TEMPLATE
    path.write_text(json.dumps(config, indent=1))
