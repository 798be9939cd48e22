"""Struct carries every number as a double; whole ones come back as ints."""

from __future__ import annotations

import math

from google.protobuf import struct_pb2

from setu_client import struct_to_dict, whole_numbers
from setu_server.rpc.convert import struct_dict


def test_whole_numbers_become_ints_at_any_depth_and_nothing_else_changes() -> None:
    struct = struct_pb2.Struct()
    struct.update({"port": 55432, "ratio": 0.5, "nested": {"sizes": [1, 2.5, -3]}, "on": True})
    expected = {"port": 55432, "ratio": 0.5, "nested": {"sizes": [1, 2.5, -3]}, "on": True}
    for convert in (struct_to_dict, struct_dict):  # the SDK's edge and the server's
        plain = convert(struct)
        assert plain == expected
        assert type(plain["port"]) is int and type(plain["nested"]["sizes"][2]) is int
        assert type(plain["ratio"]) is float and plain["on"] is True


def test_only_doubles_that_hold_the_integer_exactly_are_converted() -> None:
    assert type(whole_numbers(2.0**53)) is int and type(whole_numbers(-(2.0**53))) is int
    assert type(whole_numbers(2.0**53 + 2)) is float  # past 2**53 a double may not be that int
    assert whole_numbers(math.inf) == math.inf
    assert math.isnan(whole_numbers(math.nan))
