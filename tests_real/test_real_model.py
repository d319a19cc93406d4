"""The tiny model maker: the same seed gives the same checkpoint and tokenizer, and the tokenizer renders chats."""

from __future__ import annotations

import json

import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer

from testsupport.real.model import END, TINY_LLAMA, make_model


def test_same_seed_same_folder_other_seed_other_weights(tmp_path, tiny_model):
    again = make_model(tmp_path / "again", seed=0)
    other = make_model(tmp_path / "other", seed=1)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert (again / name).read_text() == (tiny_model / name).read_text(), name
    w0, w1, w2 = (load_file(str(f / "model.safetensors")) for f in (tiny_model, again, other))
    assert w0.keys() == w1.keys() and all(torch.equal(w0[k], w1[k]) for k in w0)
    assert not torch.equal(w0["model.embed_tokens.weight"], w2["model.embed_tokens.weight"])
    config = json.loads((tiny_model / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert {k: config[k] for k in TINY_LLAMA} == dict(TINY_LLAMA)
    assert w0["model.embed_tokens.weight"].dtype == torch.bfloat16


def test_tokenizer_has_the_vocabulary_and_renders_a_chat(tiny_model):
    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    assert len(tok) == TINY_LLAMA["vocab_size"] and tok.eos_token == END
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text == f"<|user|>\nhi{END}\n<|assistant|>\n"
    ids = tok("Hello server 42")["input_ids"]
    assert tok.decode(ids) == "Hello server 42"  # byte-level: round trip
