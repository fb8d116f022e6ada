"""DCGM through dcgm-exporter: the field map and the live source."""
from .source import FIELDS, DcgmMapper, DcgmSource, is_blank, parse_exposition

__all__ = ["FIELDS", "DcgmMapper", "DcgmSource", "is_blank", "parse_exposition"]
