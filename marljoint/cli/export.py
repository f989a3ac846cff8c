"""The ``marljoint export`` subcommand: a trained run's greedy policies as TorchScript or ONNX files.

:func:`register` adds it to an ``argparse`` subparsers object; the command stores its handler in ``args.handler``.
Bad input (a missing run, an unknown format, onnx not installed, a policy that cannot be exported) ends it with one
``marljoint export: error: ...`` line and exit status 2, as every ``marljoint`` command.

Example:
    >>> import argparse
    >>> parser = argparse.ArgumentParser(prog="marljoint")
    >>> register(parser.add_subparsers(dest="command"))
    >>> args = parser.parse_args(["export", "runs/spread", "--format", "onnx"])
    >>> args.format, args.out
    ('onnx', None)
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from marljoint.cli.args import out_path

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Adds the ``export`` subcommand to an ``argparse`` subparsers object (sets ``handler``; returns 0)."""
    p = subparsers.add_parser(
        "export",
        help="write a run's greedy policies as TorchScript or ONNX files",
        description=(
            "Write each agent group's greedy acting policy (observation statistics, actor network, masked greedy "
            "choice) as one standalone file, TorchScript (.pt, runs with torch alone) or ONNX (.onnx, runs with "
            "onnxruntime), and a manifest.json listing agents, files, inputs, outputs and spaces."
        ),
        epilog="Example:  marljoint export runs/spread --format onnx --out deploy/spread",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="a run directory written by marljoint train")
    # The format is checked by export_run rather than by argparse choices, so that an unknown one gets the same
    # one-line message from the command and from Python.
    p.add_argument(
        "--format",
        metavar="FORMAT",
        default="torchscript",
        help='torchscript (default) or onnx (needs pip install "marljoint[export]")',
    )
    p.add_argument("--out", metavar="DIR", type=out_path, help="directory to write (default RUN_DIR/export/<format>)")
    p.add_argument("--checkpoint", metavar="FILE", type=Path, help="export this checkpoint instead of the newest")
    p.add_argument(
        "--trust-run",
        action="store_true",
        help="export a run whose config.toml is not signed with your key (from another user, or an older marljoint) "
        "even if its env is a function to call (package.module:function), which is refused otherwise; only for runs "
        "you trust",
    )
    p.add_argument("--quiet", action="store_true", help="print nothing")
    p.set_defaults(handler=_export)


def _export(args: argparse.Namespace) -> int:
    from marljoint.run.export import export_run

    result = export_run(args.run_dir, args.format, out=args.out, checkpoint=args.checkpoint, trust_run=args.trust_run)
    if not args.quiet:
        for path in result.files:
            print(path)
        print(result.manifest)
    return 0
