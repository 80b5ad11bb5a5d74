"""A pipeline YAML with a greedy thinker, for tests and benchmarks that judge
what the model says: sampled at the shipped temperature the small default
model's reply to one prompt changes from run to run; greedy, it is always the
same, so a check measures the server, not a draw."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def greedy_config(folder: Path, base: Path = ROOT / "configs" / "voice-cpu-fast.yaml") -> Path:
    """``base`` with the think stage's temperature 0, written into ``folder``."""
    data = yaml.safe_load(Path(base).read_text())
    [think] = [s for s in data["stages"] if s["name"] == "think"]
    think["args"]["temperature"] = 0.0
    path = Path(folder) / (Path(base).stem + "-greedy.yaml")
    path.write_text(yaml.safe_dump(data))
    return path
