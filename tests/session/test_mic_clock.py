"""The microphone's capture clock (voice_server.session.mic_clock): late
pieces keep their place, a pause in sending starts the stream again."""

from voice_server.session.mic_clock import MicClock


def test_late_pieces_are_placed_by_position():
    c = MicClock()
    assert c.stamp(20, 1020.0) == 1020.0          # 20 ms of audio, 1000 ms of path
    assert c.stamp(20, 1040.0) == 1040.0
    # a stalled loop: three pieces arrive together, 40 ms late
    assert [c.stamp(20, 1100.0) for _ in range(3)] == [1060.0, 1080.0, 1100.0]
    assert c.stamp(20, 1125.0) == 1120.0          # 5 ms late: the path stays


def test_a_faster_path_takes_over_and_a_pause_in_sending_restarts():
    c = MicClock(gap_ms=400.0)
    c.stamp(20, 1020.0)
    assert c.stamp(20, 1030.0) == 1030.0          # quicker than before: never in the future
    assert c.stamp(20, 1050.0) == 1050.0
    # the client stopped sending for 3 s (a muted track): its next piece is now
    assert c.stamp(20, 4070.0) == 4070.0
    assert c.stamp(20, 4090.0) == 4090.0


def test_an_old_quick_delay_is_forgotten():
    c = MicClock(window_ms=2000.0, gap_ms=400.0)
    c.stamp(20, 20.0)
    for k in range(2, 200):                        # 200 ms later from now on: not a gap yet
        t = c.stamp(20, 20.0 * k + 200.0)
    assert t == 20.0 * 199 + 200.0                # after the window, the new delay is the path
