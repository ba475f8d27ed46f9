"""The sample an OpenRLHF trainer logs at each step in the tests: the text the tokenizer's decode
gives (the chat template's special tokens gone, its role lines kept; a text may hold a backslash-n of
its own) and its reward.  Shared by the writer subprocess and the test that checks what it wrote."""

from __future__ import annotations


def sample(step: int) -> str:
    return f"system\nYou are helpful.\nuser\nWhat is {step}+1? Answer in \\n-free text.\nassistant\n{step + 1}"


def reward(step: int) -> float:
    return 1.0 if step % 3 else -1.0 / 3
