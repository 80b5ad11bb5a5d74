"""Languages other than English (issue 42): how well the listen stage tells
which language a caller speaks, how well Whisper base hears it, and how often
the brain answers in it.

    python -m benchmarks.language_bench [--out FILE] [--quick] [--languages es,de]
    python -m benchmarks.language_bench --people-only --languages es,fr,it --out FILE

Per language (en, es, de, fr, it, pt, ja), into ``{"languages": {"es": {...}}}``
(default benchmarks/results/languages.json):

* ``detect_acc``: ``{"1s", "2s", "4s"}``, the share of utterances of that
  length whose language Whisper base's language head names first among the
  multilingual profile's ``asr_languages`` (what the listen stage detects
  with; ``detect_acc_all_languages``: among all 99; runtime/models/listen/language.py locks only on
  utterances of 1.5 s and more, so the 1 s figure is why short ones do not
  count), over both synthetic speakers below; ``detect_acc_by_voice`` per
  speaker; and ``lock``: the share the lock rule would have locked, and how
  many wrongly (a wrong lock is worse than none);
* ``wer``: Whisper base's word error rate transcribing espeak-ng's sentences
  with the language pinned (Japanese: the error rate over the characters of
  both sides' kana readings; voice_server/testing/language_wer.py), against
  the text the voice was given; ``wer_by_voice`` for both speakers;
* ``answer_lang_acc``: the share of everyday questions, asked in the language
  with the session's system text (the think stage's own prompt, then
  "The caller speaks Spanish. Answer in Spanish."; voice_server/session/prompt.py),
  that the 1.5B (configs/voice-cpu.yaml's think stage) answers in that
  language after the agent greeted in English (the harder case: the
  history pulls toward English), by ``langdetect`` (PyPI, Apache-2.0: Google's language-detection
  port); ``answer_lang_acc_no_line`` the same without the line.
* ``first_audio_ms``: a served multilingual profile's first audio from the
  true end of a spoken question, p50 per condition, English's beside it in
  the same run (and Spanish in Kokoro's ``kumo-es``, what it costs against
  the profile's espeak-ng).

THE SPEECH IS SYNTHETIC (but for the people's keys below), from two
speakers a language: espeak-ng's formant voice at 130 words a minute (its
Japanese voice reads kana; kanji are written as kana here), and
the language's neural voice, the one a reply in it gets (hibari's heart,
Kokoro's jf_alpha, and for es/fr/it/pt/de Kokoro's Japanese kumo reading
eSpeak NG's phonemes, with an accent).  Detection and WER are upper bounds
for clean, evenly paced speech and lower ones for these voices' accents.  The
speak side's keys (round-trip WER, DNSMOS of each language's voice) are added
by benchmarks of the speak stage into the same file.

PEOPLE, for Spanish, French and Italian only: two speakers a language read
Asterisk's telephone prompts (8 kHz; voice_server/testing/asterisk_prompts.py;
``make bench-data`` installs the six Debian packages, ``make setup`` does not;
without them the bench says so in one line and goes on).  Per speaker and
cut, :data:`PEOPLE_UTTERANCES` prompts with at least the cut's length of
speech, drawn with a fixed seed, cut by the same ``utterances()`` and
detected by the same Whisper base: ``detect_acc_people`` (pooled over both
speakers), ``detect_acc_people_by_speaker``,
``detect_acc_people_all_languages``, ``lock_people`` (what the lock rule
makes of them, as ``lock``), ``people_speakers``, ``people_utterances`` and
``people_long_enough`` (per speaker and cut, how many prompts had the
cut's length of speech).  ``--people-only`` runs just that part (~3 min).
No package has sentences of people in German, Portuguese or Japanese.
"""

from __future__ import annotations

import argparse
import random
import re
import subprocess
import tempfile
import time
import wave
from pathlib import Path

import numpy as np
import soxr
import yaml

from voice_server.testing.language_wer import language_wer
from voice_server.testing.report import merge_languages

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "languages.json"
SR = 16000
LANGS = ("en", "es", "de", "fr", "it", "pt", "ja")
DURATIONS = (1.0, 2.0, 4.0)
# People's recordings: prompts per speaker and cut, and the seed that draws them.
PEOPLE_UTTERANCES = 20
PEOPLE_SEED = 0

# Sentences the voices read (a caller's everyday requests), per language.
SENTENCES = {
    "en": ["I would like to know what time the store opens tomorrow morning.",
           "Can you tell me how much it costs to send a parcel to my sister?",
           "My train was cancelled and I need to change my ticket for Friday.",
           "Please book a table for four people at eight o'clock tonight.",
           "The heating in my apartment has not worked since last weekend."],
    "es": ["Quisiera saber a qué hora abre la tienda mañana por la mañana.",
           "¿Me puede decir cuánto cuesta enviar un paquete a mi hermana?",
           "Mi tren fue cancelado y necesito cambiar mi billete para el viernes.",
           "Por favor, reserve una mesa para cuatro personas a las ocho de la noche.",
           "La calefacción de mi piso no funciona desde el fin de semana pasado."],
    "de": ["Ich möchte wissen, wann das Geschäft morgen früh öffnet.",
           "Können Sie mir sagen, wie viel es kostet, ein Paket an meine Schwester zu schicken?",
           "Mein Zug wurde gestrichen und ich muss meine Fahrkarte für Freitag ändern.",
           "Bitte reservieren Sie einen Tisch für vier Personen heute Abend um acht Uhr.",
           "Die Heizung in meiner Wohnung funktioniert seit dem letzten Wochenende nicht."],
    "fr": ["Je voudrais savoir à quelle heure le magasin ouvre demain matin.",
           "Pouvez-vous me dire combien coûte l'envoi d'un colis à ma sœur ?",
           "Mon train a été annulé et je dois changer mon billet pour vendredi.",
           "Réservez une table pour quatre personnes à huit heures ce soir, s'il vous plaît.",
           "Le chauffage de mon appartement ne marche plus depuis le week-end dernier."],
    "it": ["Vorrei sapere a che ora apre il negozio domani mattina.",
           "Mi può dire quanto costa spedire un pacco a mia sorella?",
           "Il mio treno è stato cancellato e devo cambiare il biglietto per venerdì.",
           "Per favore, prenoti un tavolo per quattro persone alle otto di stasera.",
           "Il riscaldamento del mio appartamento non funziona dallo scorso fine settimana."],
    "pt": ["Gostaria de saber a que horas a loja abre amanhã de manhã.",
           "Pode me dizer quanto custa enviar um pacote para a minha irmã?",
           "O meu comboio foi cancelado e preciso de mudar o bilhete para sexta-feira.",
           "Por favor, reserve uma mesa para quatro pessoas às oito horas da noite.",
           "O aquecimento do meu apartamento não funciona desde o fim de semana passado."],
    "ja": ["あした の あさ、 みせ は なんじ に あきます か。",
           "いもうと に こづつみ を おくる と いくら かかります か。",
           "でんしゃ が うんきゅう に なった ので、 きんようび の きっぷ を かえたい です。",
           "こんばん はちじ に よにん で せき を よやく して ください。",
           "せんしゅうまつ から へや の だんぼう が うごきません。"],
}

# Everyday questions a caller asks, per language (the brain's answers are judged).
QUESTIONS = {
    "en": ["What is a good way to fall asleep faster?", "How do I boil an egg?",
           "What should I pack for a weekend at the beach?", "Why is the sky blue?",
           "How can I save money on groceries?", "What is the capital of Canada?",
           "How long should I walk every day?", "What can I cook with rice and eggs?"],
    "es": ["¿Cuál es una buena manera de dormirse más rápido?", "¿Cómo se cuece un huevo?",
           "¿Qué debo llevar para un fin de semana en la playa?", "¿Por qué el cielo es azul?",
           "¿Cómo puedo ahorrar dinero en la compra?", "¿Cuál es la capital de Canadá?",
           "¿Cuánto tiempo debo caminar cada día?", "¿Qué puedo cocinar con arroz y huevos?"],
    "de": ["Wie kann ich schneller einschlafen?", "Wie koche ich ein Ei?",
           "Was sollte ich für ein Wochenende am Strand einpacken?", "Warum ist der Himmel blau?",
           "Wie kann ich beim Einkaufen Geld sparen?", "Was ist die Hauptstadt von Kanada?",
           "Wie lange sollte ich jeden Tag spazieren gehen?",
           "Was kann ich mit Reis und Eiern kochen?"],
    "fr": ["Comment puis-je m'endormir plus vite ?", "Comment faire cuire un œuf ?",
           "Que dois-je emporter pour un week-end à la plage ?", "Pourquoi le ciel est-il bleu ?",
           "Comment économiser de l'argent sur les courses ?", "Quelle est la capitale du Canada ?",
           "Combien de temps dois-je marcher chaque jour ?",
           "Que puis-je cuisiner avec du riz et des œufs ?"],
    "it": ["Come posso addormentarmi più in fretta?", "Come si cuoce un uovo sodo?",
           "Cosa devo portare per un fine settimana al mare?", "Perché il cielo è azzurro?",
           "Come posso risparmiare sulla spesa?", "Qual è la capitale del Canada?",
           "Quanto dovrei camminare ogni giorno?", "Cosa posso cucinare con riso e uova?"],
    "pt": ["Como posso adormecer mais depressa?", "Como se coze um ovo?",
           "O que devo levar para um fim de semana na praia?", "Porque é que o céu é azul?",
           "Como posso poupar dinheiro nas compras?", "Qual é a capital do Canadá?",
           "Quanto tempo devo caminhar todos os dias?", "O que posso cozinhar com arroz e ovos?"],
    "ja": ["早く眠るにはどうすればいいですか？", "ゆで卵はどうやって作りますか？",
           "週末に海へ行くとき、何を持っていけばいいですか？", "空はなぜ青いのですか？",
           "食費を節約するにはどうすればいいですか？", "カナダの首都はどこですか？",
           "毎日どのくらい歩けばいいですか？", "ご飯と卵で何が作れますか？"],
}


# espeak-ng's default pace (175 words a minute, no gap between words) is
# faster than callers speak, and Whisper base heard it poorly: Spanish at the
# default, 1 of 3 sentences detected as Thai and one read as no speech; at
# 130 wpm with a 30 ms word gap all three Spanish and the words mostly right.
ESPEAK_PACE = ("-s", "130", "-g", "3")

# The agent spoke first, in English (a greeting set by an operator who did not
# know the caller's language): what the brain answers after it is the test.
GREETING = "Hello! Thanks for calling. How can I help you today?"


def espeak(text: str, lang: str, tmp: Path) -> np.ndarray:
    """espeak-ng's voice of ``lang`` reading ``text``, 16 kHz float32 (synthetic speech)."""
    out = tmp / "say.wav"
    subprocess.run(["espeak-ng", "-v", lang, *ESPEAK_PACE, "-w", str(out), text], check=True,
                   capture_output=True)
    with wave.open(str(out)) as w:
        rate = w.getframerate()
        x = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float32) / 32768
    return soxr.resample(x, rate, SR).astype(np.float32)


def _voiced(x: np.ndarray) -> np.ndarray:
    """The audio from its first to its last loud 10 ms."""
    win = x[: x.size // 160 * 160].reshape(-1, 160)
    loud = np.flatnonzero(np.sqrt((win ** 2).mean(axis=1)) > 0.01)
    return x[loud[0] * 160:(loud[-1] + 1) * 160] if loud.size else x


def utterances(audio: list[np.ndarray], seconds: float, n: int) -> list[np.ndarray]:
    """``n`` stretches of ``seconds`` of speech, each from the start of a
    sentence's words (as a caller's utterance starts), with the listen
    stage's lead-in (0.3 s) and pause (0.2 s) of silence around it."""
    out = []
    gap = np.zeros(int(0.15 * SR), np.float32)
    for k in range(n):
        # sentences run on (a short gap between them) for the longer stretches
        x = np.concatenate([part for j in range(len(audio))
                            for part in (_voiced(audio[(k + j) % len(audio)]), gap)])
        cut = x[: int(seconds * SR)]
        out.append(np.concatenate([np.zeros(int(0.3 * SR), np.float32), cut,
                                   np.zeros(int(0.2 * SR), np.float32)]))
    return out


def served_languages() -> list[str]:
    """The languages the multilingual profile's detection picks among."""
    config = yaml.safe_load((ROOT / "configs" / "voice-cpu-multilingual.yaml").read_text())
    return next(s for s in config["stages"] if s["name"] == "listen")["args"]["asr_languages"]


def neural_voice(lang: str) -> tuple[str, object]:
    """The language's own shipped voice, the one a reply in it gets (hibari's
    heart, Kokoro's jf_alpha, Kokoro's kumo-es... from eSpeak NG's phonemes):
    its name and synthesiser."""
    from runtime.models.speak.executor import make_synthesizer
    from runtime.models.speak.voices import catalogue, resolve_voice

    v = catalogue()[resolve_voice(None, "hibari", language=lang)]
    return v.name, make_synthesizer(v.engine, v.engine_voice, threads=2, language=v.language)


def speech_of(synth, text: str) -> np.ndarray:
    pcm = synth.synthesize(text)
    return soxr.resample(pcm.astype(np.float32) / 32768, synth.sample_rate, SR).astype(np.float32)


def detectors() -> tuple[object, object]:
    """Whisper base as the multilingual profile's listen stage detects with
    (among its ``asr_languages``), and the same among all 99 languages."""
    from runtime.models.listen.whisper_asr import WhisperASR

    asr = WhisperASR("base", threads=2, window_s=10, beam_size=5, no_repeat_ngram_size=3,
                     alt_prompt="", languages=served_languages())
    every = WhisperASR("base", threads=2, window_s=10, alt_prompt="")     # all 99 languages
    return asr, every


def lock_outcome(found: list[tuple[str, float]], lang: str, secs: float) -> dict:
    """What the shipped lock rule makes of utterances of ``secs`` heard as
    ``found``: it locks only on long and sure enough ones (a wrong lock is
    worse than none)."""
    from runtime.models.listen.language import LOCK_MIN_S, LOCK_P

    locks = [g for g, p in found if secs >= LOCK_MIN_S and p >= LOCK_P]
    return {"locked": round(len(locks) / len(found), 3),
            "wrong": sum(g != lang for g in locks),
            "heard": sorted((g, round(p, 2)) for g, p in found)}


def hearing(langs: list[str], n_utt: int, n_sent: int, tmp: Path) -> dict:
    """Detection per utterance length over two synthetic speakers of each
    language (espeak-ng's formant voice and the language's neural voice),
    pooled and per speaker; WER per speaker (``wer``: espeak-ng's, as before)."""
    asr, every = detectors()
    out = {}
    for lang in langs:
        texts = SENTENCES[lang][:max(n_sent, n_utt)]
        name, synth = neural_voice(lang)
        speakers = {"espeak-ng": [espeak(t, lang, tmp) for t in texts],
                    name: [speech_of(synth, t) for t in texts]}
        acc, acc_all, lock_ok, by_voice, wer_by_voice = {}, {}, {}, {}, {}
        for secs in DURATIONS:
            key = f"{secs:g}s"
            found, hits_all = [], 0
            for voice, audio in speakers.items():
                utts = utterances(audio, secs, n_utt)
                mine = asr.detect(utts)
                found += mine
                hits_all += sum(g == lang for g, _ in every.detect(utts))
                by_voice.setdefault(voice, {})[key] = round(sum(g == lang for g, _ in mine) / len(mine), 3)
            acc[key] = round(sum(g == lang for g, _ in found) / len(found), 3)
            acc_all[key] = round(hits_all / len(found), 3)
            lock_ok[key] = lock_outcome(found, lang, secs)
        t0 = time.perf_counter()
        for voice, audio in speakers.items():
            heard = asr.hear(audio[:n_sent], [lang] * n_sent)
            pairs = list(zip(SENTENCES[lang][:n_sent], [h.text for h in heard]))
            wer_by_voice[voice] = {"wer": round(language_wer(pairs, lang), 3), "samples": pairs[:2]}
        out[lang] = {"detect_acc": acc, "detect_acc_by_voice": by_voice,
                     "detect_acc_all_languages": acc_all, "lock": lock_ok,
                     "wer": wer_by_voice["espeak-ng"]["wer"],
                     "wer_by_voice": {v: w["wer"] for v, w in wer_by_voice.items()},
                     "wer_unit": "characters" if lang == "ja" else "words",
                     "asr_s_per_sentence": round((time.perf_counter() - t0) / (2 * n_sent), 2),
                     "samples": wer_by_voice["espeak-ng"]["samples"]}
        print(lang, out[lang]["detect_acc"], by_voice, "wer", out[lang]["wer_by_voice"], flush=True)
    return out


def long_enough(audio: list[np.ndarray], secs: float, n: int,
                rng: random.Random) -> tuple[list[np.ndarray], int]:
    """``n`` recordings drawn by ``rng`` from those with at least ``secs`` of
    speech (so that ``utterances()`` cuts each from one prompt, as a caller's
    utterance is one), topped up with the longest others where too few are;
    and how many had that much."""
    spans = [_voiced(x).size / SR for x in audio]
    long_ = [i for i, s in enumerate(spans) if s >= secs]
    if len(long_) >= n:
        chosen = rng.sample(long_, n)
    else:
        rest = sorted((i for i in range(len(audio)) if spans[i] < secs), key=lambda i: -spans[i])
        chosen = long_ + rest[: n - len(long_)]
        rng.shuffle(chosen)
    return [audio[i] for i in chosen], len(long_)


def people_hearing(langs: list[str], n_utt: int) -> dict:
    """Detection per utterance length on recordings of people (Spanish,
    French, Italian: two speakers each), pooled and per speaker, with what
    the lock rule makes of them; {} with one line said when the packages
    are not installed."""
    from voice_server.testing.asterisk_prompts import missing_packages, speaker_clips, speakers_of

    langs = [lang for lang in langs if speakers_of(lang)]
    missing = missing_packages([s for lang in langs for s in speakers_of(lang)])
    if not langs or missing:
        if missing:
            print("people's recordings not installed (make bench-data: " + " ".join(missing)
                  + "): no people's rows", flush=True)
        return {}
    asr, every = detectors()
    out = {}
    for lang in langs:
        found: dict[str, list] = {f"{secs:g}s": [] for secs in DURATIONS}
        hits_all = dict.fromkeys(found, 0)
        by_speaker, pool = {}, {}
        for speaker in speakers_of(lang):
            audio = [c.audio for c in speaker_clips(speaker)]
            rng = random.Random(PEOPLE_SEED)    # one per speaker: the same draw in any run
            for secs in DURATIONS:
                key = f"{secs:g}s"
                chosen, n_long = long_enough(audio, secs, n_utt, rng)
                utts = utterances(chosen, secs, n_utt)
                mine = asr.detect(utts)
                found[key] += mine
                hits_all[key] += sum(g == lang for g, _ in every.detect(utts))
                by_speaker.setdefault(speaker.name, {})[key] = \
                    round(sum(g == lang for g, _ in mine) / len(mine), 3)
                pool.setdefault(speaker.name, {})[key] = n_long
        out[lang] = {
            "detect_acc_people": {k: round(sum(g == lang for g, _ in f) / len(f), 3)
                                  for k, f in found.items()},
            "detect_acc_people_by_speaker": by_speaker,
            "detect_acc_people_all_languages": {k: round(hits_all[k] / len(f), 3)
                                                for k, f in found.items()},
            "lock_people": {f"{secs:g}s": lock_outcome(found[f"{secs:g}s"], lang, secs)
                            for secs in DURATIONS},
            "people_speakers": [s.name for s in speakers_of(lang)],
            "people_utterances": {k: len(f) for k, f in found.items()},
            "people_long_enough": pool}
        print(lang, "people", out[lang]["detect_acc_people"], by_speaker, flush=True)
    return out


def people_about(n_people: int, t0: float) -> dict:
    """How the people's rows were measured, for the results file."""
    from voice_server.testing.asterisk_prompts import SPEAKERS

    return {
        "speech": "people: Asterisk's telephone prompts from Debian packages, 8 kHz, "
                  "read by voice talents (voice_server/testing/asterisk_prompts.py)",
        "speakers": {s.name: {"language": s.language, "package": s.package} for s in SPEAKERS},
        "asr_model": "whisper base (CTranslate2 int8), its language head",
        "detect_among": served_languages(),
        "per_speaker_and_cut": n_people,
        "pick": f"prompts with at least the cut's length of speech, random.Random({PEOPLE_SEED}) "
                "per speaker, cut by utterances() (0.3 s lead-in, 0.2 s pause)",
        "seconds": round(time.perf_counter() - t0, 1)}


def detection_table(rows: dict[str, dict]) -> str:
    """Detection per language and length, the synthetic speakers' row and the
    people's (pooled, then each person), with the wrong locks at 2 s."""
    lines = [f"{'detect_acc':<24}{'1s':>7}{'2s':>7}{'4s':>7}  wrong locks, 2 s"]

    def line(label: str, acc: dict, lock: dict | None) -> str:
        wrong = f"{lock['wrong']} of {len(lock['heard'])}" if lock else ""
        cells = "".join(f"{acc[k]:>7.2f}" for k in ("1s", "2s", "4s"))
        return f"{label:<24}{cells}  {wrong}".rstrip()

    for lang, row in rows.items():
        if "detect_acc" in row:
            lines.append(line(f"{lang} synthetic", row["detect_acc"], row["lock"]["2s"]))
        if "detect_acc_people" in row:
            lines.append(line(f"{lang} people", row["detect_acc_people"],
                              row["lock_people"]["2s"]))
            for name, acc in row["detect_acc_people_by_speaker"].items():
                lines.append(line(f"  {name}", acc, None))
    return "\n".join(lines)


def answering(langs: list[str], n_q: int, no_line: bool) -> dict:
    from langdetect import DetectorFactory, detect

    from benchmarks.answer_bench import Asker
    from voice_server.session.prompt import SEPARATOR, language_line

    DetectorFactory.seed = 0
    config = yaml.safe_load((ROOT / "configs" / "voice-cpu.yaml").read_text())
    stage = next(s for s in config["stages"] if s["name"] == "think")
    args = {**stage["args"], "seed": 7, "max_sequences": 2, "n_ctx": 2048}
    own = args.pop("system_prompt", "")
    asker = Asker({**args, "system_prompt": own})
    out = {}
    try:
        for lang in langs:
            row = {}
            for key, line in (("answer_lang_acc", language_line(lang)),
                              ("answer_lang_acc_no_line", None)):
                if key.endswith("no_line") and (not no_line or lang == "en"):
                    continue
                system = own + SEPARATOR + line if line else own
                hits, samples = 0, []
                for q in QUESTIONS[lang][:n_q]:
                    # after the agent's English greeting: the history pulls toward English
                    text = asker.ask([{"role": "system", "content": system},
                                      {"role": "assistant", "content": GREETING},
                                      {"role": "user", "content": q}]).text.strip()
                    try:
                        said = detect(text) if text else "?"
                    except Exception:   # noqa: BLE001 - langdetect: no features in the text
                        said = "?"
                    said = "ja" if said in ("ja", "zh-cn", "zh-tw") and lang == "ja" and \
                        re.search(r"[\u3040-\u30ff]", text) else said
                    hits += said == lang
                    samples.append({"q": q, "a": text, "lang": said})
                row[key] = round(hits / max(1, n_q), 3)
                row[key.replace("acc", "samples")] = samples[:3]
            out[lang] = row
            print(lang, {k: v for k, v in row.items() if "samples" not in k}, flush=True)
    finally:
        asker.close()
    return out


# First audio per language on the multilingual profile: (condition, language,
# voice the client names or None for the language's own); alternated per round.
FIRST_AUDIO = (("en", "en", None), ("es", "es", None), ("es kumo-es", "es", "kumo-es"),
               ("ja", "ja", None))


def first_audio(rounds: int) -> dict:
    """First audio from the true end of speech (the end of the last frame the
    caller sent) on ``configs/voice-cpu-multilingual.yaml``, one spoken question
    per new session with its language pinned, the conditions alternated: what a
    caller of each language waits, against English in the same run, and what
    Kokoro's voice (``kumo-es``) costs against the profile's own Spanish voice
    (espeak-ng's) for the same question."""
    import asyncio
    import statistics

    from voice_server.testing.callers.base import RealtimeWSTransport
    from voice_server.testing.callers.caller import audio_delta, connected
    from voice_server.testing.server_process import served

    speech = {}
    for _, lang, _ in FIRST_AUDIO:
        if lang not in speech:
            _, synth = neural_voice(lang)
            x = speech_of(synth, QUESTIONS[lang][0])       # 16 kHz, then its voiced part at 24
            speech[lang] = np.round(soxr.resample(_voiced(x), SR, 24000) * 32767).astype(np.int16)

    async def turn(url: str, lang: str, voice: str | None) -> float:
        session = {"audio": {"input": {"transcription": {"model": "whisper-1", "language": lang}},
                             **({"output": {"voice": voice}} if voice else {})},
                   "max_output_tokens": 40}
        async with connected(RealtimeWSTransport(url, None), session=session) as c:
            n = len(c.events)
            _, end = c.say(speech[lang])
            t_end = await end
            _, ev = await c.wait(audio_delta, n, 90)
            await c.wait(lambda e: e["type"] == "response.done", n, 90)
            return (ev["_t"] - t_end) * 1000

    async def run() -> dict:
        got: dict[str, list[float]] = {name: [] for name, _, _ in FIRST_AUDIO}
        async with served(str(ROOT / "configs" / "voice-cpu-multilingual.yaml")) as server:
            await turn(server.url, "en", None)                  # warm-up, not counted
            for _ in range(rounds):
                for name, lang, voice in FIRST_AUDIO:
                    got[name].append(round(await turn(server.url, lang, voice)))
        return {name: {"p50": statistics.median(ms), "all": ms} for name, ms in got.items()}
    out = asyncio.run(run())
    for name, r in out.items():
        print(f"first audio {name:<14} p50 {r['p50']:6.0f} ms  {r['all']}", flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--quick", action="store_true", help="a few of each (a smoke run)")
    ap.add_argument("--languages", default=",".join(LANGS))
    ap.add_argument("--no-answers", action="store_true", help="skip the brain (no 1.5B here)")
    ap.add_argument("--first-audio-rounds", type=int, default=None,
                    help="spoken turns per condition on a served multilingual profile "
                         "(default 5, --quick 1; 0: skip)")
    ap.add_argument("--people-only", action="store_true",
                    help="only detection and locks on people's recordings (es, fr, it; "
                         "make bench-data): no synthetic speech, brain or first audio")
    args = ap.parse_args(argv)
    langs = [x for x in args.languages.split(",") if x]
    n_utt, n_sent, n_q = (2, 2, 2) if args.quick else (5, 5, 8)
    n_people = 2 if args.quick else PEOPLE_UTTERANCES
    t0 = time.perf_counter()
    if args.people_only:
        people = people_hearing(langs, n_people)
        if people:
            print(detection_table(people))
            merge_languages(args.out, people, "listen_people", people_about(n_people, t0))
            print(f"wrote {args.out} in {time.perf_counter() - t0:.1f} s")
        return
    with tempfile.TemporaryDirectory() as tmp:
        heard = hearing(langs, n_utt, n_sent, Path(tmp))
    people = people_hearing(langs, n_people)
    answers = {} if args.no_answers else answering(langs, n_q, no_line=True)
    rounds = args.first_audio_rounds if args.first_audio_rounds is not None else \
        (1 if args.quick else 5)
    waited = first_audio(rounds) if rounds else {}
    for lang in langs:
        mine = {name: r for name, r in waited.items() if name.split()[0] == lang}
        if mine:
            answers.setdefault(lang, {})["first_audio_ms"] = mine
    about = {
        "speech": "synthetic: espeak-ng's voice of each language and the language's neural "
                  "voice (hibari heart, Kokoro jf_alpha, Kokoro kumo-xx from eSpeak NG's "
                  "phonemes); the *_people keys: recordings of people (listen_people)",
        "asr_model": "whisper base (CTranslate2 int8), beam 5, 10 s window",
        "detect_among": served_languages(),
        "brain": "qwen2.5-coder-1.5b Q4_K_M (configs/voice-cpu.yaml), temperature 0.2, "
                 "answer language by langdetect",
        "per_language": {"utterances": n_utt, "sentences": n_sent, "questions": n_q},
        "first_audio": "configs/voice-cpu-multilingual.yaml served here, one spoken question "
                       "per new session, language pinned, conditions alternated; from the end "
                       "of the caller's last frame to the first audio delta; "
                       f"{rounds} per condition; English's in the same run",
        "quick": bool(args.quick), "seconds": round(time.perf_counter() - t0, 1)}
    rows = {lang: {**heard[lang], **people.get(lang, {}), **answers.get(lang, {})}
            for lang in langs}
    print(detection_table(rows))
    merge_languages(args.out, rows, "listen_think", about)   # the speak side's keys stay
    if people:
        merge_languages(args.out, {}, "listen_people", people_about(n_people, t0))
    print(f"wrote {args.out} in {about['seconds']} s")


if __name__ == "__main__":
    main()
