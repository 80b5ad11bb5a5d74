"""TransformersThinker through its real loading path, on a tiny model built here.

The model is random (its words mean nothing); what is tested is the executor:
loading from disk, streaming, per-request caches, release mid-way and
concurrency.
"""

from __future__ import annotations

import pytest

from runtime.executor import StepResult, WorkItem
from runtime.models.think.transformers_thinker import TransformersThinker
from voice_server.testing.tiny_lm import write_tiny_qwen2

@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    import torch
    from transformers import AutoModelForCausalLM

    d = write_tiny_qwen2(tmp_path_factory.mktemp("tiny_qwen2"))
    n_params = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).parameters())
    assert 5e6 < n_params < 15e6
    return d


@pytest.fixture(scope="module")
def thinker(tiny_model_dir):
    t = TransformersThinker(model_path=tiny_model_dir, local_files_only=True, n_threads=2,
                            max_tokens=12, temperature=0.8, seed=1, max_context=256)
    t.load()
    yield t
    t.close()


def _item(rid, text, **params):
    return WorkItem(rid, {"messages": [{"role": "user", "content": text}]}, params=params)


def _run(t, rids, limit=200):
    texts = {r: "" for r in rids}
    done: set[int] = set()
    for _ in range(limit):
        live = [r for r in rids if r not in done]
        if not live:
            break
        res = t.step(live)
        for r, sr in res.items():
            assert isinstance(sr, StepResult), sr
            if sr.chunk is not None:
                assert isinstance(sr.chunk, str)
                texts[r] += sr.chunk
            if sr.finished:
                done.add(r)
                t.release(r)
    assert done == set(rids)
    return texts


def _stream(t, rid) -> tuple[list[str], int]:
    """(text deltas, steps) of one request run to its end."""
    chunks, steps = [], 0
    while True:
        sr = t.step([rid])[rid]
        steps += 1
        if sr.chunk:
            chunks.append(sr.chunk)
        if sr.finished:
            break
    t.release(rid)
    return chunks, steps


def _assert_whole_characters(chunks: list[str]) -> None:
    """A character split across tokens is held back until complete: no delta but the
    last (the end of generation) may end in U+FFFD, the mark of an incomplete one."""
    assert all(isinstance(c, str) and c for c in chunks), chunks
    assert not [c for c in chunks[:-1] if c.endswith("\ufffd")], chunks


def test_streams_tokens(thinker):
    thinker.prefill(_item(1, "Hello, how are you?"))
    chunks, steps = _stream(thinker, 1)
    assert 1 <= steps <= 12
    assert len(chunks) >= 2, chunks  # streamed, not one block at the end
    _assert_whole_characters(chunks)
    assert thinker.stats()["active"] == 0


def test_release_midway_then_next_request(thinker):
    thinker.prefill(_item(2, "Tell me a long story"))
    for _ in range(3):
        assert not thinker.step([2])[2].finished
    thinker.release(2)
    assert thinker.stats()["kv_cells_used"] == 0
    thinker.prefill(_item(3, "Paris?"))
    assert _run(thinker, [3])[3], "the next request generated nothing"
    assert thinker.stats()["active"] == 0


def test_four_concurrent_requests_finish(thinker):
    rids = [10, 11, 12, 13]
    for r in rids:
        thinker.prefill(_item(r, f"Question number {r}", max_tokens=6 + r % 3))
    _run(thinker, rids)
    assert thinker.stats()["batch_sizes_hist"].get(4, 0) >= 6
    assert thinker.stats()["active"] == 0


def test_overlong_prompt_is_truncated(thinker):
    thinker.prefill(_item(20, "word " * 5000))
    assert thinker.stats()["truncated"] is True
    _run(thinker, [20])


def test_emoji_only(thinker):
    thinker.prefill(_item(21, "\U0001f600\U0001f680\U0001f44d"))
    chunks, _ = _stream(thinker, 21)
    _assert_whole_characters(chunks)


def test_usage_ends_the_reply_when_asked(thinker):
    """include_usage: the last chunk ends with the usage event (the prompt's
    tokens, none cached, the tokens generated); not asked, text only."""
    thinker.prefill(WorkItem(40, {"messages": [{"role": "user", "content": "hello"}],
                                  "include_usage": True}))
    chunks, steps = [], 0
    while True:
        sr = thinker.step([40])[40]
        steps += 1
        chunks.append(sr.chunk)
        if sr.finished:
            break
    thinker.release(40)
    last = chunks[-1]
    assert isinstance(last, list) and last[-1]["type"] == "usage", last
    usage = last[-1]
    assert usage["cached_tokens"] == 0 and usage["output_tokens"] == steps
    assert usage["input_tokens"] > 3
    assert usage["finish_reason"] == ("length" if steps == thinker.defaults.max_tokens else "stop")
    assert all(c is None or isinstance(c, str) for c in chunks[:-1])
    thinker.prefill(_item(41, "hello"))
    assert all(isinstance(c, str) for c in _run(thinker, [41]).values())
