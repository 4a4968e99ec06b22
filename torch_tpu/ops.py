"""``python -m torch_tpu.ops --list``: the ATen overloads with a native tpu
lowering (ATen -> IR -> vTPU executor, no CPU fallback), and their count."""
import argparse
import sys


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m torch_tpu.ops")
    ap.add_argument("--list", action="store_true", help="print the native ATen overloads")
    args = ap.parse_args(argv)
    import torch_tpu  # noqa: F401
    import torch

    ops = torch.tpu.native_ops()
    if args.list:
        for name in ops:
            print(f"aten::{name}")
        print(f"{len(ops)} native ATen overloads")
    return 0


if __name__ == "__main__":
    sys.exit(main())
