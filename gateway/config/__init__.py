"""Herald's configuration: load it from its sources, validate it, show it with secrets masked.

A configuration comes from a file (JSON5 or TOML, by extension), ``HERALD_<SECTION>__<KEY>``
environment variables and command-line overrides, in rising precedence over the defaults of
:class:`gateway.settings.HeraldSettings`. Values may name environment variables as
``${VAR}`` or ``${VAR:-default}``. Every problem is reported at once as a
:class:`gateway.errors.ConfigError` whose issues name the file, line, column and key.
"""

from gateway.config._load import LoadedSettings, config_candidates, find_config, load_settings
from gateway.config._render import MASK, RenderFormat, render_settings

__all__ = [
    "MASK",
    "LoadedSettings",
    "RenderFormat",
    "config_candidates",
    "find_config",
    "load_settings",
    "render_settings",
]
