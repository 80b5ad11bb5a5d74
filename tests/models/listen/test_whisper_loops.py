"""Whisper's repetition loops are cut; real repetition at a human rate is not."""

from runtime.models.listen.whisper_loops import cut_loop


def test_a_loop_is_cut_where_the_sentence_starts_over():
    # seen on flite's "how do i reset my password" in a 10 s window (1.7 s of speech)
    assert cut_loop("How do I reset my password? How do i reset my pass word? How", 2.0) == \
        "How do I reset my password?"
    assert cut_loop("Tell me a son fact about cats Tell me if son fact About cats Tell Me a son",
                    2.2) == "Tell me a son fact about cats"


def test_repetition_a_person_could_say_in_that_time_stays():
    assert cut_loop("what is the capital and what is the population", 2.5) == \
        "what is the capital and what is the population"
    assert cut_loop("no no no", 0.4) == "no no no"          # too few words to judge
    assert cut_loop("Yeah. Yeah.", 0.3) == "Yeah. Yeah."


def test_many_words_without_a_loop_stay():
    text = "one two three four five six seven eight nine ten eleven twelve"
    assert cut_loop(text, 1.0) == text
