"""Keeps benchmarks/identity_hashes.py runnable and its fingerprints meaningful: the same case hashes the same
twice, and a change of one setting changes the hashes."""


import pytest
from _benchmark_module import benchmark_module


@pytest.fixture(scope="module")
def hashes():
    with benchmark_module("identity_hashes") as module:
        yield module


def test_a_case_hashes_the_same_twice_and_another_case_differs(hashes):
    first = hashes.run_case("sync-aec-truncated")
    assert first == hashes.run_case("sync-aec-truncated")
    assert first["rollouts"] != hashes.run_case("sync-aec-kuhn-shared")["rollouts"]


def test_every_case_names_a_known_env_and_valid_settings(hashes):
    for name, (env_fn, overrides, extras) in hashes.CASES.items():
        assert callable(env_fn), name
        hashes._config(overrides)  # raises on an invalid setting
        assert set(extras) <= {"active", "aux", "resume"}, name
