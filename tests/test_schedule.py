"""The run-time scheduler: speculate only while the measured round times say it pays (break-even formula)."""
import pytest

from exactspec.schedule import SpecScheduler, expected_tokens, time_per_token


def test_expected_tokens_and_formula():
    assert expected_tokens(0.0, 4) == 1.0 and expected_tokens(1.0, 4) == 5.0
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)
    # a round of 2 draft passes (0.1 each) + a verify of 1.2 emitting 1.75 tokens on average
    assert time_per_token(0.5, 2, 0.1, 1.2) == pytest.approx(1.4 / 1.75)


def feed(s, k, t_round, acc, n=30):
    for _ in range(n):
        s.observe(k, t_round, acc)


def test_turns_off_when_it_does_not_pay_and_on_when_it_does():
    s = SpecScheduler(4, adaptive=True)
    assert s.choose(4) == 0                       # calibrate plain decoding first
    feed(s, 0, 1.0, 0)
    assert s.choose(4) == 4                       # then one speculative round
    feed(s, 4, 2.0, 0)                            # nothing accepted: 2.0 per token > 1.0
    assert s.choose(4) == 0 and s.disabled_rounds == 1
    s2 = SpecScheduler(4, adaptive=True)
    feed(s2, 0, 1.0, 0)
    feed(s2, 4, 1.3, 4)                           # everything accepted: 1.3 / 5 per token
    assert s2.choose(4) == 4


def test_interpolates_unmeasured_k_and_reprobes():
    s = SpecScheduler(4, adaptive=True, probe_every=4)
    feed(s, 0, 1.0, 0)
    feed(s, 4, 3.0, 0)
    assert s.round_time(2) == pytest.approx(2.0)  # linear between T(0) and T(4)
    picks = [s.choose(4) for _ in range(8)]
    assert picks.count(1) == 2 and picks.count(0) == 6    # off, re-probing every 4th round with one proposal


def test_state_carries_over_to_the_next_answer():
    """A scheduler loaded with an earlier answer's state decides at once: no calibration round, no first probe."""
    s = SpecScheduler(4, adaptive=True)
    feed(s, 0, 1.0, 0)
    feed(s, 4, 3.0, 0)
    assert s.choose(4) == 0
    nxt = SpecScheduler(4, adaptive=True)
    nxt.load(s.state())
    assert nxt.choose(4) == 0 and nxt.round_time(4) == pytest.approx(3.0)
    fresh = SpecScheduler(4, adaptive=True)
    fresh.load(None)
    assert fresh.choose(4) == 0 and fresh.choose(4) == 0 and fresh.t_round == {}   # (calibrates first)
    small = SpecScheduler(2, adaptive=True)
    small.load(s.state())                      # round times of k above its k_max are dropped
    assert sorted(small.t_round) == [0]
    timings = SpecScheduler(4, adaptive=True)
    timings.load(s.state(), accept=False)      # timings only: the first choice is a speculative round, to measure
    assert timings.round_time(4) == pytest.approx(3.0) and timings.accept.value is None and timings.choose(4) == 4


def test_not_adaptive_always_k_max():
    s = SpecScheduler(3, adaptive=False)
    feed(s, 0, 1.0, 0)
    feed(s, 3, 9.0, 0)
    assert s.choose(5) == 3 and s.choose(2) == 2


def test_additive_schedule_moves_k_by_one_within_its_limit():
    from exactspec.schedule import SpecScheduler
    s = SpecScheduler(6, schedule="additive", k_start=3)
    assert s.choose(16) == 3
    s.observe(3, 0.1, 3)                 # all accepted: +1
    assert s.choose(16) == 4
    s.observe(4, 0.1, 2)                 # a rejection after the first proposal: unchanged
    assert s.choose(16) == 4
    s.observe(4, 0.1, 0)                 # the first proposal rejected: -1
    assert s.choose(16) == 3
    for _ in range(10):
        s.observe(s.choose(16), 0.1, s.choose(16))
    assert s.choose(16) == 6             # the device's limit
    assert s.choose(2) == 2              # a round near the end is capped
    s.observe(2, 0.1, 2)                 # fully accepted but shorter than k_cur: no change
    assert s.choose(16) == 6
    for _ in range(10):
        s.observe(s.choose(16), 0.1, 0)
    assert s.choose(16) == 1             # never below 1
    fixed = SpecScheduler(4)
    fixed.observe(4, 0.1, 4)
    assert fixed.choose(16) == 4
    import pytest
    with pytest.raises(ValueError, match="schedule"):
        SpecScheduler(4, schedule="grow")
