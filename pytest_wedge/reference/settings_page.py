"""docs/reference/settings.md: every pytest option, ini key and environment variable."""

from __future__ import annotations

from pytest_wedge.plugin.settings import SETTINGS, Setting
from pytest_wedge.reference.markdown import code, page, table

INTRO = """\
The plugin's settings, from the one table the plugin registers them from
(`pytest_wedge.plugin.settings.SETTINGS`). Each is resolved once: marker > command line >
environment > ini > default. The load options of a test are on
[harness.md](harness.md)."""


def _default(setting: Setting) -> str:
    if setting.default is None or setting.default == ():
        return "none"
    return code(
        str(setting.default).lower() if isinstance(setting.default, bool) else str(setting.default)
    )


def _option(setting: Setting) -> str:
    if not setting.has_option:
        return "(ini and environment only)"
    if setting.const is not None:
        return code(f"{setting.option}[=NAMES]")
    if isinstance(setting.default, bool):
        return code(setting.option)
    return code(f"{setting.option}=VALUE")


def _meaning(setting: Setting) -> str:
    choices = f" One of: {', '.join(code(c) for c in setting.choices)}." if setting.choices else ""
    return setting.help + choices


def render() -> str:
    rows = [
        (_option(s), code(s.name), code(s.env or ""), _default(s), _meaning(s))
        for s in SETTINGS.values()
    ]
    body = table(("option", "ini", "environment", "default", "meaning"), rows)
    return page("Settings", INTRO, body)
