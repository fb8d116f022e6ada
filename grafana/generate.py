#!/usr/bin/env python3
"""Write gpulse's Grafana dashboards to grafana/dashboards/ (or check them).

    python grafana/generate.py            # regenerate the committed JSON
    python grafana/generate.py --check    # exit 1 if the committed JSON is stale
    python grafana/generate.py --out DIR  # write somewhere else
    python grafana/generate.py --requirement   # the pinned SDK, for pip install

Needs the pinned grafana-foundation-sdk (see gpulse_dashboards/common.py).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
# the dashboards read names and thresholds from this checkout's gpulse (rulenames,
# thresholds), installed or not, as prometheus/generate.py does
sys.path.insert(1, str(HERE.parent / "exporter"))

from gpulse_dashboards import build_all  # noqa: E402
from gpulse_dashboards.common import SDK_DIST, SDK_VERSION, SdkMissing  # noqa: E402

DEFAULT_OUT = HERE / "dashboards"


def render(dashboard: dict) -> str:
    """The committed form: sorted keys so diffs show real changes only."""
    return json.dumps(dashboard, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def rendered() -> dict[str, str]:
    return {name: render(d) for name, d in build_all().items()}


def stale_files(out: Path) -> list[str]:
    """Names of dashboard files under `out` that differ from, or are missing
    against, what the generator produces, plus stray .json files it would not
    produce."""
    want = rendered()
    bad = [n for n, text in want.items()
           if not (out / n).is_file() or (out / n).read_text(encoding="utf-8") != text]
    bad += sorted(p.name for p in out.glob("*.json") if p.name not in want)
    return bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Generate gpulse's Grafana dashboards.")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory (default: %(default)s)")
    ap.add_argument("--check", action="store_true", help="only check that the files are up to date")
    ap.add_argument("--requirement", action="store_true", help="print the pinned SDK requirement and exit")
    args = ap.parse_args(argv)
    if args.requirement:
        print(f"{SDK_DIST}=={SDK_VERSION}")
        return 0
    try:
        if args.check:
            bad = stale_files(args.out)
            if bad:
                print(f"dashboards out of date: {', '.join(bad)}; run: make dashboards", file=sys.stderr)
                return 1
            return 0
        args.out.mkdir(parents=True, exist_ok=True)
        for name, text in rendered().items():
            (args.out / name).write_text(text, encoding="utf-8")
            print(f"wrote {args.out / name}")
        return 0
    except SdkMissing as e:
        print(f"generate.py: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"generate.py: {e.filename}: {e.strerror}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
