"""SETU_TLS reads as an operator writes it: 1/true/yes/on is TLS, 0/false/no/off or unset is not."""

import pytest

from setu_client.tls import tls_defaults


@pytest.mark.parametrize("value", ["1", "true", "TRUE", "yes", "on", " 1 "])
def test_setu_tls_on(value: str) -> None:
    assert tls_defaults({"SETU_TLS": value})["tls"] is True


@pytest.mark.parametrize("value", ["", "0", "false", "no", "off", "False"])
def test_setu_tls_off(value: str) -> None:
    assert tls_defaults({"SETU_TLS": value})["tls"] is False


def test_unset_is_plaintext_and_files_default_empty() -> None:
    defaults = tls_defaults({})
    assert defaults["tls"] is False
    assert {value for name, value in defaults.items() if name != "tls"} == {""}
