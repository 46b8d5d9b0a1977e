"""Command line: ``python -m pymc_dp demo [--out DIR] [--quick]``."""

from __future__ import annotations

import argparse


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m pymc_dp", description="pymc-dp: differentially private MCMC for PyMC."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser(
        "demo", help="DP logistic regression on synthetic patients, next to plain NUTS"
    )
    demo.add_argument("--out", default="demo_output", help="output directory (demo_output)")
    demo.add_argument("--quick", action="store_true", help="tiny smoke run (numbers meaningless)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from pymc_dp.demo import main as demo_main  # imports PyMC: only when asked

        demo_main(out_dir=args.out, quick=args.quick)


if __name__ == "__main__":
    main()
