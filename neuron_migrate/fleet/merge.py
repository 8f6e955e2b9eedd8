"""`fleet merge`: combine the JSON results of `fleet hf --shard I/N` runs into the report one run would give.

Each shard's `fleet.json` carries its architectures' results and the whole run's selection (every model type,
in order). The merge checks that the shards belong to one run (same task, modes, device, versions, opdb and
selection, the same N, no slice twice), that together they cover the selection, and then recomputes the shares
and the ranking from the architectures with the same `matrix.assemble` a single run uses.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from neuron_migrate.errors import InputFileError
from neuron_migrate.fleet.matrix import FLEET_SCHEMA, ArchResult, FleetResult, OpCell, assemble
from neuron_migrate.model import Coverage, _build

_SAME = ("task", "modes", "device", "versions", "opdb_version", "opdb_pre_release", "selection")


def read_result(path: Path) -> dict[str, Any]:
    """One shard's fleet JSON, checked to be a fleet result; errors name the file and the fix."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise InputFileError(
            f"{path}: cannot read it ({err.strerror}); give the fleet.json a shard wrote"
        ) from None
    except ValueError as err:
        raise InputFileError(f"{path}: not valid JSON ({err}); rerun that shard") from None
    if not isinstance(data, dict) or data.get("schema") != FLEET_SCHEMA:
        got = data.get("schema") if isinstance(data, dict) else None
        raise InputFileError(
            f"{path}: not a {FLEET_SCHEMA} file (schema {got!r}); write it with "
            "`neuron-migrate fleet hf --shard I/N --format json`"
        )
    return data


def arch_from_dict(data: dict[str, Any], where: str) -> ArchResult:
    """An ArchResult back from its JSON form."""
    fields = dict(data)
    fields["ops"] = {
        op: OpCell(c["status"], c["calls"], tuple(c["dtypes"]), tuple(c["phases"]))
        for op, c in (data.get("ops") or {}).items()
    }
    fields["coverage"] = _build(Coverage, data["coverage"], where) if data.get("coverage") else None
    fields["error_dtypes"] = tuple(data.get("error_dtypes") or ())
    fields["notes"] = tuple(data.get("notes") or ())
    try:
        return ArchResult(**fields)
    except TypeError as err:
        raise InputFileError(f"{where}: not a fleet architecture record ({err})") from None


def merge(paths: list[Path]) -> FleetResult:
    """The FleetResult of the whole run from its shard results."""
    if not paths:
        raise InputFileError("fleet merge: give the fleet.json of every shard")
    shards = [(path, read_result(path)) for path in paths]
    first_path, first = shards[0]
    seen: dict[str, Path] = {}
    archs: list[ArchResult] = []
    counts = set()
    for path, data in shards:
        for key in _SAME:
            if data.get(key) != first.get(key):
                raise InputFileError(
                    f"{path}: its {key} differs from {first_path}'s; merge shards of one run only"
                )
        shard = data.get("shard") or "1/1"
        counts.add(shard.split("/")[1])
        if shard in seen:
            raise InputFileError(f"{path}: shard {shard} is also in {seen[shard]}; give each shard once")
        seen[shard] = path
        archs.extend(arch_from_dict(item, str(path)) for item in data.get("architectures", ()))
    if len(counts) > 1:
        raise InputFileError(
            f"fleet merge: the shards split the run differently ({', '.join(sorted(counts))} "
            "slices); merge the shards of one --shard I/N run"
        )
    modes = tuple(first["modes"])
    covered = {(a.model_type, a.mode) for a in archs}
    missing = [mt for mt in first["selection"] if any((mt, mode) not in covered for mode in modes)]
    if missing:
        count = int(next(iter(counts)))
        absent = sorted(set(range(1, count + 1)) - {int(s.split("/")[0]) for s in seen})
        hint = (
            f"shard(s) {', '.join(f'{i}/{count}' for i in absent)} missing" if absent else "incomplete shards"
        )
        raise InputFileError(
            f"fleet merge: {len(missing)} architecture(s) have no result ({', '.join(missing[:5])}"
            f"{', ...' if len(missing) > 5 else ''}): {hint}"
        )
    return assemble(
        archs,
        task=first["task"],
        modes=modes,
        device=first["device"],
        versions=first["versions"],
        opdb_version=first["opdb_version"],
        opdb_pre_release=bool(first["opdb_pre_release"]),
        selection=tuple(first["selection"]),
        traced=sum(d.get("traced", 0) for _, d in shards),
        from_cache=sum(d.get("from_cache", 0) for _, d in shards),
    )
