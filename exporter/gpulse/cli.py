"""Command line: `gpulse serve`, `gpulse check-config FILE`, `gpulse export`, `gpulse --version`.

Every config key is a `serve` flag: key `web.listen_address` is `--web.listen-address`,
`sim.scenario` is `--sim.scenario`. Errors are one line on stderr:
exit 2 for bad flags/config, 1 for a fatal runtime problem (no NVML, port taken).
"""
from __future__ import annotations

import argparse
import contextlib
import difflib
import gc
import logging
import os
import signal
import sys
import threading
from typing import Any, Iterator, Sequence

from . import __version__
from .config import FIELDS, ConfigError, Field, env_name, env_near_misses, env_settings, flag_name, load_config

log = logging.getLogger("gpulse")


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line, without the usage block, and takes
    flags only as spelled: `--web.listen` is not `--web.listen-address` (a prefix that
    silently matches today may match two flags tomorrow)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        kw.setdefault("allow_abbrev", False)
        super().__init__(*args, **kw)

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        # argparse reports unknown flags from the top parser ("see gpulse --help");
        # report them from the subcommand they were given to
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            self._subparser(getattr(ns, "command", None)).unknown(extras)
        return ns

    def _subparser(self, command: str | None) -> "_Parser":
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and command in action.choices:
                return action.choices[command]
        return self

    def unknown(self, extras: list[str]) -> None:
        hint = ""
        flag = next((a.split("=", 1)[0] for a in extras if a.startswith("--")), None)
        if flag is not None:
            known = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
            close = [o for o in known if o.startswith(flag)] or difflib.get_close_matches(flag, known, n=1)
            if close:
                hint = f"; did you mean {close[0]}?"
        self.error(f"unrecognized arguments: {' '.join(extras)}{hint}")

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"gpulse: {message} (see {self.prog} --help)\n")


# Spellings shared with other Prometheus exporters, accepted next to the derived flag.
FLAG_ALIASES = {"web.config_file": ("--web.config.file",)}


def _add_field(p: argparse.ArgumentParser, f: Field) -> None:
    helptext = f.help.replace("%", "%%") + (f" (default: {f.show(f.default)})" if f.default not in ("", ()) else "")
    if f.parse.__name__ in ("parse_bool", "parse_auto_bool"):
        p.add_argument(flag_name(f.key), dest=f.key, action=argparse.BooleanOptionalAction,
                       default=None, help=helptext)
    else:
        # choices are listed in the metavar but checked by the config (one message for
        # a bad value, whether it came from a flag, the environment or the file)
        metavar = "{" + ",".join(f.choices) + "}" if f.choices else f.metavar or f.key.split(".")[-1].upper()
        p.add_argument(*FLAG_ALIASES.get(f.key, ()), flag_name(f.key), dest=f.key, default=None,
                       metavar=metavar, help=helptext)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gpulse", description="GPU monitoring exporter that finds sync stalls and stragglers.")
    p.add_argument("--version", action="version", version=f"gpulse {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    serve = sub.add_parser("serve", help="run the exporter")
    serve.add_argument("--config", metavar="FILE", help="YAML config file; flags override it")
    for f in FIELDS:
        if f.flag:
            _add_field(serve, f)
    check = sub.add_parser("check-config", help="validate a config file and the GPULSE_* environment, as serve would",
                           description="Validate a config file together with the GPULSE_* environment variables "
                                       "and the web config file they name, exactly as `gpulse serve --config FILE` "
                                       "would read them, and exit.")
    check.add_argument("file", metavar="FILE", nargs="?", help="YAML config file (omit to check the environment alone)")
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
    from .http.webconfig import WebConfigError, load_web_config
    try:
        cfg = load_config(ns.file)
        load_web_config(cfg.web.config_file)      # serve refuses to start on a bad one, so say it now
    except (ConfigError, WebConfigError) as e:
        print(f"gpulse: {e}", file=sys.stderr)
        return 2
    for warning in env_near_misses(os.environ):
        print(f"gpulse: warning: {warning}", file=sys.stderr)
    env = sorted(env_name(k) for k in env_settings(os.environ))
    with_env = f" (with {', '.join(env)} from the environment)" if env else ""
    print(f"{ns.file or 'environment'}: OK{with_env}")
    return 0


def cmd_serve(ns: argparse.Namespace) -> int:
    from .logsetup import setup_logging
    try:
        cfg = load_config(ns.config, _overrides(ns))
    except ConfigError as e:
        print(f"gpulse: {e}", file=sys.stderr)
        return 2
    setup_logging(cfg.log.level, cfg.log.format)
    for warning in env_near_misses(os.environ):
        log.warning("%s", warning)
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
        with _batch_gc():
            return ns.run(ns)
    parser.print_help()
    return 2


# The collector's thresholds while a batch command (report, export) runs. They build
# large structures that live to the end of the run (tracks, cause checkpoints, each
# GPU's state) and make almost no reference cycles, so each collection of the older
# generations walks millions of live objects to free next to nothing: at the default
# (700, 10, 10) it was 17-20 % of a 1,024-GPU report's CPU and 10-15 % of a log's.
BATCH_GC_THRESHOLDS = (50_000, 20, 20)


@contextlib.contextmanager
def _batch_gc() -> Iterator[None]:
    """BATCH_GC_THRESHOLDS for the command, the caller's thresholds back afterwards
    (a test that calls main() keeps its own)."""
    before = gc.get_threshold()
    gc.set_threshold(*BATCH_GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)
