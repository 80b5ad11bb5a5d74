"""Call records: each session's transcript, turn timings and (optionally) its
recording, kept in SQLite plus WAV files under one folder
(:mod:`.store`), written by a per-session :mod:`.recorder` that the runner
feeds, and served by ``GET /v1/calls`` (:mod:`voice_server.transports.calls_api`)."""
