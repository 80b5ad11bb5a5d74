"""With no network at all, the server speaks with its neural voice.

hibari downloads voices it does not have on first use; the speak stage must
never let it.  The check runs the real server (configs/voice-cpu-fast.yaml) in a
network namespace of its own that has only a loopback interface
(``unshare --net``), with an empty hibari cache (HIBARI_HOME): a spoken reply
must arrive as 24 kHz audio, and asking for a voice that is not installed
must be an error event, not a download that hangs or fails the session.

Run as a script, this file is the check itself (what the namespace runs).
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.requirements import missing
from voice_server.testing.response_status import answered

ROOT = Path(__file__).resolve().parents[2]


def _need_unshare() -> None:
    """``unshare`` (util-linux) and ``ip`` (iproute2, the Makefile's APT_PACKAGES),
    and the right to make a network namespace (root, as `make test` runs)."""
    for tool in ("unshare", "ip"):
        if not shutil.which(tool):
            missing(f"{tool} (Debian util-linux / iproute2)")
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        missing(f"unshare --net is not permitted here: {probe.stderr.strip()}")


@pytest.mark.timeout(240)
def test_server_speaks_with_no_network():
    _need_unshare()
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "HIBARI_HOME": home, "PYTHONPATH": str(ROOT)}
        cmd = f"ip link set lo up && exec {sys.executable} {Path(__file__)}"
        out = subprocess.run(["unshare", "--net", "sh", "-c", cmd], env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=220)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        assert "OFFLINE VOICE OK" in out.stdout, out.stdout[-3000:]
        assert not os.listdir(home), "something was written to the voice cache"


async def _check() -> None:
    from voice_server.settings import ServerSettings
    from voice_server.testing import TEST_API_KEY, ServerThread
    from voice_server.testing.realtime_client import RTClient

    # no interface but loopback: a download attempt could only fail
    names = [name for _, name in socket.if_nameindex()]
    assert names == ["lo"], names
    settings = ServerSettings(api_keys=[TEST_API_KEY], max_output_tokens=24)
    srv = ServerThread(str(ROOT / "configs" / "voice-cpu-fast.yaml"), settings).start()
    try:
        c = await RTClient.connect(srv.url)
        try:
            await c.wait("session.created")
            await c.send({"type": "session.update", "session": {
                "type": "realtime", "audio": {"output": {"voice": "fenrir"}}}})
            err = await c.wait("error")
            assert err["error"]["param"] == "session.audio.output.voice", err
            await c.send({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "Say hello."}]}})
            await c.send({"type": "response.create"})
            done = await c.wait("response.done", timeout=60)
            assert answered(done["response"]), done
            pcm = b"".join(base64.b64decode(e["delta"])
                           for e in c.of_type("response.output_audio.delta"))
            assert len(pcm) > 2 * 24000 * 0.3, len(pcm)
            print(f"OFFLINE VOICE OK: {len(pcm) / 48000:.2f} s of 24 kHz audio")
        finally:
            await c.close()
    finally:
        srv.stop()


if __name__ == "__main__":
    asyncio.run(_check())
