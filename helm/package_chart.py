"""Package helm/gpulse into a self-contained .tgz with Helm's own engine.

The chart folder links `files/rules` and `files/dashboards` to prometheus/chart (the
rule files with the thresholds the chart sets left to it, prometheus/generate.py) and
grafana/dashboards, so the repository keeps one copy of each. A copy of the folder
would carry dangling links; the package carries the files themselves (Helm's
package action reads through the links), and this script refuses to write one
that does not: every member must be a regular file and the rules and dashboards
inside must equal the repository's byte for byte.

    python helm/package_chart.py                 # -> dist/gpulse-<version>.tgz
    python helm/package_chart.py --destination D

Push the result to an OCI registry with `helm push dist/gpulse-<version>.tgz
oci://registry.example.com/charts`.
"""
from __future__ import annotations

import argparse
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "gpulse"
# package path inside the chart -> the repository folder it must equal
SOURCES = {"files/rules": ROOT / "prometheus" / "chart", "files/dashboards": ROOT / "grafana" / "dashboards"}
SHIPPED = {"files/rules": (".yml", ".yaml"), "files/dashboards": (".json",)}


class PackageError(Exception):
    """What is wrong with a package, in one line."""


def expected_files() -> dict[str, bytes]:
    """chart-relative path -> bytes, for every rule and dashboard file the templates read."""
    out = {}
    for inside, folder in SOURCES.items():
        files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in SHIPPED[inside])
        if not files:
            raise PackageError(f"{folder.relative_to(ROOT)}: no files to ship")
        out.update({f"{inside}/{p.relative_to(folder).as_posix()}": p.read_bytes() for p in files})
    return out


def check(archive: Path) -> None:
    """Raise PackageError unless the archive is self-contained and carries the
    repository's rules and dashboards unchanged."""
    want = expected_files()
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        top = {m.name.split("/", 1)[0] for m in members}
        if len(top) != 1:
            raise PackageError(f"{archive.name}: expected one chart folder, found {sorted(top)}")
        (name,) = top
        got: dict[str, bytes] = {}
        for m in members:
            if not m.isfile():
                raise PackageError(f"{archive.name}: {m.name} is not a regular file (a link would dangle once copied)")
            rel = m.name.split("/", 1)[1]
            if rel.startswith("files/"):
                got[rel] = tar.extractfile(m).read()
    for rel, data in want.items():
        if rel not in got:
            raise PackageError(f"{archive.name}: {name}/{rel} is missing")
        if got[rel] != data:
            raise PackageError(f"{archive.name}: {name}/{rel} differs from the repository's copy")
    extra = sorted(set(got) - set(want))
    if extra:
        raise PackageError(f"{archive.name}: files the templates do not read: {', '.join(extra)}")


def package(destination: Path) -> Path:
    import helm_python as helm
    destination.mkdir(parents=True, exist_ok=True)
    archive = Path(helm.package(CHART, destination=destination))
    check(archive)
    return archive


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--destination", type=Path, default=ROOT / "dist", help="folder for the .tgz (default: dist/)")
    args = ap.parse_args(argv)
    try:
        archive = package(args.destination)
    except ImportError:
        print("helm/package_chart.py: needs helm-python-sdk (pip install -e '.[test]')", file=sys.stderr)
        return 2
    except PackageError as e:
        print(f"helm/package_chart.py: {e}", file=sys.stderr)
        return 1
    print(archive)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
