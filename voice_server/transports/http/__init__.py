"""The plain HTTP endpoints on the pipeline: health, the model list, OpenAI's
speech and chat completions.

* :mod:`.routes` - ``http_routes(pipeline, settings)``, every route, for the
  app, and the one place an exception becomes a response;
* :mod:`.context` - what every endpoint shares: the pipeline, the settings
  and the checks at the edge (key and Origin, body, stages ready, deadline);
* :mod:`.errors` - ``ApiError`` and the runtime error -> HTTP status mapping;
* :mod:`.turn` - one runtime request: the wait for its first event, abort;
* :mod:`.streaming` - SSE framing and the response that hears a disconnect;
* :mod:`.health` - ``/health``, ``/health/ready``, ``/health/live``;
* :mod:`.models` - ``/v1/models[/{model}]`` and the check of ``model``;
* :mod:`.speech` - ``POST /v1/audio/speech``;
* :mod:`.chat` - ``POST /v1/chat/completions`` (with tools).

Error rules (docs/CONCEPTS.md, "Errors"): before the first byte an error is a
real HTTP status (:mod:`.errors`, :mod:`.turn`); after it, what
:mod:`.streaming` says.
"""
