"""The HTTP API's route table, for the app: ``http_routes(pipeline, settings)``.

Every endpoint is a function of the shared :class:`.context.ApiContext` and
the request; :func:`_endpoint` binds it to one context and is the one place
an exception becomes a response: an :class:`.errors.ApiError` its status and
body, a client gone before the answer a 499, anything else a logged 500 (an
unexpected bug is still a proper status).
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from runtime.errors import ErrorCode

from . import chat, health, models, speech
from .context import ApiContext
from .errors import ApiError

log = logging.getLogger(__name__)

Handler = Callable[[ApiContext, Request], Awaitable[Response]]


def _endpoint(handler: Handler, ctx: ApiContext) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            return await handler(ctx, request)
        except ApiError as e:
            return e.response()
        except ClientDisconnect:
            return Response(status_code=499)
        except Exception as e:  # noqa: BLE001 - an unexpected bug is still a proper status
            log.exception("HTTP endpoint %s failed", request.url.path)
            return ApiError(500, f"internal error: {type(e).__name__}: {e}", "server_error",
                            ErrorCode.INTERNAL.value).response()
    return endpoint


def http_routes(pipeline: Any, settings: Any = None) -> list[Route]:
    """GET /health, /health/ready, /health/live, GET /v1/models[/{model}], POST /v1/audio/speech,
    POST /v1/chat/completions.  ``pipeline`` and ``settings``: see :mod:`.context`."""
    ctx = ApiContext(pipeline, settings)
    return [
        Route("/health", _endpoint(health.health, ctx), methods=["GET"]),
        Route("/health/ready", _endpoint(health.ready, ctx), methods=["GET"]),
        Route("/health/live", _endpoint(health.live, ctx), methods=["GET"]),
        Route("/v1/models", _endpoint(models.list_models, ctx), methods=["GET"]),
        Route("/v1/models/{model:path}", _endpoint(models.get_model, ctx), methods=["GET"]),
        Route("/v1/audio/speech", _endpoint(speech.speech, ctx), methods=["POST"]),
        Route("/v1/chat/completions", _endpoint(chat.chat_completions, ctx), methods=["POST"]),
    ]


__all__ = ["http_routes"]
