"""A target's replicas and their rotation (setu_client/replicas.py): what
a client told "closing" moves its long-polls to."""

from __future__ import annotations

import pytest

from setu_client.replicas import Replicas


def test_a_listed_target_rotates_its_addresses_the_closing_one_last() -> None:
    replicas = Replicas("ipv4:10.0.0.1:50051,10.0.0.2:50051,10.0.0.3:50051")
    assert replicas.many and replicas.count == 3
    assert replicas.rotated(0) == "ipv4:10.0.0.1:50051,10.0.0.2:50051,10.0.0.3:50051"
    assert replicas.rotated(1) == "ipv4:10.0.0.2:50051,10.0.0.3:50051,10.0.0.1:50051"
    assert replicas.rotated(4) == replicas.rotated(1), "round and round"
    six = Replicas("ipv6:[::1]:50051, [::2]:50051")
    assert six.rotated(1) == "ipv6:[::2]:50051,[::1]:50051"


@pytest.mark.parametrize(
    "target", ["127.0.0.1:50051", "dns:///setu.internal:50051", "ipv4:10.0.0.1:50051"]
)
def test_a_target_of_one_address_has_nowhere_to_move(target: str) -> None:
    replicas = Replicas(target)
    assert not replicas.many and replicas.count == 1
    assert replicas.rotated(1) == target
