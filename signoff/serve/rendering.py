"""How the review pages print what they show: the templates' environment and filters.

Every ``{{ … }}`` of every template goes through ``shown`` (the Environment's
``finalize``), which marks each character that renders differently from what
it is (``rules.text.visible``: ``⟨U+202E⟩``). A draft, an edit's diff, a record,
a reason, a reviewer's name, a monitor id, the drafter's model name: whatever
a person reads is marked in this one place, not field by field, so a field
added to a page later is marked too. Ids in URLs go through ``urlencode``
(ASCII, left as it is) and keep working; the one text a page must send back
exactly as it is, the edit box's draft, is a ``form_value``.
"""

import time
from pathlib import Path

import jinja2
from markupsafe import Markup
from starlette.templating import Jinja2Templates

from ..rules.text import visible

FOLDER = Path(__file__).parent / "templates"
STYLE = (FOLDER / "style.css").read_text(encoding="utf-8")
# Long text (a record, a draft): this much is shown, the rest up to TEXT_LIMIT
# behind a <details>; past that the page says how much it leaves out.
TEXT_SHOWN = 2000
TEXT_LIMIT = 100_000
EXCERPT_LINES, EXCERPT_CHARS = 4, 400  # a draft beside its checkbox in the task list


class FormValue(str):
    """Text a form sends back exactly as the page got it (printed unmarked)."""


def shown(value):
    """What a page prints for ``value``: text with its hidden characters marked.

    Numbers and ``None`` are printed as they are; markup the templates made
    (a macro's output, marked while it was rendered) and a ``FormValue`` too.
    """
    if isinstance(value, (Markup, FormValue)) or value is None:
        return value
    if isinstance(value, (int, float)):
        return value
    return visible(value if isinstance(value, str) else str(value))


def form_value(value):
    """``value`` as a form field's content, sent back exactly as it is (``FormValue``)."""
    return FormValue("" if value is None else value)


def fold(text):
    """Long text for a page: ``{head, rest, left_out}``.

    ``head`` is shown, ``rest`` goes behind a ``<details>``, and ``left_out``
    characters are not on the page at all, so no text makes a page unbounded.
    """
    text = text if isinstance(text, str) else ""
    return {"head": text[:TEXT_SHOWN], "rest": text[TEXT_SHOWN:TEXT_LIMIT],
            "left_out": max(0, len(text) - TEXT_LIMIT)}


def excerpt(text, lines=EXCERPT_LINES, limit=EXCERPT_CHARS):
    """The first lines of a draft for a list."""
    text = text if isinstance(text, str) else ""
    head = "\n".join(text.split("\n")[:lines])
    head = head if len(head) <= limit else head[:limit]
    return head + ("…" if head != text else "")


def clip(value, limit=500):
    """One line of a page, at most ``limit`` characters."""
    text = "" if value is None else str(value)
    return text if len(text) <= limit else text[:limit] + "…"


def when(at):
    """A Unix time as the pages show it (UTC), ``-`` for none."""
    if at is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at)) + " UTC"


def _environment():
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(FOLDER)),
                             autoescape=jinja2.select_autoescape(), finalize=shown)
    env.filters.update(fold=fold, clip=clip, when=when, form_value=form_value)
    return env


TEMPLATES = Jinja2Templates(env=_environment())
