"""What the think stage is asked with: the system text and the part of the
conversation that fits its context.  Part of :class:`voice_server.session.Session`
(core.py), split out by section.

System text: a client's ``instructions`` (the session's, or a
``response.create``'s for that response) come after the think stage's own
system prompt, not instead of it: the server's prompt is what keeps replies
short and speakable, the client's says who the agent is and what it does.
Without instructions the session sends none and the stage's own prompt applies
unchanged (its decoded cells are shared by every turn).

Language: once the session's language is known and is not English (the
client's ``audio.input.transcription.language``, or the language the listen
stage locked on), a line between the stage's prompt and the client's
instructions asks for answers in it ("The caller speaks Spanish. Answer in
Spanish."); instructions that say otherwise come after it and win.  English
sessions, and sessions whose language is not known yet, are asked exactly as
before.  The first reply after the language locks or switches is asked anew
(a reply prepared in that turn's pause had the old system text).

History: the ``truncation`` setting (truncation.py) takes the oldest items out
of the model's context when the conversation outgrows it; which items are out
is kept from turn to turn, so a prompt changes at its head only when a cut is
made.  Prefills and prepared replies are asked with the same messages the
reply will be.
"""

from __future__ import annotations

import functools

from babel import Locale, UnknownLocaleError

from .items import chat_messages
from .truncation import ContextTooLong, drop_oldest, system_chars

SEPARATOR = "\n\n"


def language_line(language: str | None) -> str | None:
    """The system text's line asking for answers in ``language`` (None for
    English or an unknown language: nothing to ask)."""
    if not language or language == "en":
        return None
    name = language_name(language)
    return f"The caller speaks {name}. Answer in {name}."


@functools.lru_cache(maxsize=128)
def language_name(code: str) -> str:
    """The language's English name from CLDR (Babel); an unknown code is named as one."""
    try:
        return Locale.parse(code).get_display_name("en")
    except (ValueError, UnknownLocaleError):
        return f"the language whose ISO 639-1 code is {code!r}"


class Prompt:
    def _system_text(self, instructions: str | None) -> str | None:
        """The system message for ``instructions``: the stage's prompt, then
        them.  Without instructions None (the think stage puts its own prompt
        first), unless a ``system`` item of the client's would then come first
        and the stage take it for a prompt of the caller's instead of its own,
        or the conversation is empty (the agent speaks first: a request needs
        one message)."""
        own = self.settings.context.system_prompt
        line = language_line(self.language)
        if line:
            own = own + SEPARATOR + line if own else line
        if not instructions:
            items = self.conversation.items
            if own and (line or not items or any(it.role == "system" for it in items)):
                return own
            return None
        return own + SEPARATOR + instructions if own else instructions

    def _context_messages(self, system_text: str | None, max_tokens: int | None,
                          tools: list | None, pending: str = "", strict: bool = True
                          ) -> list[dict]:
        """The conversation's messages in the model's context: the oldest items
        leave (for good) when the rest does not fit the room the truncation
        setting leaves after ``system_text``, ``tools`` and a reply of
        ``max_tokens``; ``pending``: a user turn not yet an item (a prepared
        reply's words).  Under ``disabled`` it raises
        :class:`~voice_server.session.truncation.ContextTooLong` (``strict``;
        else all of it: a prefill is no answer, the reply's start says so)."""
        s = self.settings
        room = s.context.room(system_chars(system_text or s.context.system_prompt, tools),
                              max_tokens, bool(tools), s.truncation)
        items = self.conversation.items
        if room is not None:
            try:
                per_item = s.context.per_item_chars
                left = room - (len(pending) + per_item if pending else 0)
                self._out_of_context |= drop_oldest(items, self._out_of_context, max(left, 0),
                                                    s.truncation, per_item)
            except ContextTooLong:
                if strict:
                    raise
        if not self._out_of_context:
            return chat_messages(items)
        return chat_messages([it for it in items if it.id not in self._out_of_context])
