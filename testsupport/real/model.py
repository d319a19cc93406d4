"""A tiny Llama checkpoint with a byte-level BPE tokenizer and a chat template, made on the spot.

Nothing is downloaded: the weights are random (seeded), the tokenizer is trained on text made here from a
fixed word list with a seeded generator, so the same seed gives the same folder, byte for byte in the
config and tokenizer and value for value in the weights. The output of a model like this is gibberish, but
SGLang loads it through its ordinary Llama path and it is repeatable at temperature 0.

    python -m testsupport.real.model DIR [--seed N]
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

ROLES = ("system", "user", "assistant")
END = "<|end|>"
BOS = "<|bos|>"
SPECIAL_TOKENS = (BOS, END, *(f"<|{r}|>" for r in ROLES))
# Jinja, as transformers' apply_chat_template and SGLang's chat endpoint render it.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}" + END + "\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
WORDS = (
    "the a an of to in on for with from by at as is are was be been has have had not but or and if then "
    "server client request stream token batch draft verify accept reject length speed latency profile "
    "switch drain health start stop restart commit rollback metric gauge counter histogram label value "
    "tensor parallel rank reduce gather scatter kernel graph capture memory cache page block layer head "
    "model weight bias norm attention decode prefill sample greedy temperature top seed random prompt "
    "hello world python function class return yield import from while for break continue lambda none "
    "one two three four five six seven eight nine ten hundred thousand zero first last next previous"
).split()


# The shape of the model, as LlamaConfig names it; SGLang 0.5.23 serves it as LlamaForCausalLM.
TINY_LLAMA: Mapping[str, int] = MappingProxyType({
    "vocab_size": 1024, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "max_position_embeddings": 2048,
})


def corpus(seed: int, lines: int = 4000) -> list[str]:
    """Sentences of WORDS, digits and punctuation, the same for the same seed."""
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 16))]
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), str(rng.randint(0, 9999)))
        out.append(" ".join(words).capitalize() + rng.choice(".?!,;:"))
    return out


def make_tokenizer(folder: Path, shape: Mapping[str, int], seed: int) -> None:
    """A byte-level BPE tokenizer of `shape["vocab_size"]` tokens, saved as transformers' fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=shape["vocab_size"],
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=END, pad_token=END)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)


def make_model(folder: str | Path, seed: int = 0, shape: Mapping[str, int] = TINY_LLAMA) -> Path:
    """Write the checkpoint (config, safetensors weights in bf16, generation config) and tokenizer."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    make_tokenizer(folder, shape, seed)
    vocab = json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"]
    bos, eos = vocab[BOS], vocab[END]
    config = LlamaConfig(
        **shape,
        bos_token_id=bos,
        eos_token_id=eos,
        pad_token_id=eos,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(folder, safe_serialization=True)
    GenerationConfig(bos_token_id=bos, eos_token_id=eos, pad_token_id=eos).save_pretrained(folder)
    return folder


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m testsupport.real.model", description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    print(make_model(args.folder, args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
