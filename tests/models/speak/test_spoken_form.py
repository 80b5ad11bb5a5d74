"""The text-normalisation table: what the voice is given for what the LLM wrote."""

from __future__ import annotations

import pytest

from runtime.executor import WorkItem
from runtime.models.speak.executor import SpeakExecutor
from runtime.models.speak.spoken_form import spoken_form

CASES = [
    # money
    ("Your total is $1,250.75.", "Your total is one thousand two hundred fifty dollars and seventy-five cents."),
    ("It costs $5.", "It costs five dollars."),
    ("That's $1.", "That's one dollar."),
    ("We raised $3.2 billion.", "We raised three point two billion dollars."),
    ("Only €20 or £3.50.", "Only twenty euros or three pounds and fifty pence."),
    # times
    ("See you at 5:30 pm.", "See you at five thirty p m."),
    ("Open at 9am today.", "Open at nine a m today."),
    ("Meet at 17:05.", "Meet at seventeen oh five."),
    ("Lunch is at 12:00.", "Lunch is at twelve o'clock."),
    ("Opens at 9.30 am and 930am.", "Opens at nine thirty a m and nine thirty a m."),
    # phone numbers
    ("Call 555-0142.", "Call five five five, zero one four two."),
    ("Call (555) 123-4567 today.", "Call five five five, one two three, four five six seven today."),
    # ordinals and dates
    ("It's on the 3rd floor.", "It's on the third floor."),
    ("He came 21st.", "He came twenty-first."),
    ("On March 5th, 2024.", "On March fifth, twenty twenty-four."),
    ("On Jan. 15 we met.", "On January fifteenth we met."),
    ("Due 2024-03-15.", "Due March fifteenth, twenty twenty-four."),
    ("Due 3/15/2024.", "Due March fifteenth, twenty twenty-four."),
    ("In 1999 and 2005.", "In nineteen ninety-nine and two thousand five."),
    ("The 1990s were fun.", "The nineteen nineties were fun."),
    # abbreviations
    ("Dr. Nguyen from Acme Corp. will call.", "Doctor Nguyen from Acme Corporation will call."),
    ("He lives on Main St. in St. Louis.", "He lives on Main Street in Saint Louis."),
    ("Mr. and Mrs. Smith, Jr.", "Mister and Missus Smith, Junior."),
    ("Fruit, e.g. apples.", "Fruit, for example apples."),
    ("Room No. 5", "Room number five"),
    ("The answer is No.", "The answer is No."),
    # e-mail addresses and URLs
    ("Write to help@acme.com today.", "Write to help at acme dot com today."),
    ("Visit https://www.example.com/help for more.", "Visit example dot com slash help for more."),
    ("Go to acme.io.", "Go to acme dot io."),
    # units, percent, fractions, ranges, plain numbers
    ("It is 20 km away.", "It is twenty kilometers away."),
    ("It weighs 1 kg.", "It weighs one kilogram."),
    ("Set it to 72°F.", "Set it to seventy-two degrees Fahrenheit."),
    ("About 50% off.", "About fifty percent off."),
    ("Add 1/2 cup.", "Add one half cup."),
    ("Read pages 2-3.", "Read pages two to three."),
    ("I have 1250 apples and 3 pears.", "I have one thousand two hundred fifty apples and three pears."),
    ("It's 3.14 exactly.", "It's three point one four exactly."),
    ("It is -5 outside.", "It is minus five outside."),
    ("Tom & Jerry", "Tom and Jerry"),
    # nothing to do
    ("Paris is the capital of France.", "Paris is the capital of France."),
]


@pytest.mark.parametrize("written,spoken", CASES)
def test_spoken_form(written, spoken):
    assert spoken_form(written) == spoken


def test_markdown_and_emoji_never_reach_the_voice(monkeypatch):
    """The executor strips markdown, writes numbers as words and drops emoji; the
    chunk's text stays what the LLM wrote (it is the transcript)."""
    ex = SpeakExecutor(engine="flite")
    ex.load()
    heard: list[str] = []
    real = ex.synth.synthesize
    monkeypatch.setattr(ex.synth, "synthesize", lambda text, speed=1.0: heard.append(text) or real(text, speed))
    ex.open(1, {})
    [out] = ex.process([WorkItem(1, "**Great** news \U0001F600 at Acme Corp. It's $5 at 5pm!", {},
                                 final=True)])
    while ex.has_results():
        out += [c for _, chunks in ex.collect() for c in chunks]
    ex.release(1)
    assert heard == ["Great news at Acme Corporation.", "It's five dollars at five p m!"]
    assert [c["text"] for c in out] == ["**Great** news \U0001F600 at Acme Corp.", "It's $5 at 5pm!"]
