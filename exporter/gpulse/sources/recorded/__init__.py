"""Recorded GPU logs -> time-ordered records per GPU, for replay and the post-mortem report.

One module per format (smi_csv, dmon, smi_q, dcgm), named once in formats.FORMATS;
stream.LogStream reads any of them as it is consumed, compressed or not; records.py is what comes out.
"""
from .formats import FORMATS, detect_format
from .records import LogError, LogFormatError, Record, RecordedRun, Rows
from .stream import COMPRESSED_TEXT, LogStream, compression_of, read_log

__all__ = ["COMPRESSED_TEXT", "FORMATS", "LogError", "LogFormatError", "LogStream", "Record", "RecordedRun", "Rows",
           "compression_of", "read_log", "detect_format"]
