"""``[serve]`` settings: whose ``X-Forwarded-For`` is believed (nobody's unless named)."""

import pytest

from signoff.config import CONFIG_NAME, serve_settings
from signoff.errors import ConfigError


def settings(tmp_path, serve_table=""):
    (tmp_path / CONFIG_NAME).write_text("[serve]\n" + serve_table, encoding="utf-8")
    return serve_settings(tmp_path)


def test_no_proxy_is_trusted_by_default(tmp_path):
    assert settings(tmp_path)["trusted_proxies"] == ""


@pytest.mark.parametrize("value", ["127.0.0.1", "127.0.0.1, 10.0.0.0/8", "::1", "fd00::/8",
                                   "*", ""])
def test_addresses_and_networks_are_taken(tmp_path, value):
    assert settings(tmp_path, f'trusted_proxies = "{value}"\n')["trusted_proxies"] == value


@pytest.mark.parametrize("value, named", [("localhost", "'localhost'"),
                                          ("127.0.0.1, proxy.lan", "'proxy.lan'"),
                                          ("10.0.0.300", "'10.0.0.300'")])
def test_anything_else_is_bad_config_naming_it(tmp_path, value, named):
    with pytest.raises(ConfigError) as refused:
        settings(tmp_path, f'trusted_proxies = "{value}"\n')
    assert refused.value.code == "bad_config" and named in refused.value.message
