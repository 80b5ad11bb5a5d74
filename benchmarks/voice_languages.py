"""The speak side of the language benchmark: per language, the voice a reply
gets when the client names none, heard back by Whisper base (round-trip WER;
characters for Japanese) and rated by DNSMOS (speechmos, as in tts_bench.py).

All speech here is synthetic (the voices under test); no recordings of people
in these languages ship with the project.  ``benchmarks/language_bench.py``
writes the listen and think keys of the same file; this module adds its keys
to each language's entry there and leaves the others as they are::

    python -m benchmarks.voice_languages --quick       # benchmarks/results/languages.json
    python -m benchmarks.voice_languages --every-voice # and every voice of each language (*: its own)
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

from voice_server.testing.report import merge_languages

RESULTS = Path("benchmarks/results/languages.json")   # shared with language_bench.py

# Sentences a voice agent says, with numbers where the language's words matter.
SENTENCES: dict[str, list[str]] = {
    "en": ["Your table for four is booked for seven thirty tonight.",
           "The parcel left our warehouse this morning and arrives on Thursday.",
           "Is there anything else I can help you with today?"],
    "es": ["Su mesa para cuatro está reservada para esta noche.",
           "El paquete salió del almacén esta mañana y llega el jueves.",
           "¿Hay algo más en lo que pueda ayudarle hoy?"],
    "de": ["Ihr Tisch für vier Personen ist für heute Abend reserviert.",
           "Das Paket hat heute Morgen unser Lager verlassen.",
           "Kann ich Ihnen sonst noch helfen?"],
    "fr": ["Votre table pour quatre personnes est réservée pour ce soir.",
           "Le colis a quitté notre entrepôt ce matin.",
           "Puis-je vous aider avec autre chose aujourd'hui ?"],
    "it": ["Il vostro tavolo per quattro è prenotato per stasera.",
           "Il pacco ha lasciato il magazzino questa mattina.",
           "Posso aiutarla con qualcos'altro oggi?"],
    "pt": ["A sua mesa para quatro está reservada para esta noite.",
           "A encomenda saiu do armazém esta manhã.",
           "Posso ajudá-lo com mais alguma coisa hoje?"],
    "ja": ["今夜七時半に四名様でご予約を承りました。",
           "お荷物は今朝倉庫を出発し、木曜日に届きます。",
           "ほかに何かお手伝いできることはありますか。"],
}
QUICK = 1            # sentences per language with --quick


def _speak(ex, rid: int, text: str, language: str,
           voice: str | None = None) -> tuple[np.ndarray, int, str, float]:
    """The whole reply's audio, its rate, the engine that spoke it, and the CPU it took."""
    from runtime.executor import WorkItem
    from runtime.models.voice_contract import SPEAK_LANGUAGE, SPEAK_VOICE
    before = dict(ex.stats()["clauses_by_engine"])
    cpu = time.process_time()
    ex.open(rid, {SPEAK_LANGUAGE: language, SPEAK_VOICE: voice})
    [chunks] = ex.process([WorkItem(rid, text, {}, final=True)])
    while ex.pending(rid):
        for _, more in ex.collect():
            chunks += more
    ex.release(rid)
    cpu = time.process_time() - cpu
    after = ex.stats()["clauses_by_engine"]
    engine = next(e for e, n in after.items() if n > before.get(e, 0))
    return np.concatenate([c["audio"] for c in chunks]), chunks[0]["sample_rate"], engine, cpu


def voice_rows(languages: list[str] | None = None, quick: bool = False,
               every_voice: bool = False) -> dict[str, dict]:
    """Per language: ``voice``, ``voice_engine``, ``voice_wer`` (round trip;
    ``voice_wer_phone`` the same through an 8 kHz mu-law line; CER
    for ja), ``voice_dnsmos`` (overall), ``voice_cpu_per_audio_s``; with
    ``every_voice``, ``voices``: the same figures for each of the language's
    shipped voices, one sentence of each in turn (so a busy spell of the
    machine falls on all of them)."""
    from runtime.models.listen.whisper_asr import WhisperASR
    from runtime.models.speak.executor import SpeakExecutor
    from runtime.models.speak.voices import languages as voices_of, resolve_voice

    languages = languages or list(SENTENCES)
    chosen = {lang: resolve_voice(None, "hibari", language=lang) for lang in languages}
    candidates = {lang: [v.name for v in voices_of().get(lang, [])] if every_voice else [chosen[lang]]
                  for lang in languages}
    # every voice loaded first, so the CPU figure is speaking, not loading
    ex = SpeakExecutor(engine="hibari", threads=1,
                       preload_voices=[v for names in candidates.values() for v in names])
    ex.load()
    out: dict[str, dict] = {}
    rid = 0
    for lang in languages:
        asr = WhisperASR(model="base", language=lang)
        runs = {name: _Run() for name in candidates[lang]}
        for text in SENTENCES[lang][:QUICK if quick else None]:
            for name, run in runs.items():
                rid += 1
                run.add(text, *_speak(ex, rid, text, lang, name), asr)
        out[lang] = {"voice": chosen[lang], **runs[chosen[lang]].figures(lang, "voice_"),
                     "voice_note": "synthetic speech (the voice under test), Whisper base"}
        if every_voice:
            out[lang]["voices"] = {name: run.figures(lang) for name, run in runs.items()}
    ex.close()
    return out


class _Run:
    """One voice's sentences: what Whisper heard (wide band, and as a phone
    caller gets it: 8 kHz G.711 mu-law), DNSMOS, CPU and audio seconds."""

    def __init__(self) -> None:
        self.pairs: list[tuple[str, str]] = []
        self.phone_pairs: list[tuple[str, str]] = []
        self.mos: list[float] = []
        self.cpu = self.audio_s = 0.0
        self.engine = ""

    def add(self, text: str, audio: np.ndarray, rate: int, engine: str, cpu: float, asr) -> None:
        import soxr
        from speechmos import dnsmos

        from voice_server.testing.speech_corpus import phone_line

        x16 = soxr.resample(audio.astype(np.float32) / 32768, rate, 16000)
        phone = soxr.resample(phone_line(x16).astype(np.float32) / 32768, 8000, 16000)
        wide, narrow = asr.transcribe([x16, phone])
        self.pairs.append((text, wide))
        self.phone_pairs.append((text, narrow))
        self.mos.append(dnsmos.run(np.clip(x16, -1, 1), 16000)["ovrl_mos"])
        self.cpu += cpu
        self.audio_s += audio.size / rate
        self.engine = engine

    def figures(self, lang: str, prefix: str = "") -> dict:
        from voice_server.testing.language_wer import language_wer

        return {f"{prefix}engine": self.engine,
                f"{prefix}wer": round(language_wer(self.pairs, lang), 3),
                f"{prefix}wer_phone": round(language_wer(self.phone_pairs, lang), 3),
                f"{prefix}dnsmos": round(statistics.mean(self.mos), 2),
                f"{prefix}cpu_per_audio_s": round(self.cpu / max(self.audio_s, 1e-9), 3),
                f"{prefix}heard": self.pairs}


def _unprefixed(row: dict) -> dict:
    return {k[len("voice_"):]: v for k, v in row.items() if k.startswith("voice_")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"{QUICK} sentence per language")
    ap.add_argument("--languages", default=",".join(SENTENCES))
    ap.add_argument("--every-voice", action="store_true",
                    help="also measure each shipped voice of each language, side by side")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = voice_rows(args.languages.split(","), quick=args.quick, every_voice=args.every_voice)
    for lang, r in rows.items():
        for name, f in (r.get("voices") or {r["voice"]: _unprefixed(r)}).items():
            mark = "*" if name == r["voice"] else " "
            print(f"{lang} {mark}{name:>14} ({f['engine']:<6})  WER {f['wer'] * 100:5.1f}%  "
                  f"phone {f['wer_phone'] * 100:5.1f}%  DNSMOS {f['dnsmos']:.2f}  "
                  f"CPU/audio s {f['cpu_per_audio_s']:.3f}")
    merge_languages(args.out, rows, "speak", {   # language_bench's keys stay
        "speech": "synthetic: each language's voice, read back by Whisper base",
        "sentences_per_language": 1 if args.quick else max(map(len, SENTENCES.values())),
        "quick": bool(args.quick), "seconds": round(time.perf_counter() - t0, 1)})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
