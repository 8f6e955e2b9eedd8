"""A structural check of SARIF 2.1.0 as GitHub code scanning requires it (what upload rejects or ignores)."""

from __future__ import annotations


def sarif_problems(log: dict) -> list[str]:
    """Everything in `log` that GitHub's SARIF upload would reject; empty when it is acceptable."""
    problems: list[str] = []
    if log.get("version") != "2.1.0":
        problems.append("version must be 2.1.0")
    if not str(log.get("$schema", "")).endswith("sarif-2.1.0.json"):
        problems.append("$schema must name the 2.1.0 schema")
    runs = log.get("runs")
    if not isinstance(runs, list) or not runs:
        return [*problems, "runs must be a non-empty list"]
    for r, run in enumerate(runs):
        driver = run.get("tool", {}).get("driver", {})
        if not driver.get("name"):
            problems.append(f"runs[{r}].tool.driver.name is required")
        rules = driver.get("rules", [])
        ids = [rule.get("id") for rule in rules]
        if len(ids) != len(set(ids)) or not all(ids):
            problems.append(f"runs[{r}] rule ids must be unique and non-empty")
        for rule in rules:
            if not rule.get("shortDescription", {}).get("text"):
                problems.append(f"rule {rule.get('id')} needs shortDescription.text")
            level = rule.get("defaultConfiguration", {}).get("level", "warning")
            if level not in ("none", "note", "warning", "error"):
                problems.append(f"rule {rule.get('id')} has bad level {level}")
        for i, result in enumerate(run.get("results", [])):
            where = f"runs[{r}].results[{i}]"
            if not result.get("message", {}).get("text"):
                problems.append(f"{where}.message.text is required")
            if result.get("ruleId") not in ids:
                problems.append(f"{where}.ruleId {result.get('ruleId')} is not a rule of the driver")
            index = result.get("ruleIndex")
            if index is not None and (index >= len(ids) or ids[index] != result.get("ruleId")):
                problems.append(f"{where}.ruleIndex does not point at its rule")
            if result.get("level", "warning") not in ("none", "note", "warning", "error"):
                problems.append(f"{where}.level is not a SARIF level")
            locations = result.get("locations") or []
            if not locations:
                problems.append(f"{where} needs at least one location")
            for location in locations:
                physical = location.get("physicalLocation", {})
                uri = physical.get("artifactLocation", {}).get("uri", "")
                if not uri or uri.startswith("/") or "\\" in uri:
                    problems.append(f"{where} uri must be a relative path with '/': {uri!r}")
                region = physical.get("region", {})
                if region.get("startLine", 0) < 1:
                    problems.append(f"{where} region.startLine must be >= 1")
                if "startColumn" in region and region["startColumn"] < 1:
                    problems.append(f"{where} region.startColumn must be >= 1")
            fingerprints = result.get("partialFingerprints", {})
            if not fingerprints or not all(isinstance(v, str) and v for v in fingerprints.values()):
                problems.append(f"{where} needs partialFingerprints")
    return problems
