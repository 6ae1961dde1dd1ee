"""Rule changes held behind DHCP answers (held.py): answers first, changes in the order decided,
and neither starves the other."""

from support import Clock

from homework_controller.edge.switch.held import ANSWER, SEND, HeldChanges, Wait


def serve(held: HeldChanges, clock: Clock, arrivals: list[float], answer_s: float, send_s: float, until: float):
    """Run the worker's turns: frames arriving at `arrivals`, each answer holding two changes."""
    log, waiting = [], sorted(arrivals)
    while clock.now < until:
        frames = [t for t in waiting if t <= clock.now]
        turn = held.next_turn(frames_waiting=bool(frames))
        if turn == ANSWER:
            waiting.remove(frames[0])
            held.answering()
            held.hold(("rule", frames[0]))
            held.hold(("meter", frames[0]))
            clock.now += answer_s
            log.append(("answer", frames[0], clock.now))
        elif turn == SEND:
            for change in held.take(held.per_turn):
                clock.now += send_s
                log.append(("sent", change, clock.now))
        elif isinstance(turn, Wait):
            clock.now += min(turn.seconds, 0.001)
        else:
            clock.now += 0.001  # idle
    return log


def test_a_storm_is_answered_before_any_of_its_rules_and_the_rules_follow_in_order():
    clock = Clock(0.0)
    held = HeldChanges(max_age_s=0.5, quiet_s=0.03, per_turn=4, clock=clock)
    storm = [i * 0.0001 for i in range(100)]  # a hundred devices within 10 ms
    log = serve(held, clock, storm, answer_s=0.0003, send_s=0.0002, until=1.0)
    answers = [e for e in log if e[0] == "answer"]
    sent = [e for e in log if e[0] == "sent"]
    assert len(answers) == 100 and len(sent) == 200
    assert answers[-1][2] < sent[0][2], "every device had its answer before the first rule change went"
    assert sent[0][2] - answers[-1][2] > 0.025, "the rules waited for the devices to go quiet (30 ms)"
    assert [change for _, change, _ in sent] == [(kind, t) for t in storm for kind in ("rule", "meter")]
    assert answers[-1][2] < 0.04  # the last answer: 100 answers' time, no rule work in between


def test_held_rules_take_turns_with_answers_once_they_have_waited_too_long():
    clock = Clock(0.0)
    held = HeldChanges(max_age_s=0.5, quiet_s=0.03, per_turn=4, clock=clock)
    endless = [i * 0.0005 for i in range(4000)]  # devices never go quiet for 2 s
    log = serve(held, clock, endless, answer_s=0.0003, send_s=0.0002, until=1.5)
    first_sent = next(e[2] for e in log if e[0] == "sent")
    assert 0.5 <= first_sent < 0.55, "held changes went out once the oldest had waited half a second"
    runs = "".join("a" if e[0] == "answer" else "s" for e in log if e[2] >= first_sent)
    assert "s" * 5 not in runs, "after at most 4 changes, an answer"
    assert runs.count("a") > 100  # answers did not stop
    answered_at = {e[1]: e[2] for e in log if e[0] == "answer"}
    ages = [at - answered_at[change[1]] for _, change, at in (e for e in log if e[0] == "sent")]
    assert max(ages) < 0.6, "and no change waited much beyond half a second"


def test_with_nothing_held_and_nothing_waiting_there_is_nothing_to_do():
    clock = Clock(0.0)
    held = HeldChanges(clock=clock)
    assert held.next_turn(frames_waiting=False) is None
    assert held.next_turn(frames_waiting=True) == ANSWER
    held.hold("rule")
    assert held.next_turn(frames_waiting=False) == SEND  # no answer yet: nobody to wait for
    assert held.take() == ["rule"] and len(held) == 0
