"""Command line: `gpulse serve`, `gpulse check-config FILE`, `gpulse export`, `gpulse --version`.

Every config key is a `serve` flag: key `web.listen_address` is `--web.listen-address`,
`sim.scenario` is `--sim.scenario`. Errors are one line on stderr:
exit 2 for bad flags/config, 1 for a fatal runtime problem (no NVML, port taken).
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from typing import Any, Sequence

from . import __version__
from .config import FIELDS, ConfigError, Field, load_config

log = logging.getLogger("gpulse")


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line, without the usage block."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"gpulse: {message} (see gpulse {self.prog.split()[-1]} --help)\n"
                  if self.prog != "gpulse" else f"gpulse: {message} (see gpulse --help)\n")


def flag_name(key: str) -> str:
    return "--" + key.replace("_", "-")


# Spellings shared with other Prometheus exporters, accepted next to the derived flag.
FLAG_ALIASES = {"web.config_file": ("--web.config.file",)}


def _add_field(p: argparse.ArgumentParser, f: Field) -> None:
    helptext = f.help + (f" (default: {_show(f.default)})" if f.default not in ("", ()) else "")
    if f.parse.__name__ == "_parse_bool":
        p.add_argument(flag_name(f.key), dest=f.key, action=argparse.BooleanOptionalAction,
                       default=None, help=helptext)
    else:
        p.add_argument(*FLAG_ALIASES.get(f.key, ()), flag_name(f.key), dest=f.key, default=None,
                       metavar=f.metavar or f.key.split(".")[-1].upper(),
                       choices=None, help=helptext)


def _show(v: Any) -> str:
    if isinstance(v, tuple):
        return ",".join(v)
    return str(v)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gpulse", description="GPU monitoring exporter that finds sync stalls and stragglers.")
    p.add_argument("--version", action="version", version=f"gpulse {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    serve = sub.add_parser("serve", help="run the exporter")
    serve.add_argument("--config", metavar="FILE", help="YAML config file; flags override it")
    for f in FIELDS:
        if f.flag:
            _add_field(serve, f)
    check = sub.add_parser("check-config", help="validate a config file and exit")
    check.add_argument("file", metavar="FILE")
    _add_optional_commands(sub)
    return p


def _add_optional_commands(sub: Any) -> None:
    """Commands that live in their own modules register here (lazy imports)."""
    from .export import add_parser as add_export
    add_export(sub)
    try:
        from .report.cli import add_parser as add_report
    except ImportError:
        return
    add_report(sub)


def _overrides(ns: argparse.Namespace) -> dict[str, Any]:
    return {f.key: getattr(ns, f.key) for f in FIELDS if getattr(ns, f.key, None) is not None}


def cmd_check_config(ns: argparse.Namespace) -> int:
    try:
        load_config(ns.file, environ={})
    except ConfigError as e:
        print(f"gpulse: {e}", file=sys.stderr)
        return 2
    print(f"{ns.file}: OK")
    return 0


def cmd_serve(ns: argparse.Namespace) -> int:
    from .logs import setup_logging
    try:
        cfg = load_config(ns.config, _overrides(ns))
    except ConfigError as e:
        print(f"gpulse: {e}", file=sys.stderr)
        return 2
    setup_logging(cfg.log.level, cfg.log.format)
    from .runtime import Runtime, RuntimeStartError
    try:
        rt = Runtime(cfg, config_file=ns.config)
        rt.start()
    except RuntimeStartError as e:
        print(f"gpulse: {e}", file=sys.stderr)
        return 1

    def stop(signum: int, _frame: Any) -> None:
        log.info("received %s, shutting down", signal.Signals(signum).name)
        threading.Thread(target=rt.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, lambda *_: threading.Thread(target=rt.reload, daemon=True).start())
    rt.serve_forever()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.command == "serve":
        return cmd_serve(ns)
    if ns.command == "check-config":
        return cmd_check_config(ns)
    if ns.command is not None and hasattr(ns, "run"):
        return ns.run(ns)
    parser.print_help()
    return 2
