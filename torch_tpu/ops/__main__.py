"""``python -m torch_tpu.ops --list``: the ATen overloads with a native tpu
lowering (ATen -> IR -> vTPU executor, no CPU fallback), and their count.

``python -m torch_tpu.ops --opinfo [--dtypes float32|all] [--report FILE]``:
run PyTorch's OpInfo samples on CPU and tpu (fallback disabled) and compare.
The harness is tools/opinfo.py of a source checkout (a test harness, not
installed with the package): --opinfo finds it next to the package and
exits with an error where there is none (an installed wheel)."""
import argparse
import os
import sys


def _load_opinfo():
    """tools/opinfo.py of the checkout this package was imported from."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    tools = os.path.join(root, "tools")
    path = os.path.join(tools, "opinfo.py")
    if not os.path.isfile(path):
        raise SystemExit(
            "python -m torch_tpu.ops --opinfo: the OpInfo harness (tools/opinfo.py) is part of "
            "the torch_tpu source checkout, not of the installed package; run it from a checkout "
            f"(looked for {path})")
    if tools not in sys.path:
        sys.path.insert(0, tools)
    import opinfo

    return opinfo


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m torch_tpu.ops")
    ap.add_argument("--list", action="store_true", help="print the native ATen overloads")
    ap.add_argument("--opinfo", action="store_true",
                    help="run the OpInfo sweep (CPU vs tpu, fallback disabled)")
    ap.add_argument("--dtypes", default="float32",
                    help="float32 (CI form), all, or a comma list of dtype names")
    ap.add_argument("--report", default=None, help="write a markdown report to this file")
    ap.add_argument("--max-samples", type=int, default=None,
                    help="samples per (op, dtype) (default 5 for float32, 10 for all)")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds per (op, dtype) (default 2 for float32, 5 for all)")
    ap.add_argument("--ops", default=None, help="comma list of OpInfo names to restrict to")
    ap.add_argument("--json", default=None, help="write the per-(op, dtype) results as JSON")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per (op, dtype)")
    args = ap.parse_args(argv)
    opinfo = _load_opinfo() if args.opinfo else None  # before any work: fail fast
    import torch_tpu  # noqa: F401
    import torch

    ops = torch.tpu.native_ops()
    if args.list:
        for name in ops:
            print(f"aten::{name}")
        print(f"{len(ops)} native ATen overloads")
    if args.opinfo:
        cmd = "python -m torch_tpu.ops " + " ".join(argv if argv is not None else sys.argv[1:])
        opinfo.main(dtypes=args.dtypes, report=args.report, max_samples=args.max_samples,
                    budget_s=args.budget,
                    ops=args.ops.split(",") if args.ops else None,
                    verbose=args.verbose, command=cmd, json_path=args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
