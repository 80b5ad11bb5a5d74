"""The llama.cpp thinker's step: one ``llama_decode`` for every running request.

The high-level ``llama_cpp.Llama`` runs one sequence at a time, so N
concurrent voice turns would each pay a full forward pass per token.  Here one
batch carries one token for each request that is decoding (plus prompt chunks
of newly admitted ones), and after the decode each sequence whose logits were
read gets its next token, decision or tool name.  A failed decode is rolled
back so that no sequence's books claim cells the cache may not hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runtime.errors import ErrorCode, StageError
from runtime.executor import StepResult
from runtime.models.think.llama_emit import ReplyEmitter
from runtime.models.think.llama_sequences import ReplyMode, Seq, SequencePool
from runtime.models.think.tool_call_decision import ToolCallDecision
from runtime.step_cost import StepCost


@dataclass
class _Fill:
    """One step's batch: ``n`` tokens; ``outputs``: (sequence, batch index) whose
    logits are read; ``fed``: (sequence, token) decoded one token each;
    ``chunked``: (sequence, prompt tokens taken)."""

    n: int = 0
    outputs: list[tuple[Seq, int]] = field(default_factory=list)
    fed: list[tuple[Seq, int]] = field(default_factory=list)
    chunked: list[tuple[Seq, int]] = field(default_factory=list)


class BatchStep:
    """Steps the sequences of one context (``ctx``), ``n_batch`` tokens a decode
    at most; owns the ``llama_batch`` (``close`` frees it)."""

    def __init__(self, lc: Any, ctx: Any, n_batch: int, pool: SequencePool,
                 decision: ToolCallDecision, emitter: ReplyEmitter) -> None:
        self._lc = lc
        self._ctx = ctx
        self._n_batch = n_batch
        self._pool = pool           # gives up the kept cells when the cache is full
        self._decision = decision
        self._emitter = emitter
        self._batch = lc.llama_batch_init(n_batch, 0, 1)
        # what the steps were, for stats()
        self.last_batch = 0                   # sequences whose logits the last step read
        self.last_tokens = 0                  # tokens the last step decoded
        self.hist: dict[int, int] = {}        # steps by sequences read
        # what steps cost, by kind: a step holding prompt tokens, or only one
        # token per decoding reply (the CPU budget per role, n_threads choice)
        self.cost = {kind: StepCost() for kind in ("prompt", "decode")}

    def close(self) -> None:
        if self._batch is not None:
            self._lc.llama_batch_free(self._batch)
            self._batch = None

    def decode_alone(self, ids: list[int], seq_id: int) -> bool:
        """Decode ``ids`` (at most ``n_batch``) into ``seq_id`` from position 0,
        outside any step (the prefix cache at load); False when it failed."""
        for i, tok in enumerate(ids):
            _put(self._batch, i, tok, i, seq_id, i == len(ids) - 1)
        self._batch.n_tokens = len(ids)
        return self._lc.llama_decode(self._ctx, self._batch) == 0

    def run(self, request_ids: list[int], seqs: dict[int, Seq]) -> dict[int, StepResult]:
        """One step of the requests ``request_ids`` (``seqs``: the running ones by
        request id): a result for each that has one, an error for a failed decode."""
        results: dict[int, Any] = {}
        fill = self._fill_batch(self._sort(request_ids, seqs, results))
        if fill.n == 0:
            return results
        cost = self.cost["prompt" if fill.chunked else "decode"]
        cost.start()
        if self._decode_or_fail(fill, results):   # a failed step costs nothing in the books
            self._advance(fill, results)
            cost.stop(fill.n)
        return results

    @staticmethod
    def _sort(request_ids: list[int], seqs: dict[int, Seq],
              results: dict[int, Any]) -> tuple[list[Seq], list[Seq]]:
        """The sequences that decode a token and those that still read their
        prompt; the rest get their result at once."""
        decoding: list[Seq] = []
        prefilling: list[Seq] = []
        for rid in request_ids:
            seq = seqs.get(rid)
            if seq is None:
                results[rid] = StageError(ErrorCode.INTERNAL, f"request {rid} was not prefilled")
            elif seq.finished:
                results[rid] = StepResult(None, True)
            elif seq.prompt:
                prefilling.append(seq)
            else:
                decoding.append(seq)
        return decoding, prefilling

    def _fill_batch(self, sorted_seqs: tuple[list[Seq], list[Seq]]) -> _Fill:
        """Running requests go first: a new long prompt must not stall their
        stream; prompts take what room is left, a chunk at a time."""
        decoding, prefilling = sorted_seqs
        fill = _Fill()
        for seq in decoding:
            if fill.n >= self._n_batch:
                break
            fill.fed.append((seq, seq.pending))
            _put(self._batch, fill.n, seq.pending, seq.pos, seq.seq_id, True)
            seq.pos += 1
            fill.outputs.append((seq, fill.n))
            fill.n += 1
        for seq in prefilling:
            take = min(len(seq.prompt), self._n_batch - fill.n)
            if take <= 0:
                break
            last = take == len(seq.prompt) and not seq.prefill_only
            for j, tok in enumerate(seq.prompt[:take]):
                _put(self._batch, fill.n, tok, seq.pos + j, seq.seq_id, last and j == take - 1)
                fill.n += 1
            fill.chunked.append((seq, take))
            if last:
                fill.outputs.append((seq, fill.n - 1))
        return fill

    def _decode_or_fail(self, fill: _Fill, results: dict[int, Any]) -> bool:
        """Run the batch; on failure every request in it gets the error and its
        sequence is rolled back (False)."""
        self._batch.n_tokens = fill.n
        rc = self._lc.llama_decode(self._ctx, self._batch)
        if rc == 1 and self._pool.drop_kept():  # no room: give up what finished sequences kept
            rc = self._lc.llama_decode(self._ctx, self._batch)
        if rc == 0:
            return True
        for seq, _ in fill.outputs:
            if seq.pending is not None and not seq.prompt:
                seq.pos -= 1
        for seq, _ in fill.fed + fill.chunked:
            seq.kv = None  # what the failed decode left in the cells is unknown
        code = ErrorCode.RESOURCE_EXHAUSTED if rc == 1 else ErrorCode.INTERNAL
        err = f"llama_decode returned {rc}" + (" (KV cache full)" if rc == 1 else "")
        for seq, _ in fill.outputs + fill.chunked:
            results[seq.rid] = StageError(code, err)
        return False

    def _advance(self, fill: _Fill, results: dict[int, Any]) -> None:
        """After a decode: the books (positions, cached tokens, batch sizes),
        then each sequence's next token, decision or tool name."""
        for seq, take in fill.chunked:
            seq.pos += take
            if seq.kv is not None:
                seq.kv.extend(seq.prompt[:take])
            del seq.prompt[:take]
            if seq.prefill_only and not seq.prompt:
                seq.finished = True
                results[seq.rid] = StepResult(None, True)
        for seq, tok in fill.fed:
            if seq.kv is not None:
                seq.kv.append(tok)
        self.last_tokens = fill.n
        self.last_batch = len(fill.outputs)
        self.hist[len(fill.outputs)] = self.hist.get(len(fill.outputs), 0) + 1
        for seq, idx in fill.outputs:
            result = self._next(seq, idx)
            if result is not None:
                results[seq.rid] = result

    def _next(self, seq: Seq, idx: int) -> StepResult | None:
        """What ``seq`` makes of its logits at batch index ``idx`` (None: nothing yet)."""
        if seq.mode == ReplyMode.DECIDE:
            return self._decision.decide(seq, idx)
        if seq.mode == ReplyMode.PROBE:
            return self._decision.read_name(seq, idx)
        return self._emitter.emit(seq, self._lc.llama_sampler_sample(seq.sampler, self._ctx, idx))


def _put(batch: Any, i: int, token: int, pos: int, seq_id: int, logits: bool) -> None:
    batch.token[i] = token
    batch.pos[i] = pos
    batch.n_seq_id[i] = 1
    batch.seq_id[i][0] = seq_id
    batch.logits[i] = 1 if logits else 0
