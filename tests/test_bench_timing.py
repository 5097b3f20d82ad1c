"""bench.timing.interleaved: every runner warmed once, then timed once per round, the rounds in orders of their own
(seeded), so that no runner always runs right after the same one."""

from bench.timing import interleaved


def rounds(labels: str, reps: int) -> list[list[str]]:
    calls = []
    result = interleaved({label: (lambda label=label: calls.append(label)) for label in labels}, reps)
    assert all(len(r["times_s"]) == reps and r["median_s"] >= 0 for r in result.values())
    assert calls[:len(labels)] == list(labels)  # the warm-up, in the given order
    body = calls[len(labels):]
    return [body[i:i + len(labels)] for i in range(0, len(body), len(labels))]


def test_each_round_runs_every_runner_once_in_an_order_of_its_own():
    orders = rounds("abcd", 12)
    assert all(sorted(order) == list("abcd") for order in orders)
    before = {label: {order[order.index(label) - 1] for order in orders if order.index(label) > 0} for label in "abcd"}
    assert all(len(previous) > 1 for previous in before.values())  # no fixed predecessor
    assert orders == rounds("abcd", 12)  # seeded: the same orders in every run
