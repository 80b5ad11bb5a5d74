"""A local OTLP/HTTP traces endpoint that accepts every export and counts it.

For benchmarks that turn tracing on: the exporter then does all its real
work (encoding, HTTP posts) against 127.0.0.1, and the sink says how many
exports and bytes arrived.  It answers each ``POST /v1/traces`` with 200 and
an empty ``ExportTraceServiceResponse`` (zero protobuf bytes)::

    with OtlpSink() as sink:
        env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": sink.url}
        ...
        sink.posts, sink.bytes
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class OtlpSink:
    def __init__(self) -> None:
        self.posts = 0
        self.bytes = 0
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                n = int(self.headers.get("content-length") or 0)
                self.rfile.read(n)
                sink.posts += 1
                sink.bytes += n
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "OtlpSink":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


__all__ = ["OtlpSink"]
