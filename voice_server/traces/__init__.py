"""OpenTelemetry traces of each turn (:mod:`.turn_traces`), exported over
OTLP when an endpoint is configured (:mod:`.settings`); off otherwise, and
then the SDK is never imported."""
