"""Splits dealt, not drawn (issue 42.4): `traffic.mix` and `traffic.lora` deal their names so
that every leading part of the plan is within one conversation of the weights for each name."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest

from vllm_slo.loadtests.dealing import Dealer, deal_by_group

WEIGHT_SETS = {
    "2:1": {"base": 2, "sql": 1},
    "1:1:1": {"a": 1, "b": 1, "c": 1},
    "0.7:0.2:0.1": {"a": 0.7, "b": 0.2, "c": 0.1},
    "irrational-ish": {"a": math.sqrt(2), "b": math.e, "c": math.pi, "d": 1 / 7},
    "one name": {"only": 3.5},
}


def _worst_offset(weights: dict[str, float], names: list[str]) -> Fraction:
    """max over every prefix n and every name of |count - n * share| (exact)."""
    exact = {name: Fraction(w) for name, w in weights.items()}
    total = sum(exact.values())
    counts = dict.fromkeys(weights, 0)
    worst = Fraction(0)
    for n, name in enumerate(names, start=1):
        counts[name] += 1
        worst = max(worst, *(abs(counts[k] - n * exact[k] / total) for k in weights))
    return worst


@pytest.mark.parametrize("label", list(WEIGHT_SETS))
def test_every_prefix_is_within_one_conversation_of_the_weights(label: str) -> None:
    weights = WEIGHT_SETS[label]
    dealer = Dealer(weights)
    names = [dealer.deal() for _ in range(3000)]
    k = len(weights)
    bound = Fraction(1) - (Fraction(1, 2 * k - 2) if k > 1 else 1)
    assert _worst_offset(weights, names) <= bound < 1
    assert set(names) == set(weights)


def test_the_bound_holds_for_many_random_weight_sets() -> None:
    """Up to eight names, skewed weights (where a largest-deficit rule goes past 1)."""
    rng = random.Random(3)
    for _ in range(60):
        k = rng.randint(2, 8)
        weights = {f"n{i}": rng.random() ** 3 + 1e-3 for i in range(k)}
        dealer = Dealer(weights)
        names = [dealer.deal() for _ in range(600)]
        assert _worst_offset(weights, names) <= 1 - Fraction(1, 2 * k - 2), weights


def test_a_2_to_1_split_has_its_exact_counts_at_every_length() -> None:
    dealer = Dealer({"base": 2, "sql": 1})
    dealer.name(299)
    for n in range(1, 301):
        base = dealer.dealt[:n].count("base")
        assert base in (math.floor(2 * n / 3), math.ceil(2 * n / 3)), n
    assert dealer.dealt[:52].count("base") in (34, 35)
    assert dealer.dealt[:6] == ["base", "sql", "base", "base", "sql", "base"]


def test_dealing_is_deterministic_and_indexable() -> None:
    weights = {"a": 0.7, "b": 0.2, "c": 0.1}
    one = Dealer(weights)
    sequence = [one.deal() for _ in range(500)]
    jumped = Dealer(weights)
    assert jumped.name(499) == sequence[499]  # reached in one jump
    assert [jumped.name(i) for i in reversed(range(500))] == sequence[::-1]
    assert Dealer(weights).deal() == sequence[0]
    # the names' order is the tie-break: equal weights deal in the order listed
    assert [Dealer({"x": 1, "y": 1}).name(i) for i in range(2)] == ["x", "y"]
    with pytest.raises(ValueError, match="positive"):
        Dealer({"a": 1, "b": 0})
    with pytest.raises(ValueError, match="positive"):
        Dealer({})
    with pytest.raises(ValueError, match=">= 0"):
        one.name(-1)


def test_groups_are_dealt_apart_and_keys_keep_their_names() -> None:
    """A 1:1 mix of parts dealt alternately and a 1:1 split dealt over the whole plan would
    send every chat conversation to one name; dealt per part, each part is split 1:1."""
    items = [("chat" if c % 2 == 0 else "long-doc", c) for c in range(400)]
    items += [("chat", 0), ("chat", 2)]  # met again (a plan that cycles): same name
    names = deal_by_group({"base": 1, "sql": 1}, items)
    for part, parity in (("chat", 0), ("long-doc", 1)):
        dealt = [names[c] for c in range(parity, 400, 2)]
        assert dealt.count("base") == dealt.count("sql") == 100
        assert _worst_offset({"base": 1, "sql": 1}, dealt) <= Fraction(1, 2), part
    assert len(names) == 400
