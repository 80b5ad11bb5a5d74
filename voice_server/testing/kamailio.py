"""Kamailio (Debian ``kamailio``) as the registrar and proxy a PBX or a trunk
would be, for the SIP tests: it keeps the registrations it is sent and
relays an INVITE for a registered address to the contact that registered
it.  One process per test, its config and run files in a temporary folder,
stopped on exit; nothing outside 127.0.0.1."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

MODULES = Path("/usr/lib/x86_64-linux-gnu/kamailio/modules")
# In-dialog requests with no Route header (SIPp's scripted ACK and BYE go to the
# request URI it dialled) are relayed by the location too, as the INVITE was.
CONFIG = """#!KAMAILIO
debug=1
log_stderror=yes
children=1
listen=udp:127.0.0.1:{port}
mpath="{modules}/"
loadmodule "tm.so"
loadmodule "sl.so"
loadmodule "rr.so"
loadmodule "pv.so"
loadmodule "maxfwd.so"
loadmodule "usrloc.so"
loadmodule "registrar.so"
loadmodule "siputils.so"
loadmodule "textops.so"
modparam("usrloc", "db_mode", 0)
request_route {{
    if (!mf_process_maxfwd_header("10")) {{ sl_send_reply("483", "Too Many Hops"); exit; }}
    if (is_method("REGISTER")) {{ save("location"); exit; }}
    if (has_totag() && loose_route()) {{ t_relay(); exit; }}
    if (is_method("CANCEL")) {{ if (t_check_trans()) {{ t_relay(); }} exit; }}
    if (!lookup("location")) {{ sl_send_reply("404", "Not Found"); exit; }}
    if (is_method("ACK")) {{ forward(); exit; }}
    t_relay();
}}
"""


def kamailio_available() -> bool:
    return shutil.which("kamailio") is not None and MODULES.is_dir()


@contextlib.contextmanager
def kamailio(port: int) -> Iterator[subprocess.Popen]:
    """A running registrar/proxy on 127.0.0.1:``port`` (UDP)."""
    with tempfile.TemporaryDirectory(prefix="kamailio-") as d:
        cfg = Path(d) / "kamailio.cfg"
        cfg.write_text(CONFIG.format(port=port, modules=MODULES))
        log = open(Path(d) / "kamailio.log", "w")
        p = subprocess.Popen(["kamailio", "-f", str(cfg), "-DD", "-E", "-Y", d,
                              "-P", str(Path(d) / "kamailio.pid"), "-m", "32", "-M", "8"],
                             stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while "listening on" not in (Path(d) / "kamailio.log").read_text() and \
                    p.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if p.poll() is not None:
                raise RuntimeError("kamailio did not start: "
                                   + (Path(d) / "kamailio.log").read_text()[-2000:])
            yield p
        finally:
            p.terminate()
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            log.close()


__all__ = ["kamailio", "kamailio_available"]
