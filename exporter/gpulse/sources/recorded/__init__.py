"""Recorded GPU logs, read for replay and the post-mortem report."""
from .stream import (FORMATS, CellError, LogError, LogFormatError, LogStream, Record, RecordedRun, detect_format,
                     gpu_sort_key, is_gpu_index, parse_any_time, parse_quantity, parse_smi_time, read_log)

__all__ = ["FORMATS", "LogError", "LogFormatError", "LogStream", "Record", "RecordedRun", "read_log", "detect_format",
           "parse_quantity", "parse_smi_time", "parse_any_time", "CellError", "gpu_sort_key", "is_gpu_index"]
