"""palette.py is the one colour language: no other module of the package, page or
dashboard generator writes a palette colour down again."""
from __future__ import annotations

import re

from conftest import ROOT
from gpulse import palette

PKG = ROOT / "exporter" / "gpulse"
COLOUR = re.compile(r"#[0-9a-fA-F]{6}\b|#[0-9a-fA-F]{3}\b|rgba?\(\s*\d")


def palette_spellings():
    """Every way a palette colour could be written down again elsewhere."""
    out = set()
    for rgb in palette.STOPS + (palette.STALL_RGB, palette.NO_DATA_RGB):
        out |= {palette.hex_rgb(rgb).lower(), "(0x%02x, 0x%02x, 0x%02x)" % rgb, "(0x%02X, 0x%02X, 0x%02X)" % rgb,
                "%d, %d, %d" % rgb, "%d,%d,%d" % rgb}
    return out


def test_palette_is_defined_only_in_palette_py():
    spellings = palette_spellings()
    stray = []
    # the package and the dashboard generator: Grafana takes the palette by name
    for path in sorted(PKG.rglob("*")) + sorted((ROOT / "grafana" / "gpulse_dashboards").rglob("*.py")):
        if path.suffix not in (".py", ".js", ".css", ".html") or path.name == "palette.py":
            continue
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(ROOT)
        stray += [f"{rel}: {s}" for s in spellings if s in text.lower() or s in text]
        if re.search(r"\bSTOPS\s*=|viridis|turbo|RdYlGr", text, re.I) and path.suffix == ".py":
            stray.append(f"{rel}: defines or names a palette")
        # the heatmap's code and pages carry no colour literal at all: they get colours
        # from the palette (the stylesheet keeps neutral page chrome only)
        if path.parent.name in ("report", "web") and path.suffix in (".py", ".js", ".html") or \
                path.name == "livepage.py":
            stray += [f"{rel}: colour literal {m.group(0)!r}" for m in COLOUR.finditer(text)]
    assert stray == []
    css = (PKG / "web" / "gpulse.css").read_text()
    stall_rules = [r for r in re.findall(r"([^{}]+)\{([^}]*)\}", css) if ".band" in r[0]]
    assert stall_rules and all("var(--gpulse-stall" in body for _, body in stall_rules)


def test_the_check_catches_a_stray_palette():
    """The spellings the check looks for are what a copy of the palette would contain."""
    copy_of_viridis = "STOPS = ((0x44, 0x01, 0x54), (0x48, 0x28, 0x78))\nRED = '#e01e84'\n"
    found = {s for s in palette_spellings() if s in copy_of_viridis.lower()}
    assert "(0x44, 0x01, 0x54)" in found and "#e01e84" in found
    assert COLOUR.search("ctx.fillStyle = '#ff0000'") and COLOUR.search("rgba(255, 0, 0, .5)")
