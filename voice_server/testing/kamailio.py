"""Kamailio (Debian ``kamailio``) as the registrar and proxy a PBX or a trunk
would be, for the SIP tests: it keeps the registrations it is sent and
relays an INVITE for a registered address to the contact that registered
it.  One process per test, its config and run files in a temporary folder,
stopped on exit; nothing outside 127.0.0.1.

By default it takes every REGISTER as it comes.  With ``password`` it is a
registrar that asks, as a PBX does: every REGISTER without valid digest
credentials for that password (any user name, realm = the To domain) gets
401 with a ``qop="auth"`` challenge, and the log says what it checked
(``REGISTER challenged``, ``REGISTER authorized <user> <Authorization>``,
``REGISTER refused <code>``), so a test can read what our side sent.
``max_expires`` shortens the interval it grants (the registrar's answer,
not our request, decides when a refresh is due)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

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
loadmodule "xlog.so"
{auth_module}
modparam("usrloc", "db_mode", 0)
modparam("registrar", "min_expires", 0)
modparam("registrar", "max_expires", {max_expires})
request_route {{
    if (!mf_process_maxfwd_header("10")) {{ sl_send_reply("483", "Too Many Hops"); exit; }}
    if (is_method("REGISTER")) {{
{auth}
        save("location"); exit;
    }}
    if (has_totag() && loose_route()) {{ t_relay(); exit; }}
    if (is_method("CANCEL")) {{ if (t_check_trans()) {{ t_relay(); }} exit; }}
    if (!lookup("location")) {{ sl_send_reply("404", "Not Found"); exit; }}
    if (is_method("ACK")) {{ forward(); exit; }}
    t_relay();
}}
"""
# the auth module checks the answer against a password written here: no database.
# The password goes into a double-quoted script string, so it must not hold a quote.
AUTH = """        if (!is_present_hf("Authorization")) {{
            xlog("L_NOTICE", "REGISTER challenged\\n");
            www_challenge("$td", "1"); exit;
        }}
        if (!pv_www_authenticate("$td", "{password}", "0")) {{
            xlog("L_NOTICE", "REGISTER refused $rc\\n");
            www_challenge("$td", "1"); exit;
        }}
        xlog("L_NOTICE", "REGISTER authorized $au $hdr(Authorization)\\n");"""


@dataclass
class Kamailio:
    process: subprocess.Popen
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def kamailio_available() -> bool:
    return shutil.which("kamailio") is not None and MODULES.is_dir()


@contextlib.contextmanager
def kamailio(port: int, password: Optional[str] = None,
             max_expires: int = 0) -> Iterator[Kamailio]:
    """A running registrar/proxy on 127.0.0.1:``port`` (UDP); module docstring
    for ``password`` and ``max_expires`` (0: grants what is asked)."""
    if password is not None and ('"' in password or "\\" in password or "\n" in password):
        raise ValueError("the test registrar's password cannot hold quotes or backslashes")
    with tempfile.TemporaryDirectory(prefix="kamailio-") as d:
        cfg = Path(d) / "kamailio.cfg"
        cfg.write_text(CONFIG.format(
            port=port, modules=MODULES, max_expires=int(max_expires),
            auth_module='loadmodule "auth.so"' if password is not None else "",
            auth=AUTH.format(password=password) if password is not None else ""))
        log_path = Path(d) / "kamailio.log"
        log = open(log_path, "w")
        p = subprocess.Popen(["kamailio", "-f", str(cfg), "-DD", "-E", "-Y", d,
                              "-P", str(Path(d) / "kamailio.pid"), "-m", "32", "-M", "8"],
                             stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            # (its sockets are bound before it says so: a REGISTER sent now waits in them)
            while "listening on" not in log_path.read_text().lower() and \
                    p.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if p.poll() is not None:
                raise RuntimeError("kamailio did not start: " + log_path.read_text()[-2000:])
            yield Kamailio(p, log_path)
        finally:
            p.terminate()
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            log.close()


__all__ = ["Kamailio", "kamailio", "kamailio_available"]
