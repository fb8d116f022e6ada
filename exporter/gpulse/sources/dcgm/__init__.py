"""DCGM through dcgm-exporter: the field map (fields.py) and the live source (source.py)."""
from .fields import FIELDS, DcgmMapper, is_blank, parse_exposition
from .source import DcgmSource

__all__ = ["FIELDS", "DcgmMapper", "DcgmSource", "is_blank", "parse_exposition"]
