"""Schedulers: batch (encoder-like), ar (continuous batching), chunk (streaming)."""

from runtime.schedulers.ar import ARScheduler
from runtime.schedulers.batch import BatchScheduler
from runtime.schedulers.chunk import ChunkScheduler

SCHEDULERS = {"batch": BatchScheduler, "ar": ARScheduler, "chunk": ChunkScheduler}

__all__ = ["SCHEDULERS", "ARScheduler", "BatchScheduler", "ChunkScheduler"]
