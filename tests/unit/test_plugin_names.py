"""Plug-in names in signoff.toml: what `signoff init` writes imports as it is named, and
the names earlier versions wrote keep their homes working."""

import tomllib

import pytest

from signoff.config import DEFAULT_TOML, load_plugin
from signoff.drafters.template import template

pytestmark = pytest.mark.backend_independent


def test_a_new_home_names_the_template_drafter_where_it_lives():
    factory = tomllib.loads(DEFAULT_TOML)["drafter"]["factory"]
    assert factory == "signoff.drafters.template:template"
    assert load_plugin(factory, "drafter") is template


def test_a_home_made_by_an_earlier_version_keeps_its_template_drafter():
    assert load_plugin("signoff.drafting:template", "drafter") is template
