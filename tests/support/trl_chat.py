"""A tiny chat policy for TRL's GRPOTrainer on the CPU, offline: a one-layer Llama and a tokenizer of
single characters (every printable ASCII one) plus Qwen3's chat tokens, built in code, so a
conversational dataset and Qwen3's tool-calling format (``<tool_call>`` JSON) both work; and a
``rollout_func`` whose first turn is always a tool call, so TRL runs its real tool loop (it calls the
tool, appends the result and lets the model go on) with a model too small to call a tool by itself."""

from __future__ import annotations

import json
import string
from typing import Any

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CHAT_TOKENS = ("<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<think>", "</think>",
               "<tool_response>", "</tool_response>")
SIMPLE_TEMPLATE = "{% for m in messages %}{{ m['content'] }} {% endfor %}"


def chat_policy(chat_template: str = SIMPLE_TEMPLATE) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    torch.manual_seed(0)
    chars = sorted(set(string.printable) - set("\x0b\x0c\r"))
    vocab = {"<pad>": 0, **{c: i + 1 for i, c in enumerate(chars)}}
    vocab.update({t: len(vocab) + i for i, t in enumerate(CHAT_TOKENS)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens([AddedToken(t, special=t in CHAT_TOKENS[:2], normalized=False) for t in CHAT_TOKENS])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<|im_end|>")
    tokenizer.chat_template = chat_template
    end = vocab["<|im_end|>"]
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4096,
                         pad_token_id=0, eos_token_id=end, bos_token_id=end)
    return LlamaForCausalLM(config), tokenizer


def get_weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: the city's name
    """
    return f"sunny and warm in {city}"


def calling_rollout(tokenizer: PreTrainedTokenizerFast, arguments: dict[str, Any]) -> Any:
    """A ``rollout_func`` whose completion is a call of get_weather with ``arguments``, in Qwen3's format."""
    call = f'<tool_call>\n{json.dumps({"name": "get_weather", "arguments": arguments})}\n</tool_call><|im_end|>'
    ids = tokenizer(call, add_special_tokens=False)["input_ids"]

    def rollout(prompts: list, trainer: Any) -> dict:
        prompt_ids = [tokenizer.apply_chat_template(p, tools=[get_weather], add_generation_prompt=True,
                                                    tokenize=True, return_dict=False) for p in prompts]
        return {"prompt_ids": prompt_ids, "completion_ids": [list(ids) for _ in prompts], "logprobs": None}
    return rollout
