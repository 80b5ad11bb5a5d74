"""The model names this server answers to: ``GET /v1/models`` and
``/v1/models/{model}``, and the check of a request's ``model``.

A name is the server's own (``settings.model``), the pipeline's, a stage's
model (its ``model`` arg or its ``model_path`` file name) or one of OpenAI's
speech aliases when there is a speak stage.  The speech aliases carry an
extension, ``voice_agent``: every shipped voice with its engine, language
and gender, OpenAI's voice names, and the voice a reply in each language
gets when the client names none (docs/CLIENTS.md).  Chat and speech both call
:func:`check_model`, so a name is known, or refused, the same way on every
endpoint.
"""

from __future__ import annotations

import os

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from runtime.models.speak.voices import (OPENAI_VOICES, catalogue, check_language_voices, languages,
                                         resolve_voice)
from runtime.models.voice_contract import SPEAK

from .context import ApiContext
from .errors import ApiError

SPEECH_ALIASES = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")


def voice_listing(engine: str, default: str | None = None,
                  language_voices: dict[str, str] | None = None) -> dict:
    """The ``voice_agent`` extension of a speech model: what a client may name
    in ``voice`` and which voice each language gets by default on a speak stage
    whose default is ``engine``'s ``default`` voice (and its operator's
    ``language_voices``)."""
    chosen = check_language_voices(language_voices)
    return {"voices": [{"name": v.name, "engine": v.engine, "language": v.language,
                        "gender": v.gender} for v in catalogue().values()],
            "openai_voices": list(OPENAI_VOICES),
            "languages": {lang: resolve_voice(None, engine, default, lang, chosen)
                          for lang in sorted(languages())}}


def model_ids(ctx: ApiContext) -> list[dict]:
    """Every model entry (OpenAI's shape), the first of each name kept."""
    p = ctx.pipeline
    own = str(ctx.setting("model"))
    ids: list[tuple[str, str]] = [(own, "voice-agent")]
    if p is not None:
        cfg = p.cfg
        ids.append((cfg.name, "voice-agent"))
        for s in cfg.stages:
            name = s.args.get("model") or (os.path.splitext(os.path.basename(str(s.args["model_path"])))[0]
                                           if s.args.get("model_path") else None)
            if name:
                ids.append((str(name), s.name))
        if any(s.name == SPEAK for s in cfg.stages):
            ids.extend((a, SPEAK) for a in SPEECH_ALIASES)
    seen: dict[str, dict] = {}
    for mid, owner in ids:
        seen.setdefault(mid, {"id": mid, "object": "model", "created": 0, "owned_by": owner})
    speak = next((s for s in cfg.stages if s.name == SPEAK), None) if p is not None else None
    if speak is not None:
        try:
            listing = voice_listing(str(speak.args.get("engine", "flite")), speak.args.get("voice"),
                                    speak.args.get("language_voices"))
        except ValueError:      # a speak stage that is not ours (another executor)
            listing = None
        for a in SPEECH_ALIASES:
            if listing and seen.get(a, {}).get("owned_by") == SPEAK:
                seen[a]["voice_agent"] = listing
    return list(seen.values())


def check_model(ctx: ApiContext, data: dict, stage: str) -> str:
    """The request's model name (the server's own when absent); a 404 for an
    unknown one, a 400 for one that belongs to a stage other than ``stage``."""
    model = data.get("model")
    if model is None:
        return str(ctx.setting("model"))
    if not isinstance(model, str):
        raise ApiError(400, "'model' must be a string", param="model", code="invalid_type")
    known = {m["id"]: m["owned_by"] for m in model_ids(ctx)}
    if model not in known:
        raise ApiError(404, f"the model {model!r} does not exist; see GET /v1/models",
                       "not_found_error", "model_not_found", "model")
    if known[model] not in ("voice-agent", stage):
        raise ApiError(400, f"the model {model!r} cannot serve this endpoint (it is a "
                            f"{known[model]!r} model)", param="model", code="model_not_supported")
    return model


async def list_models(ctx: ApiContext, request: Request) -> Response:
    """GET /v1/models."""
    ctx.check_auth(request)
    return JSONResponse({"object": "list", "data": model_ids(ctx)})


async def get_model(ctx: ApiContext, request: Request) -> Response:
    """GET /v1/models/{model}."""
    ctx.check_auth(request)
    mid = request.path_params["model"]
    for m in model_ids(ctx):
        if m["id"] == mid:
            return JSONResponse(m)
    raise ApiError(404, f"the model {mid!r} does not exist", "not_found_error", "model_not_found", "model")


__all__ = ["SPEECH_ALIASES", "model_ids", "check_model", "list_models", "get_model"]
