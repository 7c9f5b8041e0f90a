"""The embedded models' caption tokenizer: a fixed word vocabulary whose id 0 is the padding."""

from __future__ import annotations

import re

import numpy as np

from teacache.errors import InputError

PAD = "<pad>"


def caption_words(text: str, token_ids: dict[str, int], model: str, text_len: int | None = None) -> list[str]:
    """The caption's words, lower-cased; a word outside the vocabulary (or the padding), or more words than the
    text encoder's ``text_len`` positions, is an InputError (a ValueError) naming it (so a prompt check refuses what the
    tokenizer would only refuse once the model runs)."""
    words = re.findall(r"[a-z<>]+", text.lower())
    for word in words:
        if word not in token_ids or word == PAD:
            vocabulary = ", ".join(w for w in token_ids if w != PAD)
            raise InputError(f"prompt: unknown word {word!r}; the {model} vocabulary is: {vocabulary}")
    if text_len is not None and len(words) > text_len:
        raise InputError(f"prompt: {len(words)} words, at most {text_len} fit the {model} text encoder: {text!r}")
    return words


def tokenize_caption(text: str, token_ids: dict[str, int], text_len: int, model: str) -> np.ndarray:
    """Caption -> ``text_len`` int32 ids, right-padded with 0 (``<pad>``); the empty caption is all padding."""
    ids = [token_ids[word] for word in caption_words(text, token_ids, model, text_len)]
    return np.array(ids + [0] * (text_len - len(ids)), dtype=np.int32)
