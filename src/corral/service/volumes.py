"""Named persistent volumes (``spec.volumes``) across the providers that keep them
(``corral volume ls`` and ``corral volume rm``). A provider without persistent volumes is
listed with its reason; only :func:`remove_volume` ever deletes a volume (a run's end and the
leak sweep never do)."""

from __future__ import annotations

from collections.abc import Sequence

from corral.errors import BadInput, CorralError, NotFound
from corral.providers.base import Provider, SupportsVolumes, VolumeInfo
from corral.service.offers import choose_providers
from corral.service.views import IsoDatetime, View


class VolumeView(View):
    """One named volume: where it lives, its size, and the machines using it."""

    provider: str
    name: str
    volume_id: str
    region: str
    size_gb: int
    state: str
    attached_to: list[str]
    created_at: IsoDatetime | None

    @classmethod
    def of(cls, info: VolumeInfo) -> VolumeView:
        return cls(**info.model_dump())


class ProviderVolumes(View):
    """One provider asked: how many volumes it holds, or why it gave none (no persistent
    volumes, not loaded, an error)."""

    provider: str
    volumes: int
    reason: str | None


class VolumeList(View):
    volumes: list[VolumeView]
    providers: list[ProviderVolumes]


class VolumeRemoval(View):
    removed: list[VolumeView]


def _providers(names: Sequence[str]) -> tuple[dict[str, Provider], dict[str, str]]:
    """The providers asked that keep volumes, and why each other one gives none."""
    loaded, skipped = choose_providers(names)
    keep: dict[str, Provider] = {}
    why = dict(skipped)
    for name, p in loaded.items():
        if isinstance(p, SupportsVolumes):
            keep[name] = p
        else:
            reason = type(p).unsupported.get("SupportsVolumes", "not implemented")
            why[name] = f"no persistent volumes ({reason})"
    return keep, why


def _volumes(p: Provider) -> list[VolumeInfo]:
    assert isinstance(p, SupportsVolumes)
    return p.list_volumes()


def list_volumes(providers: Sequence[str] = ()) -> VolumeList:
    """Every named volume of the providers asked (default: the enabled ones)."""
    usable, why = _providers(providers)
    found: list[VolumeView] = []
    rows: list[ProviderVolumes] = []
    for name, p in usable.items():
        try:
            infos = _volumes(p)
        except CorralError as exc:
            rows.append(ProviderVolumes(provider=name, volumes=0, reason=exc.message))
            continue
        found += [VolumeView.of(i) for i in infos]
        rows.append(ProviderVolumes(provider=name, volumes=len(infos), reason=None))
    rows += [ProviderVolumes(provider=n, volumes=0, reason=r) for n, r in why.items()]
    found.sort(key=lambda v: (v.name, v.provider, v.region, v.volume_id))
    return VolumeList(volumes=found, providers=rows)


def remove_volume(
    name: str, *, provider: str | None = None, region: str | None = None
) -> VolumeRemoval:
    """Delete the volume named ``name``. NotFound if no provider asked holds one; BadInput
    if several do (name ``provider``) or one holds several (name ``region``); Conflict while
    a machine uses it (nothing is deleted)."""
    if not name or not name.strip():
        raise BadInput("give the name of the volume to delete")
    usable, why = _providers([provider] if provider else [])
    if provider and provider.strip().lower() not in usable:
        raise BadInput(f"{provider}: {why.get(provider.strip().lower(), 'not a provider')}")
    holders = {
        n: p
        for n, p in usable.items()
        if any(v.name == name and region in (None, v.region) for v in _volumes(p))
    }
    if not holders:
        asked = ", ".join(usable) or "none that keep volumes"
        where = f" in {region}" if region else ""
        raise NotFound(f"no volume named {name!r}{where} (providers asked: {asked})")
    if len(holders) > 1:
        raise BadInput(
            f"volume {name!r} exists on {' and '.join(holders)}: say which with --provider"
        )
    [holder] = holders.values()
    assert isinstance(holder, SupportsVolumes)
    removed = holder.remove_volume(name, region)
    return VolumeRemoval(removed=[VolumeView.of(v) for v in removed])
