"""How many connects through a ClusterIP reach every endpoint: P(some endpoint never chosen) < 1e-3, exactly."""

from kpdiag.collect.probes import SERIES_MAX, connects_needed, p_missed


def test_counts_from_the_number_of_endpoints():
    assert [connects_needed(n) for n in (0, 1, 2, 5, 16)] == [1, 1, 11, 39, 150]
    for n in (2, 3, 5, 8, 16):
        k = connects_needed(n)
        assert p_missed(n, k) < 1e-3 <= p_missed(n, k - 1)


def test_exact_probability_and_the_cap():
    assert abs(p_missed(2, 3) - 0.25) < 1e-12  # 2 · (1/2)³ − 0: both connects-sequences of one endpoint only
    assert abs(p_missed(3, 2) - 1.0) < 1e-12  # two connects cannot reach three endpoints
    assert connects_needed(64) == SERIES_MAX and p_missed(64, SERIES_MAX) > 1e-3  # capped: the report must say so
