"""Which mteb and transformers releases flow-plugin supports, and one sentence when the installed ones are not.

The supported ranges are the ones ``pyproject.toml`` declares: they are read from the installed
distribution's metadata (``importlib.metadata.requires("flow-plugin")``), so they have one home.
Installed versions are read from metadata too; nothing here imports mteb or transformers, so the
check runs before either is touched (the start-up hook calls it when MTEB's registries load).

Examples
--------
>>> unsupported_message(["mteb>=2.14,<3", "transformers>=4.48,<6"], installed={"mteb": "2.7.30", "transformers": "5.0.0"})
"flow-plugin: mteb 2.7.30 is installed, but flow-plugin supports mteb>=2.14,<3 and transformers>=4.48,<6: its flow_plugin/ models and offline tasks are not registered with MTEB (pip install 'mteb>=2.14,<3')"
>>> unsupported_message(["mteb>=2.14,<3"], installed={"mteb": "2.26.24"}) is None
True
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable, Mapping

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from flow_plugin.errors import UnsupportedVersionError

#: the packages whose installed release is checked before flow-plugin registers with MTEB
CHECKED = ("mteb", "transformers")
DISTRIBUTION = "flow-plugin"


def declared_requirements() -> list[str]:
    """flow-plugin's own requirements as installed (``Requires-Dist``), or ``[]`` when flow-plugin
    runs from a source folder that was never installed."""
    try:
        return list(importlib.metadata.requires(DISTRIBUTION) or [])
    except importlib.metadata.PackageNotFoundError:
        return []


def supported_ranges(requirements: Iterable[str] | None = None) -> dict[str, str]:
    """Package -> its declared range (``">=2.14,<3"``, lower bound first) for :data:`CHECKED`,
    from ``requirements`` (default: :func:`declared_requirements`); requirements of extras are skipped.

    >>> supported_ranges(["mteb<3,>=2.14", "numpy>=1.24", "transformers>=4.48; extra == 'x'"])
    {'mteb': '>=2.14,<3'}
    """
    ranges = {}
    for text in declared_requirements() if requirements is None else requirements:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(requirement.name)
        if name in CHECKED and requirement.specifier:
            ordered = sorted(requirement.specifier, key=lambda spec: (not spec.operator.startswith(">"), str(spec)))
            ranges[name] = ",".join(str(spec) for spec in ordered)
    return ranges


def installed_versions() -> dict[str, str]:
    """Package -> installed version, for the packages of :data:`CHECKED` that are installed."""
    versions = {}
    for name in CHECKED:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def unsupported_message(requirements: Iterable[str] | None = None,
                        installed: Mapping[str, str] | None = None) -> str | None:
    """``None`` when every installed package of :data:`CHECKED` is within its declared range, else one
    line that names what is installed, the supported ranges and the remedy.

    ``requirements`` (default: the installed flow-plugin's) and ``installed`` (default: the installed
    releases) are arguments so that the check can be run against any range."""
    ranges = supported_ranges(requirements)
    installed = installed_versions() if installed is None else dict(installed)
    outside = [name for name, wanted in ranges.items()
               if name in installed and not SpecifierSet(wanted).contains(installed[name], prereleases=True)]
    if not outside:
        return None
    found = " and ".join(f"{name} {installed[name]}" for name in outside)
    supported = " and ".join(f"{name}{wanted}" for name, wanted in ranges.items())
    remedy = " ".join(f"'{name}{ranges[name]}'" for name in outside)
    verb = "is" if len(outside) == 1 else "are"
    return (f"flow-plugin: {found} {verb} installed, but flow-plugin supports {supported}: its flow_plugin/ models "
            f"and offline tasks are not registered with MTEB (pip install {remedy})")


def require_supported(requirements: Iterable[str] | None = None) -> None:
    """Raise :class:`~flow_plugin.errors.UnsupportedVersionError` (the one line of
    :func:`unsupported_message`) when an installed mteb or transformers is outside its range."""
    message = unsupported_message(requirements)
    if message is not None:
        raise UnsupportedVersionError(message.removeprefix("flow-plugin: "))
