"""A runtime's stored parts name blob paths under the run's prefix: one that
would leave it is refused, naming the field, before the books record it."""

import pytest

from setu_client._proto.setu.v1 import agents_pb2 as pb
from setu_client.errors import InvalidArgument
from setu_tasks.codec.common import stored_parts_of


def part(path: str) -> pb.StoredPart:
    return pb.StoredPart(stream="public.t", number=0, path=path, rows=1, bytes=1, sha256="0" * 64)


def test_a_path_under_the_prefix_is_recorded() -> None:
    [stored] = stored_parts_of([part("public.t/part-00000.bin")], "stored_parts")
    assert stored.part.path == "public.t/part-00000.bin" and stored.stream == "public.t"


@pytest.mark.parametrize(
    "path", ["/etc/passwd", "../other-run/part.bin", "a/../../b", "a//b", "a\\b", "./a"]
)
def test_a_path_leaving_the_prefix_is_invalid_argument(path: str) -> None:
    with pytest.raises(InvalidArgument, match=r"progress\.stored_parts\[1\]\.path: invalid"):
        stored_parts_of([part("ok/p.bin"), part(path)], "progress.stored_parts")
