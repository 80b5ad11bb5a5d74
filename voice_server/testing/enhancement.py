"""Judging a speech enhancer: speech and noise mixed at a chosen SNR, and how
close the enhancer's output came to the clean speech (SI-SDR)."""

from __future__ import annotations

import numpy as np


def si_sdr(ref: np.ndarray, est: np.ndarray) -> float:
    """Scale-invariant signal-to-distortion ratio, dB (higher: closer to ``ref``)."""
    n = min(ref.size, est.size)
    ref, est = ref[:n].astype(np.float64), est[:n].astype(np.float64)
    target = ref * (est @ ref) / (ref @ ref)
    return float(10 * np.log10((target @ target) / ((est - target) @ (est - target))))


def at_snr(speech: np.ndarray, noise: np.ndarray, snr_db: float) -> np.ndarray:
    """``speech`` with ``noise`` (repeated or cut to its length) ``snr_db`` below it."""
    noise = np.resize(noise, speech.size)
    scale = np.sqrt(np.mean(speech ** 2) / (np.mean(noise ** 2) * 10 ** (snr_db / 10)))
    return (speech + noise * scale).astype(np.float32)


__all__ = ["si_sdr", "at_snr"]
