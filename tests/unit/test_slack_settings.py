"""``[notify.slack]``: read with its defaults, refused ``bad_config`` when malformed."""

import pytest

from signoff.chores.slack import SlackSettings, slack_settings
from signoff.chores.notify import notify_settings
from signoff.errors import ConfigError


def home_with(tmp_path, text):
    (tmp_path / "signoff.toml").write_text(text, encoding="utf-8")
    return tmp_path


def test_no_table_no_slack_and_the_webhook_ignores_the_channel_table(tmp_path):
    assert slack_settings(home_with(tmp_path, "[notify]\n")) is None
    home = home_with(tmp_path, '[notify.slack]\napi_url = "http://127.0.0.1:9/api/"\n')
    assert slack_settings(home) == SlackSettings(api_url="http://127.0.0.1:9/api/")
    assert notify_settings(home) is None  # Slack needs no [notify] url


@pytest.mark.parametrize("text,words", [
    ('[notify.slack]\ncolour = "red"\n', "notify.slack.colour"),
    ('[notify.slack]\napi_url = "ftp://slack"\n', "api_url"),
    ('[notify.slack]\nbot_token_env = ""\n', "bot_token_env"),
    ('[notify.slack]\nattempts = 0\n', "attempts"),
    ('[notify]\nslack = "yes"\n', "[notify.slack] must be a table"),
])
def test_a_malformed_table_is_bad_config_naming_the_key(tmp_path, text, words):
    with pytest.raises(ConfigError) as info:
        slack_settings(home_with(tmp_path, text))
    assert info.value.code == "bad_config" and words in info.value.message


def test_a_variable_not_set_is_bad_config_naming_it(tmp_path, monkeypatch):
    monkeypatch.delenv("UNSET_SLACK_SECRET", raising=False)
    settings = slack_settings(home_with(
        tmp_path, '[notify.slack]\nsigning_secret_env = "UNSET_SLACK_SECRET"\n'))
    with pytest.raises(ConfigError) as info:
        settings.signing_secret
    assert info.value.code == "bad_config" and "UNSET_SLACK_SECRET" in info.value.message
    monkeypatch.setenv("UNSET_SLACK_SECRET", "s3cret")
    assert settings.signing_secret == "s3cret"
